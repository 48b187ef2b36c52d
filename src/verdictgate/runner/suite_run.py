"""The live runner: call an agent on every case, repeatedly, and assess what came back."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, Protocol, cast

import msgspec
from opentelemetry import context as otel_context
from opentelemetry import trace

from ..assessment import Assessment, RelationResult
from ..decision_rules import DecisionRule
from ..errors import PlanError
from ..otel import conventions as names
from ..otel.instrument import (
    DecisionRecorder,
    decision,
    evaluation_run,
    recorded_trial,
    trial,
)
from ..otel.spans import encode_routes
from ..otel.telemetry import Telemetry
from ..plan import RunPlan, plan_run, sequential_trials
from ..policy import Policy
from ..sequential.rule import sequential_policy
from ..suite import Case, Suite
from ..tiers.cascade import Tiers
from ..tiers.relations import Relation, as_relation
from ..tiers.semantic import SemanticCheck, bundled_embedder
from ..ties import matches_route
from ..trial_model import Trial, decision_from_value
from .agent import Agent, from_callable
from .round_collection import RoundCollection, Stop
from .run_options import RunOptions, RunSettings

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..otel.processor import EvidenceProcessor


class TrialSink(Protocol):
    """Where the runner records each trial (evidence in memory, or a telemetry pipeline)."""

    def add(self, trial: Trial) -> None: ...


@dataclass(frozen=True)
class Call:
    """One planned call: a case and its trial index."""

    case: Case
    index: int


class _Timeout(Exception):
    pass


def _input(case: Case) -> str:
    """The input to call the agent with; `run` refuses a suite with a case without one."""
    if case.input is None:
        raise PlanError(f"case {case.id} has no input and cannot be run")
    return case.input


def planned_calls(suite: Suite, plan: RunPlan) -> list[Call]:
    """Calls in trial-index order across cases, so an interrupted run still holds whole rounds."""
    calls = [Call(case, index) for case in suite.cases for index in range(plan.repeats[case.id])]
    return sorted(calls, key=lambda call: call.index)


def run(
    agent: Agent | Callable[[str], object],
    suite: Suite,
    policy: Policy | None = None,
    options: RunOptions | None = None,
    *,
    sink: TrialSink | None = None,
    telemetry: Telemetry | None = None,
    **settings: Unpack[RunSettings],
) -> Assessment:
    """Call `agent` on every suite case as often as the policy needs, then assess the trials.

    How the run is made is one `RunOptions` (its fields may also be given as keywords, which
    replace the options' own: `run(agent, suite, concurrency=4)`).

    The plan is sized and checked against `budget` before any call. Every call is recorded as a
    decision span inside a `verdictgate.run` span, and the EvidenceProcessor of `telemetry` (a
    private pipeline by default) assesses the run when it ends: the same path a production
    canary takes. An exception or a timeout becomes an error trial. `sink` receives every trial.

    With `quality_gate`, each case is called once first; if any answer misses the case's expected
    route or fails a tier, the run stops there, before paying for repeats, and is rejected
    (`quality_failed`).
    Each of `relations` (built-in names or Relation objects) then calls the agent once per case
    on the transformed input and compares with the case's first decision; those extra calls
    are not trials of the run.

    The assertion tiers run on every answer, cheapest first: `invariants`, then `semantic`
    (True: the suite's calibrated threshold against each case's `reference`, with the bundled
    offline model; or your own SemanticCheck), then `judge(output, input) -> bool`. A tier runs
    only when the cheaper ones passed; the trial passes when all that ran passed.

    With a `decision` rule (`tools`, `toolset`, `agents`, `nodes`, `attribute:KEY`), each trial's
    decision is derived from the spans the agent's framework (Strands, LangGraph, the OpenAI
    Agents SDK) makes during the call, not from its return value, which the tiers still judge;
    an Agent from a framework adapter (`verdictgate.from_strands`, ...) brings its own rule, which `decision` overrides.
    With no SDK tracer provider set globally, one is installed first, so the framework's spans
    are seen with no code of yours.

    With `sequential`, the run is judged by the sequential rule and collected round by round
    (one rerun pair of every case a round); it stops at the first round that decides it, or
    after as many rounds as the most demanding test's cap (`max_pairs`, default 15/t pairs)
    needs; `budget` caps the calls, and the run stops (curtailed) as soon as no outcome of the
    calls left within it could qualify the run. With `curtail`, a fixed plan is collected round
    by round and stops that way too; a curtailed run is judged by the sequential rule, valid
    whenever a run stops. A sequential run left undecided (at its cap or budget) can be
    continued: `resume` takes its trials (its `--trials-out` file), which are recorded again
    as trials of this run (a new run id, so that a receiver that closed the first run takes
    this one whole), and the run goes on from the round after them; the sequential rule stays
    valid however often it is continued, provided the policy is the one the first run had.
    """
    options = replace(options or RunOptions(), **settings)  # an unknown keyword: TypeError
    checked = [as_relation(relation) for relation in options.relations]
    agent = from_callable(agent)
    rule = _decision_rule(options, agent, checked)
    policy = policy or Policy.with_tolerance(suite.tolerance, suite.pass_rate, suite.pass_when)
    sized = _sized(suite, policy, options, checked)
    tiers = Tiers(
        tuple(options.invariants), _semantic_check(options.semantic, suite), options.judge
    )  # may load a model
    run_id = options.run_id or uuid.uuid4().hex
    pipeline = telemetry or Telemetry()
    processor = _processor(pipeline)
    if rule is not None:
        from ..otel.trial_capture import attach_capture

        attach_capture(pipeline.tracer_provider)
    first_answers: dict[str, Trial] = {}
    processor.watch(run_id, _watcher(first_answers, sized.collection, sink))
    recording = _Recording(
        run_id, suite, pipeline.tracer_provider, options.timeout, tiers, rule, processor.force_flush
    )
    try:
        with (
            evaluation_run(
                run_id=run_id,
                suite=suite,
                policy=sized.policy,
                planned_trials=sized.planned,
                isolation=agent.isolation,
                tracer_provider=pipeline.tracer_provider,
            ) as run_span,
            _progress_bar(sized.planned, options.progress) as advance,
        ):
            calling = _Calling(agent, suite, recording, options, run_span, advance)
            if sized.collection is not None:
                _collect_until_stopped(calling, sized.collection)
            else:
                _call_planned(calling, sized.calls, first_answers, checked)
    finally:
        processor.watch(run_id, None)
        if telemetry is None:  # its own pipeline
            pipeline.shutdown()
        else:
            processor.force_flush()  # the run span ended: wait for its assessment
    assessment = processor.assessment(run_id)
    if assessment is None:  # the processor failed to read its own run span: a bug, not input
        raise RuntimeError(f"run {run_id} was not assessed")
    return assessment


def _decision_rule(
    options: RunOptions, agent: Agent, checked: list[Relation]
) -> DecisionRule | None:
    """The rule that derives each decision from the framework's spans: the options', else the
    agent's own; refused with relations, which compare returned decisions."""
    rule = options.decision
    rule = DecisionRule.parse(rule) if isinstance(rule, str) else rule
    rule = rule or agent.decision
    if rule is not None and checked:
        raise PlanError(
            "relations compare returned decisions; with a decision rule, check them in a run "
            "without one",
            arguments=("relation",),
        )
    return rule


@dataclass(frozen=True)
class _Sized:
    """A run sized and checked before any call: the policy that judges it, and either the
    collection of a run that may stop early or the planned calls."""

    policy: Policy
    collection: RoundCollection | None
    calls: list[Call]
    planned: int
    """The calls the run is sized for."""


def _sized(suite: Suite, policy: Policy, options: RunOptions, checked: list[Relation]) -> _Sized:
    """Size the run, refusing before any call what makes it impossible."""
    _refuse_before_any_call(suite, options.concurrency)
    if options.resume and not options.sequential:
        raise PlanError("continues a sequential run", arguments=("resume",))
    _one_run(options.resume)
    if options.sequential or options.curtail:
        collection = _round_collection(
            suite, policy, options, options.quality_gate or bool(checked)
        )
        return _Sized(collection.policy, collection, [], collection.sized_for)
    plan = plan_run(suite, policy, repeats=options.repeats, budget=options.budget)
    return _Sized(policy, None, planned_calls(suite, plan), plan.calls)


def _processor(pipeline: Telemetry) -> EvidenceProcessor:
    """The pipeline's EvidenceProcessor, which assesses the run when its span ends."""
    processor = pipeline.processor
    if processor is None:
        raise PlanError(
            "the runner records through an EvidenceProcessor: use Telemetry(collect=True)"
        )
    return processor


def _watcher(
    first_answers: dict[str, Trial], collection: RoundCollection | None, sink: TrialSink | None
) -> Callable[[Trial], None]:
    """What is told of each trial the processor records: the case's first answer is kept (for
    the quality gate and the relations), the collection counts it, and `sink` receives it."""

    def watch(trial: Trial) -> None:
        if trial.index == 0:
            first_answers[trial.case] = trial
        if collection is not None:
            collection.add(trial)
        if sink is not None:
            sink.add(trial)

    return watch


@dataclass(frozen=True)
class _Calling:
    """How the calls of one run are made, recorded and counted, inside its run span."""

    agent: Agent
    suite: Suite
    recording: _Recording
    options: RunOptions
    run_span: trace.Span
    advance: Callable[[], None]


def _collect_until_stopped(calling: _Calling, collection: RoundCollection) -> None:
    """A run that may stop early: the trials it continues recorded again as this run's, then
    round after round until one ends it; the run span says what it did and why it stopped."""
    options, run_span = calling.options, calling.run_span
    for earlier in options.resume:
        recorded_trial(
            msgspec.structs.replace(earlier, run=calling.recording.run_id),
            calling.suite,
            calling.recording.tracer_provider,
        )
    made, stop = _collect_in_rounds(
        calling.agent,
        calling.suite,
        collection,
        calling.recording,
        options.concurrency,
        calling.advance,
    )
    made += len(options.resume)
    run_span.set_attribute(names.PLAN_TRIALS, made)  # what the run set out to do
    run_span.set_attribute(names.PLAN_SIZED_TRIALS, collection.sized_for)
    if stop is Stop.CURTAILED:  # judged by the rule valid at any stop
        run_span.set_attribute(names.CURTAILED, True)
        run_span.set_attribute(names.METHOD, collection.stopped_policy.method.value)


def _call_planned(
    calling: _Calling,
    calls: list[Call],
    first_answers: dict[str, Trial],
    checked: list[Relation],
) -> None:
    """A planned run: with the quality gate, the first round alone before the repeats (which
    it may stop); then, unless it stopped, each relation on each case."""
    options, suite = calling.options, calling.suite
    rounds = (
        [[c for c in calls if c.index == 0], [c for c in calls if c.index > 0]]
        if options.quality_gate
        else [calls]
    )
    gate = (lambda: _missed_routes(suite, first_answers)) if options.quality_gate else None
    stopped = _call_in_rounds(
        calling.agent,
        rounds,
        calling.recording,
        options.concurrency,
        calling.advance,
        gate,
        calling.run_span,
    )
    if not stopped and checked:
        _declare_relations(
            calling.run_span,
            _check_relations(calling.agent, suite, first_answers, checked, options.timeout),
        )


def _round_collection(
    suite: Suite, policy: Policy, options: RunOptions, gated: bool
) -> RoundCollection:
    """The collection of a run that may stop early, refused before any call when it cannot be
    one."""
    if gated:
        raise PlanError(
            "a run that may stop early is collected round by round: not with {quality_gate} "
            "or {relation}",
            arguments=("quality_gate", "relation"),
        )
    if options.max_pairs is not None and not options.sequential:
        raise PlanError("caps a sequential run", arguments=("max_pairs",))
    if options.max_pairs is not None and options.max_pairs < 1:
        raise PlanError(f"must be at least 1, got {options.max_pairs}", arguments=("max_pairs",))
    try:
        if options.sequential:
            if options.repeats is not None:
                raise PlanError(
                    "a sequential run sizes itself round by round", arguments=("repeats",)
                )
            judged = sequential_policy(policy, suite)
            return RoundCollection(
                suite,
                judged,
                sequential_trials(suite, judged, options.max_pairs),
                sequential=True,
                curtail=options.curtail or options.budget is not None,
                budget=options.budget,
                prior=options.resume,
            )
        plan = plan_run(suite, policy, repeats=options.repeats, budget=options.budget)
        return RoundCollection(suite, policy, plan.repeats, sequential=False, curtail=True)
    except ValueError as error:
        raise PlanError(
            str(error), arguments=("sequential" if options.sequential else "curtail",)
        ) from None


def _collect_in_rounds(
    agent: Agent,
    suite: Suite,
    collection: RoundCollection,
    recording: _Recording,
    concurrency: int,
    advance: Callable[[], None],
) -> tuple[int, Stop | None]:
    """Call round after round until one ends the run or none is left; the calls made and why
    the run ended early (None when it did not)."""
    cases = {case.id: case for case in suite.cases}
    made = 0
    for number in itertools.count(collection.first_round):
        keys = collection.round(number)
        if not keys:
            return made, None
        batch = [Call(cases[case_id], index) for case_id, index in keys]
        _call_in_rounds(agent, [batch], recording, concurrency, advance, None, None)
        made += len(batch)
        if stop := collection.after_round(number):
            return made, stop
    raise AssertionError("unreachable: rounds run out")


def _one_run(resume: Sequence[Trial]) -> None:
    """The trials a run continues must be one run's."""
    if len({trial.run for trial in resume}) > 1:
        raise PlanError("the trials to continue hold more than one run", arguments=("resume",))


def _refuse_before_any_call(suite: Suite, concurrency: int) -> None:
    """What makes a run impossible, found before the first call."""
    without_input = [case.id for case in suite.cases if case.input is None]
    if without_input:
        raise PlanError(f"cases without an input cannot be run: {', '.join(without_input[:3])}")
    if concurrency < 1:
        raise PlanError(f"must be at least 1, got {concurrency}", arguments=("concurrency",))


def _call_in_rounds(
    agent: Agent,
    rounds: list[list[Call]],
    recording: _Recording,
    concurrency: int,
    advance: Callable[[], None],
    quality_gate: Callable[[], list[str]] | None,
    run_span: trace.Span | None,
) -> bool:
    """Make the calls round by round; after the first, the quality gate (when asked for) may
    stop the run: the cases it names go on the run span, and True is returned."""
    for number, batch in enumerate(rounds):
        if agent.is_async:
            asyncio.run(_run_async(agent, batch, recording, concurrency, advance))
        else:
            _run_threads(agent, batch, recording, concurrency, advance)
        recording.flush()  # the round's trials are recorded, and their watchers told
        failed = quality_gate() if quality_gate is not None and number == 0 else []
        if failed:
            assert run_span is not None  # a quality gate comes with its run's span
            run_span.set_attribute(names.QUALITY_FAILED, failed)
            run_span.set_attribute(names.PLAN_TRIALS, len(batch))
            return True
    return False


_Outcome = Literal["violated", "held", "errored"]
"""What checking a relation on one case found."""


def _check_relations(
    agent: Agent,
    suite: Suite,
    first_answers: dict[str, Trial],
    checked: list[Relation],
    timeout: float | None,
) -> list[RelationResult]:
    """Call the agent once per case and relation on the transformed input; a changed answer (or
    one that is not a decision) breaks the relation on that case's route.

    A transform or agent call that raises, or a case whose first answer was an error, cannot be
    checked: the route is errored, a fault rather than a verdict, logged once per error type."""
    faults = _Faults()
    results = []
    for relation in checked:
        routes: dict[_Outcome, set[str]] = {"violated": set(), "held": set(), "errored": set()}
        for case in suite.cases:
            first = first_answers.get(case.id)
            outcome = _relation_on_case(agent, case, first, relation, timeout, faults)
            if outcome is not None:
                routes[outcome].add(case.expected or "(no route)")
        violated, held, errored = routes["violated"], routes["held"], routes["errored"]
        results.append(
            RelationResult(
                relation.name,
                tuple(sorted(violated)),
                tuple(sorted(held - violated - errored)),
                tuple(sorted(errored - violated)),
            )
        )
    return results


class _Faults:
    """Why relations could not be checked, logged once per error type (the type only: a
    message may quote the input)."""

    def __init__(self) -> None:
        self.logged: set[str] = set()

    def note(self, relation: Relation, stage: str, kind: str) -> None:
        """The `stage` (transform or agent) of `relation` raised `kind`."""
        error_type = f"{stage}:{kind}"
        if error_type not in self.logged:
            self.logged.add(error_type)
            logging.getLogger(__name__).warning(
                "relation %s: the %s raised %s, so the relation is errored there, not violated; "
                "logged once per error type",
                relation.name,
                stage,
                kind,
            )


def _relation_on_case(
    agent: Agent,
    case: Case,
    first: Trial | None,
    relation: Relation,
    timeout: float | None,
    faults: _Faults,
) -> _Outcome | None:
    """Whether the agent's answer to the transformed input kept the case's first decision;
    None when the transform leaves the input as it was (the case does not exercise it)."""
    text = _input(case)
    try:
        transformed = relation.transform(text)
    except Exception as error:
        faults.note(relation, "transform", type(error).__name__)
        return "errored"
    if transformed == text:
        return None
    if first is None or first.decision is None:
        return "errored"  # nothing to compare with: the run counts that error
    try:
        answer = _call_answer(agent, transformed, timeout)
    except (_Timeout, asyncio.TimeoutError):
        faults.note(relation, "agent", "timeout")
        return "errored"
    except Exception as error:
        faults.note(relation, "agent", type(error).__name__)
        return "errored"
    try:
        kept = decision_from_value(answer) == first.decision
    except Exception:  # an answer that is not a decision changed it
        kept = False
    return "held" if kept else "violated"


def _call_answer(agent: Agent, text: str, timeout: float | None) -> object:
    if agent.is_async:
        return asyncio.run(asyncio.wait_for(_awaited(agent, text), timeout))
    return _call_with_timeout(agent.instance(), text, timeout)


def _awaited(agent: Agent, text: str) -> Awaitable[object]:
    """An async agent's call (`Agent.is_async`: its calls return awaitables)."""
    return cast("Awaitable[object]", agent.instance()(text))


def _declare_relations(run_span: trace.Span, results: list[RelationResult]) -> None:
    run_span.set_attribute(names.RELATIONS_REQUESTED, [r.name for r in results])
    run_span.set_attribute(
        names.RELATIONS_VIOLATED, [p for r in results for p in encode_routes(r, r.violated)]
    )
    run_span.set_attribute(
        names.RELATIONS_HELD, [p for r in results for p in encode_routes(r, r.held)]
    )
    run_span.set_attribute(
        names.RELATIONS_ERRORED, [p for r in results for p in encode_routes(r, r.errored)]
    )


def _missed_routes(suite: Suite, first_answers: dict[str, Trial]) -> list[str]:
    """Cases whose first answer is a decision that missed its expected route (in every order
    of steps whose spans tied: `ties`) or failed a tier (a blocking invariant, the semantic
    tier or the judge). An errored first answer (the agent
    raised or timed out, or a tier faulted) says nothing about quality: the run goes on, and
    the error makes it incomplete rather than rejected."""
    return sorted(
        case.id
        for case in suite.cases
        if (trial := first_answers.get(case.id)) is not None
        and trial.decision is not None
        and (
            trial.passed is False
            or (
                case.expected is not None
                and not matches_route(trial.decision, trial.tied_steps, case.expected)
            )
        )
    )


def _semantic_check(semantic: SemanticCheck | bool, suite: Suite) -> SemanticCheck | None:
    """The semantic tier a run asked for; True builds it from the suite, refused before any
    call when the suite has no calibrated threshold or a case has no reference."""
    if semantic is False or isinstance(semantic, SemanticCheck):
        return semantic or None
    if suite.semantic is None:
        raise PlanError(
            "the semantic tier needs a calibrated threshold: run `verdictgate calibrate` first"
        )
    references = suite.references()
    if without := [case.id for case in suite.cases if case.id not in references]:
        raise PlanError(
            f"the semantic tier needs a reference for every case: {without[0]} has none"
        )
    return SemanticCheck(suite.semantic.threshold, references, bundled_embedder())


@dataclass(frozen=True)
class _Recording:
    """Where and how each call of one run is recorded."""

    run_id: str
    suite: Suite
    tracer_provider: trace.TracerProvider | None
    timeout: float | None
    tiers: Tiers
    rule: DecisionRule | None = None
    """Derive each decision from the framework's spans under this rule."""
    flush: Callable[[], object] = lambda: True
    """Returns once every call made so far is recorded (and its watchers told)."""

    def record(self, recorder: DecisionRecorder, answer: object, call: Call) -> None:
        """Record an answer with what the assertion tiers found on it."""
        recorder.record(answer, self.tiers.check(answer, call.case.input, call.case.id))

    @contextmanager
    def call(self, call: Call) -> Iterator[DecisionRecorder]:
        """The trial scope and decision span of one call."""
        case = call.case
        with (
            trial(
                run=self.run_id,
                index=call.index,
                case=case.id,
                expected=case.expected,
                suite=self.suite.name,
            ),
            decision(  # the input is fingerprinted only: a further name of a case named by id
                self.suite.point,
                input=case.input,
                tracer_provider=self.tracer_provider,
                rule=self.rule,
            ) as recorder,
        ):
            yield recorder


def _call_with_timeout(
    function: Callable[[str], object], text: str, timeout: float | None
) -> object:
    """Call in this thread, or, with a timeout, in a daemon thread abandoned when it overruns."""
    if timeout is None:
        return function(text)
    answers: list[object] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            answers.append(function(text))
        except BaseException as error:  # recorded as the trial's error, never lost
            errors.append(error)

    context = contextvars.copy_context()  # the trial's span, for spans the call makes there
    worker = threading.Thread(
        target=context.run, args=(target,), daemon=True, name="verdictgate-call"
    )
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise _Timeout()
    if errors:
        raise errors[0]
    return answers[0]


def _run_threads(
    agent: Agent,
    calls: Sequence[Call],
    recording: _Recording,
    concurrency: int,
    advance: Callable[[], None],
) -> None:
    parent = otel_context.get_current()  # the run span, for calls made in worker threads

    def one(call: Call) -> None:
        text = _input(call.case)
        token = otel_context.attach(parent)
        try:
            with recording.call(call) as recorder:
                try:
                    answer = _call_with_timeout(agent.instance(), text, recording.timeout)
                except _Timeout:
                    recorder.record_error("timeout")
                except Exception as error:
                    recorder.record_error(type(error).__name__)
                else:
                    recording.record(recorder, answer, call)
        finally:
            otel_context.detach(token)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="verdictgate") as pool:
        for future in as_completed([pool.submit(one, call) for call in calls]):
            future.result()
            advance()


async def _run_async(
    agent: Agent,
    calls: Sequence[Call],
    recording: _Recording,
    concurrency: int,
    advance: Callable[[], None],
) -> None:
    limit = asyncio.Semaphore(concurrency)

    async def one(call: Call) -> None:
        text = _input(call.case)
        async with limit:
            with recording.call(call) as recorder:
                try:
                    answer = await asyncio.wait_for(_awaited(agent, text), recording.timeout)
                except asyncio.TimeoutError:
                    recorder.record_error("timeout")
                except Exception as error:
                    recorder.record_error(type(error).__name__)
                else:
                    recording.record(recorder, answer, call)
        advance()

    await asyncio.gather(*(one(call) for call in calls))


@contextmanager
def _progress_bar(total: int, enabled: bool | None) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr when it is a terminal (or when asked); else a no-op."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("trials", total=total)
        yield lambda: bar.advance(task)
