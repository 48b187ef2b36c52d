"""Decision-point instrumentation on the OpenTelemetry API alone.

    @decision_point("payment_router")
    def route(message: str) -> str: ...

    with trial(run="nightly-42", case="c1", index=0, expected="card_security"):
        route("I do not recognise this card purchase.")

Each call emits one `decide {point}` span: the input's fingerprint (never the input), the
verdict or tool path, the outcome. An exception becomes outcome `error` with `error.type` and
is re-raised; its message is not recorded. With no SDK configured, a call costs one
check of the global tracer provider.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast
from weakref import WeakKeyDictionary

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..decision_rules import DecisionRule
from ..errors import InvalidDecision
from ..fingerprints import fingerprint_key, input_names
from ..policy import Policy
from ..suite import Suite
from ..tiers.cascade import TierOutcome, Tiers
from ..tiers.invariants import Invariant
from ..trial_model import Answer, Isolation, TiedSteps, Trial, decision_from_value
from ..wire_types import AttributeValue
from . import conventions as names
from .spans import decision_attributes, flat_ranges, run_attributes, trial_attributes

if TYPE_CHECKING:
    from .trial_capture import OpenTrial

NOTHING_CHECKED = TierOutcome()

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class TrialScope:
    """The trial a decision belongs to, set by a harness or the runner around the call."""

    run: str
    index: int
    case: str | None = None
    expected: str | None = None
    suite: str | None = None


_CURRENT_TRIAL: ContextVar[TrialScope | None] = ContextVar("verdictgate_trial", default=None)


@contextmanager
def trial(
    *,
    run: str,
    index: int,
    case: str | None = None,
    expected: str | None = None,
    suite: str | None = None,
    decision: str | DecisionRule | None = None,
    point: str = "agent",
    tracer_provider: trace.TracerProvider | None = None,
) -> Iterator[TrialScope]:
    """Mark the decisions made inside as trial `index` of `case` in `run`.

    Without `case`, the case is the fingerprint of the decision's input. With a `decision`
    rule (`tools`, `toolset`, `agents`, `nodes`, `attribute:KEY`), the trial is itself decision
    point `point`: its `decide {point}` span (on `tracer_provider`, else the global one) is
    current inside, and the spans the agent framework makes there decide it when the block
    ends; an exception makes it an error trial and is re-raised.
    """
    scope = TrialScope(run, index, case, expected, suite)
    token = _CURRENT_TRIAL.set(scope)
    try:
        if decision is None:
            yield scope
            return
        from .trial_capture import attach_capture

        rule = decision if isinstance(decision, DecisionRule) else DecisionRule.parse(decision)
        attach_capture(tracer_provider)
        with _decision_span(point, tracer_provider=tracer_provider, rule=rule):
            yield scope
    finally:
        _CURRENT_TRIAL.reset(token)


_GLOBAL_TRACER = trace.get_tracer(names.INSTRUMENTATION_SCOPE)
"""Follows the global provider, including one set after import."""
_TRACERS: WeakKeyDictionary[trace.TracerProvider, trace.Tracer] = WeakKeyDictionary()


def _sdk_configured(tracer_provider: trace.TracerProvider | None) -> bool:
    """Whether spans can be recorded: an explicit provider, or a global one that an SDK set."""
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _tracer(tracer_provider: trace.TracerProvider | None) -> trace.Tracer:
    """The verdictgate tracer of a provider, made once (getting a tracer is not cheap)."""
    if tracer_provider is None:
        return _GLOBAL_TRACER
    tracer = _TRACERS.get(tracer_provider)
    if tracer is None:
        tracer = _TRACERS[tracer_provider] = tracer_provider.get_tracer(names.INSTRUMENTATION_SCOPE)
    return tracer


class DecisionRecorder:
    """The handle of one decision span: record the answer, or an error, exactly once."""

    def __init__(self, span: trace.Span, key: bytes | None, case: str | None = None) -> None:
        self._span = span
        self._key = key
        self._case = case
        self._fingerprinted = False
        self.recorded = False
        self.spans: OpenTrial | None = None
        """With a decision rule: the framework spans below this one, which decide the trial."""

    def input(self, text: str) -> None:
        """Identify the case by the input's fingerprint (the first input given counts). When
        the trial names the case otherwise, the fingerprint is a further name of its input
        (`verdictgate.case.aliases`), so runs that name it either way count it once. A keyed
        fingerprint carries its key's id, unless the trial's own keyed name may be another's."""
        if not self._span.is_recording() or self._fingerprinted:
            return
        self._fingerprinted = True
        case, aliases, key = input_names(text, self._key, self._case)
        if self._case is None:
            self._case = case
            self._span.set_attribute(names.CASE_ID, case)
        if aliases:
            self._span.set_attribute(names.CASE_ALIASES, list(aliases))
        if key is not None:
            self._span.set_attribute(names.CASE_KEY_ID, key)

    def record(self, answer: object, tiers: TierOutcome = NOTHING_CHECKED) -> None:
        """Record the agent's answer and what the assertion tiers found on it (names of broken
        invariants, the verdict, a similarity, a skip); an answer that is not a decision is an
        `invalid_return` error, and a tier that raised (`tiers.error`, e.g. `judge:TimeoutError`)
        makes the trial an error of that type: a fault, not a verdict on the answer. Under a
        decision rule the decision comes from the framework's spans, and `answer` only from
        the tiers' point of view (they have judged it already)."""
        tied: TiedSteps = ()
        if self.spans is not None:
            derived = self.spans.derive()
            if derived.error_type is not None:
                self.record_error(derived.error_type)
                return
            answer, tied = derived.decision, derived.tied_steps
        try:
            decision = decision_from_value(answer)
        except InvalidDecision:
            self.record_error("invalid_return")
            return
        if tiers.error is not None:
            self.record_error(tiers.error)
            return
        attributes = decision_attributes(decision)
        if tiers.failed:
            attributes[names.INVARIANT_FAILED] = list(tiers.failed)
        if tiers.warned:
            attributes[names.INVARIANT_WARNED] = list(tiers.warned)
        if tiers.passed is not None:
            attributes[names.PASSED] = tiers.passed
        if tiers.similarity is not None:
            attributes[names.SEMANTIC_SIMILARITY] = float(tiers.similarity)
        if tiers.skipped:
            attributes[names.EVALUATION_SKIPPED] = True
        if tied:
            attributes[names.TIED_STEPS] = flat_ranges(tied)
        self._finish(attributes)

    def record_error(self, error_type: str) -> None:
        """Record that the call failed, named by a short type (never a message)."""
        if self._finish(decision_attributes(None, error_type)):
            self._span.set_status(Status(StatusCode.ERROR))

    def _finish(self, attributes: dict[str, AttributeValue]) -> bool:
        """Set the outcome once; True when this call set it on a recording span."""
        if self.recorded:
            return False
        self.recorded = True
        if not self._span.is_recording():
            return False
        self._span.set_attributes(attributes)
        return True


def _scope_attributes(point: str, scope: TrialScope | None) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {names.POINT: point}
    if scope is None:
        return attributes
    attributes[names.RUN_ID] = scope.run
    attributes[names.TRIAL] = scope.index
    if scope.case is not None:
        attributes[names.CASE_ID] = scope.case
    if scope.expected is not None:
        attributes[names.CASE_EXPECTED] = scope.expected
    if scope.suite is not None:
        attributes[names.SUITE] = scope.suite
    return attributes


@contextmanager
def decision(
    point: str,
    *,
    input: str | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    key: str | bytes | None = None,
    rule: DecisionRule | None = None,
) -> Iterator[DecisionRecorder]:
    """A `decide {point}` span around one decision; record the answer with `d.record(...)`.

    An exception inside becomes outcome `error` with `error.type` and is re-raised. A block that
    records nothing is an error of type `unrecorded`; under a decision `rule` the spans an
    agent framework made inside decide instead (`attach_capture` must have run).
    """
    if not _sdk_configured(tracer_provider):
        yield DecisionRecorder(trace.INVALID_SPAN, None)
        return
    span_cm = _tracer(tracer_provider).start_as_current_span(
        names.decision_span_name(point),
        kind=SpanKind.INTERNAL,
        record_exception=False,  # exception messages may quote the input
        set_status_on_exception=False,
    )
    with span_cm as span:
        if not span.is_recording():
            yield DecisionRecorder(span, None)
            return
        scope = _CURRENT_TRIAL.get()
        span.set_attributes(_scope_attributes(point, scope))
        recorder = DecisionRecorder(
            span, fingerprint_key(key), scope.case if scope is not None else None
        )
        if input is not None:
            recorder.input(input)
        with ExitStack() as stack:
            if rule is not None:
                from .trial_capture import capturing  # the SDK, only where a rule is used

                span.set_attribute(names.DECISION_RULE, str(rule))
                recorder.spans = stack.enter_context(capturing(span, rule))
            try:
                yield recorder
            except BaseException as error:
                recorder.record_error(type(error).__name__)
                raise
            if not recorder.recorded:
                if rule is not None:
                    recorder.record(None)
                else:
                    recorder.record_error("unrecorded")


def recorded_trial(
    trial: Trial, suite: Suite, tracer_provider: trace.TracerProvider | None = None
) -> None:
    """Record a trial collected earlier (a stored run being continued) as the decision span it
    was: its latency is the span's duration, none when it had none."""
    if not _sdk_configured(tracer_provider):
        return
    start = time.time_ns()
    latency = 0 if trial.latency_ms is None else round(trial.latency_ms * 1e6)
    span = _tracer(tracer_provider).start_span(
        names.decision_span_name(suite.point),
        kind=SpanKind.INTERNAL,
        attributes={names.POINT: suite.point, names.SUITE: suite.name, **trial_attributes(trial)},
        start_time=start,
    )
    if trial.decision is None:
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=start + latency)


_decision_span = decision
"""`decision`, for `trial`, whose argument of that name hides it."""


def decision_point(
    point: str,
    *,
    verdict: Callable[[Answer], object] | None = None,
    input: Callable[..., str] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    key: str | bytes | None = None,
    invariants: Sequence[Invariant] = (),
) -> Callable[[F], F]:
    """Decorate a sync or async function as decision point `point`.

    `verdict(result)` picks the decision out of the return value (default: the value itself);
    `input(*args, **kwargs)` picks the input text (default: the first string argument). The
    function's return value and exceptions are passed through unchanged. `invariants` are
    checked on (result, input text); only the names of those broken are recorded, and the
    trial passes when no blocking one broke.
    """
    recording = _PointRecording(
        point, verdict, input, tracer_provider, key, Tiers(tuple(invariants))
    )

    def decorate(function: F) -> F:
        wrapped = (
            _async_decision_point(function, recording)
            if inspect.iscoroutinefunction(function)
            else _sync_decision_point(function, recording)
        )
        return cast(F, wrapped)  # functools.wraps: it is called and answers as `function` is

    return decorate


@dataclass(frozen=True)
class _PointRecording:
    """How a decorated decision point records a call: its decision span, and how the input
    and the decision are read from the call and its result."""

    point: str
    verdict_of: Callable[[Answer], object] | None
    input_of: Callable[..., str] | None
    tracer_provider: trace.TracerProvider | None
    key: str | bytes | None
    tiers: Tiers

    def input(self, args: tuple[object, ...], kwargs: dict[str, object]) -> str | None:
        """The call's input text: what `input_of` picks, else its first string argument."""
        if self.input_of is not None:
            return self.input_of(*args, **kwargs)
        return next((a for a in (*args, *kwargs.values()) if isinstance(a, str)), None)

    def span(self, given: str | None) -> AbstractContextManager[DecisionRecorder]:
        """The decision span of one call with input `given`."""
        return decision(self.point, input=given, tracer_provider=self.tracer_provider, key=self.key)

    def record(self, recorder: DecisionRecorder, result: object, given: str | None) -> None:
        """Record the decision `verdict_of` reads from `result`, with what the invariants found."""
        try:
            answer = result if self.verdict_of is None else self.verdict_of(result)
        except Exception:
            recorder.record_error("verdict_unreadable")
            return
        recorder.record(answer, self.tiers.check(result, given))


def _sync_decision_point(
    function: Callable[..., object], recording: _PointRecording
) -> Callable[..., object]:
    """`function`, each call recorded as a decision when an SDK is configured."""
    tracer_provider = recording.tracer_provider

    @functools.wraps(function)
    def wrapper(*args: object, **kwargs: object) -> object:
        if not _sdk_configured(tracer_provider):
            return function(*args, **kwargs)
        given = recording.input(args, kwargs)
        with recording.span(given) as recorder:
            result = function(*args, **kwargs)
            recording.record(recorder, result, given)
            return result

    return wrapper


def _async_decision_point(
    function: Callable[..., Awaitable[object]], recording: _PointRecording
) -> Callable[..., Awaitable[object]]:
    """Coroutine function `function`, each call recorded as a decision when an SDK is
    configured."""
    tracer_provider = recording.tracer_provider

    @functools.wraps(function)
    async def async_wrapper(*args: object, **kwargs: object) -> object:
        if not _sdk_configured(tracer_provider):
            return await function(*args, **kwargs)
        given = recording.input(args, kwargs)
        with recording.span(given) as recorder:
            result = await function(*args, **kwargs)
            recording.record(recorder, result, given)
            return result

    return async_wrapper


@contextmanager
def trial_span(
    *,
    run: str,
    case: str,
    index: int,
    decision: str,
    expected: str | None = None,
    suite: str | None = None,
    point: str | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> Iterator[trace.Span]:
    """A `verdictgate.trial` span, current inside, around a call of an agent in another process
    (its trace context propagated with the call). A receiver (`verdictgate serve`) derives the
    trial's decision under rule `decision` from the framework spans the agent exports in the
    same trace below this span, once the trace has been quiet for its settle time. An exception
    inside makes the trial an error of its type (never its message) and is re-raised."""
    rule = DecisionRule.parse(decision)
    attributes: dict[str, AttributeValue] = {
        names.RUN_ID: run,
        names.CASE_ID: case,
        names.TRIAL: index,
        names.DECISION_RULE: str(rule),
    }
    for key, value in ((names.CASE_EXPECTED, expected), (names.SUITE, suite), (names.POINT, point)):
        if value is not None:
            attributes[key] = value
    with _tracer(tracer_provider).start_as_current_span(
        names.TRIAL_SPAN,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,  # its message may quote the input
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as error:  # the call failed: an error trial of this type
            span.set_attribute(names.ERROR_TYPE, type(error).__name__)
            span.set_status(Status(StatusCode.ERROR))
            raise


@contextmanager
def evaluation_run(
    *,
    run_id: str,
    suite: Suite,
    policy: Policy,
    planned_trials: int,
    isolation: Isolation = Isolation.UNKNOWN,
    tracer_provider: trace.TracerProvider | None = None,
) -> Iterator[trace.Span]:
    """The `verdictgate.run` span: declares the run, its contract, policy and plan.

    A processor or receiver assesses the run when this span ends.
    """
    with _tracer(tracer_provider).start_as_current_span(
        names.RUN_SPAN,
        kind=SpanKind.INTERNAL,
        attributes=run_attributes(run_id, suite, policy, planned_trials, isolation),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span
