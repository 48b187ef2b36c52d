"""promptfoo exports (`promptfoo eval -o results.json`, version 3, or JSON Lines) as trials.

Rows are grouped by provider, prompt and test (the test's vars), never by `testIdx`, which
promptfoo gives every repeat of its own; within a test, rows are ordered by `testIdx`, or by
the `repeatIndex` of a traced run. A row with `failureReason` 2 or no `response` is an error
trial; an assertion failure (`failureReason` 1) still carries its decision.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import msgspec

from ..errors import InputError
from ..evidence import Evidence
from ..fingerprints import input_names
from ..suite import Case, Suite
from ..trial_model import Decision, Trial
from ..wire_types import JsonObject, JsonValue
from . import Imported, ImportOptions, decision_at

PROVIDER_ERROR = 2
"""promptfoo's failureReason for a provider error (1 is a failed assertion)."""


class _Provider(msgspec.Struct):
    id: str | None = None
    label: str | None = None


class _Prompt(msgspec.Struct):
    raw: str | None = None


class _Response(msgspec.Struct):
    output: JsonValue = None


class Row(msgspec.Struct):
    """The fields of one promptfoo result row that verdictgate reads; the rest are skipped."""

    testIdx: int = 0
    promptId: str | None = None
    provider: _Provider | str | None = None
    prompt: _Prompt | None = None
    vars: JsonObject | None = None
    response: _Response | None = None
    failureReason: int | None = None
    traceId: str | None = None
    success: bool | None = None
    latencyMs: float | None = None

    def provider_id(self) -> str:
        if isinstance(self.provider, str):
            return self.provider
        return (self.provider.id or self.provider.label or "") if self.provider else ""

    def provider_names(self) -> set[str]:
        if isinstance(self.provider, _Provider):
            return {name for name in (self.provider.id, self.provider.label) if name}
        return {self.provider} if self.provider else set()


class _TraceMetadata(msgspec.Struct):
    repeatIndex: int | None = None


class _Trace(msgspec.Struct):
    traceId: str | None = None
    metadata: _TraceMetadata | None = None


class _Results(msgspec.Struct):
    version: int | None = None
    results: list[Row] = msgspec.field(default_factory=list)


class _Export(msgspec.Struct):
    evalId: str | None = None
    results: _Results | None = None
    traces: list[_Trace] | None = None


_ROWS_START = b'\n    "results": ['
_ROW_SEPARATOR = b"\n      },\n      {"
_ROWS_END = b"\n      }\n    ]"
CHUNK_BYTES = 1 << 24
"""Bytes of an export read at a time (16 MiB): rows are split out of each chunk as it comes, so
memory does not grow with the file."""
_ROW_DECODER: msgspec.json.Decoder[Row] = msgspec.json.Decoder(Row)
_EVAL_ID = re.compile(rb'"evalId": "([^"\\]*)"')


def _stream_rows(stream: BinaryIO, source: str) -> Iterator[Row] | None:
    """Rows of an export as `promptfoo eval -o` writes it (JSON indented by two spaces), one at
    a time from 16 MiB chunks, so memory does not grow with the file; None when the file is laid
    out otherwise."""
    head = b""
    start = -1
    while start < 0 or len(head) < start + len(_ROWS_START) + len(b"\n      {"):
        more = stream.read(CHUNK_BYTES)
        if not more:
            break
        head += more
        start = head.find(_ROWS_START)
    if start < 0 or not head[start + len(_ROWS_START) :].startswith(b"\n      {"):
        return None
    buffer = head[start + len(_ROWS_START) + len(b"\n      {") :]

    def rows() -> Iterator[Row]:
        nonlocal buffer
        while True:
            end = buffer.find(_ROWS_END)
            pieces = (buffer[:end] if end >= 0 else buffer).split(_ROW_SEPARATOR)
            complete = pieces if end >= 0 else pieces[:-1]
            for piece in complete:
                try:
                    yield _ROW_DECODER.decode(b"{" + piece + b"\n}")
                except (msgspec.ValidationError, msgspec.DecodeError) as error:
                    raise InputError(f"not a promptfoo result row: {error}", path=source) from None
            if end >= 0:
                return
            more = stream.read(CHUNK_BYTES)
            if not more:
                raise InputError("the export ends inside its results", path=source)
            buffer = pieces[-1] + more

    return rows()


def _export(data: bytes, source: str) -> tuple[_Export, list[Row]]:
    """The decoded export and its result rows (an export without `results` is refused)."""
    try:
        export: _Export = msgspec.json.decode(data, type=_Export)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise InputError(f"not a promptfoo export: {error}", path=source) from None
    if export.results is None:
        raise InputError("not a promptfoo export: no `results`", path=source, field="results")
    return export, export.results.results


def _repeat_indices(export: _Export) -> dict[str, int]:
    return {
        trace.traceId: trace.metadata.repeatIndex
        for trace in export.traces or ()
        if trace.traceId and trace.metadata and trace.metadata.repeatIndex is not None
    }


def _json_lines(stream: BinaryIO, source: str) -> Iterator[Row]:
    for number, line in enumerate(stream, 1):
        if line.strip():
            try:
                yield _ROW_DECODER.decode(line)
            except (msgspec.ValidationError, msgspec.DecodeError) as error:
                raise InputError(
                    f"not a promptfoo result row: {error}", path=source, line=number
                ) from None


def _only_one(values: set[str], argument: str, what: str, source: str) -> None:
    if len(values) > 1:
        raise InputError(
            f"the export mixes {len(values)} {what} ({', '.join(sorted(values))}); choose one "
            f"with {{{argument}}}",
            path=source,
            arguments=(argument,),
        )


_RowTrial = tuple[Decision | None, str | None, bool | None]
"""A row's trial: (decision, None, passed) or (None, error type, passed)."""


@dataclass
class _Test:
    """One test's rows, kept small: the order key and the trial of each row."""

    expected: str | None
    order: array[int] = field(default_factory=lambda: array("q"))
    trace_ids: list[str | None] = field(default_factory=list)
    trials: list[_RowTrial] = field(default_factory=list)
    latencies: list[float | None] = field(default_factory=list)


def read(path: Path, options: ImportOptions, suite: Suite | None, key: bytes | None) -> Imported:
    """Read an export into trials, refusing a mix of providers or prompts and rows that match
    no suite case. Rows are streamed; memory grows with tests, a few bytes per row."""
    source = str(path)
    eval_id, whole, seen, (tests, providers, prompts, kept) = _read_rows(path, source, options)
    _refuse_nothing_kept(kept, seen, options, source)
    _only_one(providers, "provider", "providers", source)
    _only_one(prompts, "prompt_id", "prompts", source)
    repeats: dict[str, int] = {}
    if any(trace for test in tests.values() for trace in test.trace_ids):
        repeats = _repeat_indices(whole or _export(path.read_bytes(), source)[0])
    by_input = {case.input: case for case in suite.cases if case.input} if suite else {}
    by_input.update({case.id: case for case in suite.cases} if suite else {})  # or by explicit id
    if suite is not None:
        _refuse_unmatched(tests, by_input, options, source)
    evidence = Evidence()
    cases = []
    for text, test in tests.items():
        matched = by_input.get(text)
        aliases: tuple[str, ...]
        key_id: str | None
        if matched is not None and matched.input != text:  # matched by its explicit id
            case, aliases, key_id = matched, (), None
        else:
            name, aliases, key_id = input_names(text, key, matched.id if matched else None)
            case = matched or Case(name, None, test.expected)
        positions = _positions(test, repeats)
        evidence.add_all(_test_trials(test, case, positions, eval_id, (aliases, key_id)))
        cases.append(Case(case.id, None, case.expected))
    return Imported(evidence, tuple(cases), eval_id)


def _read_rows(
    path: Path, source: str, options: ImportOptions
) -> tuple[str, _Export | None, _Seen, tuple[dict[str, _Test], set[str], set[str], int]]:
    """The export's eval id, the export itself when it had to be decoded whole (None when its
    rows were streamed), what it holds, and its kept rows grouped by test (`_group`)."""
    try:
        stream = path.open("rb")
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=source) from None
    with stream:
        first = stream.read(1 << 16)
        stream.seek(0)
        eval_id = match.group(1).decode() if (match := _EVAL_ID.search(first)) else path.stem
        is_document = first.lstrip().startswith(b"{") and b"\n{" not in first.strip()
        rows = _stream_rows(stream, source) if is_document else _json_lines(stream, source)
        whole = None
        if rows is None:  # a compact or otherwise laid-out export: decoded in one piece
            stream.seek(0)
            whole, whole_rows = _export(stream.read(), source)
            eval_id, rows = whole.evalId or eval_id, iter(whole_rows)
        seen = _Seen()
        return eval_id, whole, seen, _group(rows, options, seen, source)


def _refuse_nothing_kept(kept: int, seen: _Seen, options: ImportOptions, source: str) -> None:
    """Refuse an export that names no provider, has no rows, or none that the --provider or
    --prompt-id filter keeps (naming what it has instead)."""
    if kept and not seen.providers:
        raise InputError("names no provider on any row: not a promptfoo export", path=source)
    if kept:
        return
    if not (options.provider or options.prompt_id):
        raise InputError("the export has no rows", path=source, field="results")
    argument = "provider" if options.provider else "prompt_id"
    present = seen.providers if options.provider else seen.prompts
    raise InputError(
        f"no row matches {options.provider or options.prompt_id!r}; the export has "
        + ", ".join(sorted(present)),
        path=source,
        arguments=(argument,),
    )


def _refuse_unmatched(
    tests: dict[str, _Test], by_input: dict[str, Case], options: ImportOptions, source: str
) -> None:
    """Refuse rows that match no suite case, by input or by id."""
    unmatched = sum(len(test.order) for text, test in tests.items() if text not in by_input)
    if unmatched:
        raise InputError(
            f"{unmatched} rows match no suite case by input ({{case_by}} {options.case_by})",
            path=source,
            arguments=("suite", "case_by"),
        )


def _positions(test: _Test, repeats: dict[str, int]) -> list[int]:
    """Each row's trial index: its repeat index when a traced run gave every row one, else its
    rank by `testIdx`."""
    indexed = [repeats.get(trace) if trace else None for trace in test.trace_ids]
    known = [index for index in indexed if index is not None]
    if repeats and len(known) == len(indexed):  # every row has its repeat index
        return known
    ranked = sorted(range(len(test.order)), key=test.order.__getitem__)
    positions = [0] * len(ranked)
    for rank, row_number in enumerate(ranked):
        positions[row_number] = rank
    return positions


def _test_trials(
    test: _Test,
    case: Case,
    positions: list[int],
    eval_id: str,
    names: tuple[tuple[str, ...], str | None],
) -> Iterator[Trial]:
    """The trials of one test's rows, at their positions, with the further names of its input
    and their key id (`names`)."""
    aliases, key_id = names
    for position, (decision, error, passed), latency in zip(
        positions, test.trials, test.latencies, strict=True
    ):
        yield Trial(
            case.id,
            position,
            decision,
            eval_id,
            case.expected,
            error,
            passed=passed,
            latency_ms=latency,
            aliases=aliases,
            key_id=key_id,
        )


@dataclass
class _Seen:
    """What an export holds besides its kept rows: every provider (id and label) and prompt."""

    providers: set[str] = field(default_factory=set)
    prompts: set[str] = field(default_factory=set)


def _group(
    rows: Iterator[Row], options: ImportOptions, seen: _Seen, source: str
) -> tuple[dict[str, _Test], set[str], set[str], int]:
    """Rows grouped by test (one provider and prompt after filtering), with what was kept;
    `seen` collects every provider and prompt, kept or not."""
    tests: dict[str, _Test] = {}
    providers: set[str] = set()
    prompts: set[str] = set()
    shared: dict[_RowTrial, _RowTrial] = {}  # one object per distinct decision
    kept = 0
    for number, row in enumerate(rows):
        seen.providers.update(row.provider_names())
        seen.prompts.add(row.promptId or "")
        if options.provider is not None and options.provider not in row.provider_names():
            continue
        if options.prompt_id is not None and row.promptId != options.prompt_id:
            continue
        kept += 1
        providers.add(row.provider_id())
        prompts.add(row.promptId or "")
        text = _input_text(row, options)
        test = tests.get(text)
        if test is None:
            test = tests[text] = _Test(_expected(row, options))
        test.order.append(row.testIdx)
        test.trace_ids.append(row.traceId)
        trial = _trial(row, options, source, number)
        test.trials.append(shared.setdefault(trial, trial))
        test.latencies.append(row.latencyMs)
    return tests, providers, prompts, kept


def _input_text(row: Row, options: ImportOptions) -> str:
    variables = row.vars or {}
    if options.case_by == "prompt":
        return (row.prompt.raw if row.prompt else None) or ""
    if options.input_var is not None:
        return str(variables.get(options.input_var, ""))
    return json.dumps(
        {k: v for k, v in variables.items() if k != options.expected_var}, sort_keys=True
    )


def _expected(row: Row, options: ImportOptions) -> str | None:
    if options.expected_var is None:
        return None
    value = (row.vars or {}).get(options.expected_var)
    return value if isinstance(value, str) else None


def _trial(row: Row, options: ImportOptions, source: str, number: int) -> _RowTrial:
    """(decision, None, passed) or (None, error type, passed) for row `number`; `passed` is
    promptfoo's `success` (None for a provider error, which no assertion judged)."""
    if row.failureReason == PROVIDER_ERROR or row.response is None:
        return None, "provider_error", None
    decision = decision_at(
        row.response.output,
        options.decision_path,
        source=source,
        field=f"results[{number}].response.output",
    )
    error = None if decision is not None else "decision_path"
    return decision, error, row.success
