from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Trial(_message.Message):
    __slots__ = ("run", "suite", "point", "case", "trial", "outcome", "verdict", "tools", "reason", "error_type", "expected", "invariants_failed", "invariants_warned", "passed", "latency_ms", "evaluation_skipped", "isolation", "tied_steps", "aliases", "key_id")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SUITE_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    CASE_FIELD_NUMBER: _ClassVar[int]
    TRIAL_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    INVARIANTS_FAILED_FIELD_NUMBER: _ClassVar[int]
    INVARIANTS_WARNED_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    TIED_STEPS_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    run: str
    suite: str
    point: str
    case: str
    trial: int
    outcome: str
    verdict: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    error_type: str
    expected: str
    invariants_failed: _containers.RepeatedScalarFieldContainer[str]
    invariants_warned: _containers.RepeatedScalarFieldContainer[str]
    passed: bool
    latency_ms: float
    evaluation_skipped: bool
    isolation: str
    tied_steps: _containers.RepeatedScalarFieldContainer[int]
    aliases: _containers.RepeatedScalarFieldContainer[str]
    key_id: str
    def __init__(self, run: _Optional[str] = ..., suite: _Optional[str] = ..., point: _Optional[str] = ..., case: _Optional[str] = ..., trial: _Optional[int] = ..., outcome: _Optional[str] = ..., verdict: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., error_type: _Optional[str] = ..., expected: _Optional[str] = ..., invariants_failed: _Optional[_Iterable[str]] = ..., invariants_warned: _Optional[_Iterable[str]] = ..., passed: _Optional[bool] = ..., latency_ms: _Optional[float] = ..., evaluation_skipped: _Optional[bool] = ..., isolation: _Optional[str] = ..., tied_steps: _Optional[_Iterable[int]] = ..., aliases: _Optional[_Iterable[str]] = ..., key_id: _Optional[str] = ...) -> None: ...

class Admission(_message.Message):
    __slots__ = ("run_id", "suite", "point", "status", "reasons", "headline", "final", "exit_code", "trials_expected", "trials_received", "pairs", "flips", "ci_low", "ci_high", "report")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SUITE_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    HEADLINE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TRIALS_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    TRIALS_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    FLIPS_FIELD_NUMBER: _ClassVar[int]
    CI_LOW_FIELD_NUMBER: _ClassVar[int]
    CI_HIGH_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    suite: str
    point: str
    status: str
    reasons: _containers.RepeatedScalarFieldContainer[str]
    headline: str
    final: bool
    exit_code: int
    trials_expected: int
    trials_received: int
    pairs: int
    flips: int
    ci_low: float
    ci_high: float
    report: str
    def __init__(self, run_id: _Optional[str] = ..., suite: _Optional[str] = ..., point: _Optional[str] = ..., status: _Optional[str] = ..., reasons: _Optional[_Iterable[str]] = ..., headline: _Optional[str] = ..., final: _Optional[bool] = ..., exit_code: _Optional[int] = ..., trials_expected: _Optional[int] = ..., trials_received: _Optional[int] = ..., pairs: _Optional[int] = ..., flips: _Optional[int] = ..., ci_low: _Optional[float] = ..., ci_high: _Optional[float] = ..., report: _Optional[str] = ...) -> None: ...

class GetAdmissionRequest(_message.Message):
    __slots__ = ("run_id", "format")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    format: str
    def __init__(self, run_id: _Optional[str] = ..., format: _Optional[str] = ...) -> None: ...

class WatchAdmissionRequest(_message.Message):
    __slots__ = ("run_id", "format")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    format: str
    def __init__(self, run_id: _Optional[str] = ..., format: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class RunSummary(_message.Message):
    __slots__ = ("run_id", "suite", "point", "status", "final", "trials_received", "trials_expected")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SUITE_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    TRIALS_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    TRIALS_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    suite: str
    point: str
    status: str
    final: bool
    trials_received: int
    trials_expected: int
    def __init__(self, run_id: _Optional[str] = ..., suite: _Optional[str] = ..., point: _Optional[str] = ..., status: _Optional[str] = ..., final: _Optional[bool] = ..., trials_received: _Optional[int] = ..., trials_expected: _Optional[int] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunSummary]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[RunSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
