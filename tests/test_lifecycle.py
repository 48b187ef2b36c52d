"""One run lifecycle, one answer: the same trials give the same decisions and the same final
assessment in any order, batching and duplication, in the lifecycle itself, in process and
through the receiver's wire; a sequential run is answered at the first round its rule decides,
as `assess --sequential` answers."""

from __future__ import annotations

import io
import itertools
import json
import random
from dataclasses import replace

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider

from receiver_support import request, span
from verdictgate import (
    Assessment,
    Case,
    Contract,
    EvidenceProcessor,
    Isolation,
    ManualClock,
    Policy,
    Status,
    Suite,
    Trial,
    assess,
)
from verdictgate.cli.main import main
from verdictgate.declaration import RunDeclaration
from verdictgate.engine import assess_declared, decided_round
from verdictgate.evidence import Evidence
from verdictgate.lifecycle import Final, FinalReason, Interim, Lifecycle, Look, Timing
from verdictgate.otel import conventions as names
from verdictgate.otel.instrument import decision, evaluation_run, trial
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.otel.span_decoding import run_declaration
from verdictgate.otel.spans import flat_ranges, run_attributes, trial_attributes
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.store import Store
from verdictgate.stats import Method
from verdictgate.trials_file import TrialWriter, read_trials

ROUTES = ("approve", "deny", "review")


def suite_of(cases: int) -> Suite:
    return Suite(
        "gate",
        "approval_gate",
        tuple(Case(f"c{n}", None, ROUTES[n % 3]) for n in range(cases)),
        Contract(frozenset(ROUTES)),
    )


def declaration_of(run: str, cases: int, trials: int, method: Method) -> RunDeclaration:
    """What the run span of `run` declares: its suite, the rule, `cases` x `trials` trials."""
    attributes = run_attributes(
        run, suite_of(cases), Policy(method=method), cases * trials, Isolation.FRESH_SESSION
    )
    return run_declaration(attributes)


@st.composite
def runs(draw, most_cases: int = 4, most_pairs: int = 12):
    """A run's trials (each case's route, with pairs that flip with a drawn chance) and how
    it is judged. Drawn as tool paths, a trial may have its two steps tied (started in the same
    instant: read in name order), which its pair compares unordered."""
    cases = draw(st.integers(1, most_cases))
    pairs = draw(st.integers(1, most_pairs))
    method = draw(st.sampled_from([Method.WILSON, Method.EXACT, Method.SEQUENTIAL]))
    flip_chance = draw(st.sampled_from([0.0, 0.1, 0.5]))
    paths = draw(st.booleans())
    # a case may jump far ahead part-way (a sparse case: its later pairs lie beyond FAR_GAP)
    gaps = draw(st.lists(st.sampled_from([0, 0, 40, 150]), min_size=cases, max_size=cases))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    trials = []
    for case in range(cases):
        route = ROUTES[case % 3]
        for index in range(2 * pairs):
            other = ROUTES[(case + 1) % 3]
            verdict = other if index % 2 and rng.random() < flip_chance else route
            recorded = index + 2 * gaps[case] if index >= pairs else index
            if not paths:
                trials.append(Trial(f"c{case}", recorded, verdict, "r", route))
                continue
            tied = rng.random() < 0.3
            steps = (verdict, "notify")
            trials.append(
                Trial(
                    f"c{case}",
                    recorded,
                    tuple(sorted(steps)) if tied else steps,
                    "r",
                    route,
                    tied_steps=((0, 2),) if tied else (),
                )
            )
    return declaration_of("r", cases, 2 * pairs, method), trials


@st.composite
def deliveries(draw, trials: list[Trial]):
    """The same trials in another order, some sent twice, cut into batches."""
    order = draw(st.permutations(trials))
    repeated = draw(st.lists(st.sampled_from(trials), max_size=len(trials) // 2))
    stream = list(order)
    for item in repeated:
        stream.insert(draw(st.integers(0, len(stream))), item)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def without_repeats(assessment: Assessment) -> Assessment:
    """An assessment but for what the deliveries add: its counts of harmless repeats, and of
    records that came after the end (a repeat sent after the last new trial)."""
    return replace(assessment, trials=replace(assessment.trials, duplicates=0, late=0))


def expected(declaration: RunDeclaration, trials: list[Trial]) -> Assessment:
    """The answer on the trials as they are, each once, in order."""
    return assess_declared(Evidence(trials), declaration)


def drive(lifecycle: Lifecycle, batches: list[list[Trial]], declaration, span_at: int, now=0.0):
    """Feed batches (the run span after batch `span_at`), judging looks as a finisher does;
    the finals."""
    finals: list[Final] = []

    def act() -> None:
        while decisions := lifecycle.due(now):
            for item in decisions:
                if isinstance(item, Look):
                    if decided_round(item.evidence, item.declaration, item.first, item.last):
                        lifecycle.close(item.run_id, FinalReason.SEQUENTIAL)
                elif isinstance(item, Final):
                    finals.append(item)

    for number, batch in enumerate(batches):
        for item in batch:
            lifecycle.record(item, now, "gate", "approval_gate")
        if number == span_at:
            lifecycle.ended(declaration, now)
        act()
    return finals


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_lifecycle_gives_one_answer_for_any_order_batching_and_repeats(data) -> None:
    declaration, trials = data.draw(runs())
    batches = data.draw(deliveries(trials))
    span_at = data.draw(st.integers(0, len(batches) - 1))
    lifecycle = Lifecycle(Timing(idle=30.0, run_span_ends_run=False))
    finals = drive(lifecycle, batches, declaration, span_at)
    (final,) = finals
    want = expected(declaration, trials)
    got = assess_declared(final.evidence, final.declaration)
    assert without_repeats(got) == want
    if not declaration.sequential:
        assert final.reason is FinalReason.PLAN_COMPLETE and final.evidence.kept() == len(trials)
    else:
        assert final.reason in (FinalReason.PLAN_COMPLETE, FinalReason.SEQUENTIAL)


def test_records_after_the_end_are_late_per_run_and_idle_canaries_end() -> None:
    lifecycle = Lifecycle(Timing(idle=10.0, window=4.0, run_span_ends_run=False))
    for index in range(4):
        lifecycle.record(Trial("c", index, "approve", "canary", "approve"), 0.0)
    assert lifecycle.due(3.9) == []
    (window,) = lifecycle.due(4.0)
    assert isinstance(window, Interim) and window.evidence.kept() == 4
    (final,) = lifecycle.due(10.0)
    assert isinstance(final, Final) and final.reason is FinalReason.IDLE
    assert lifecycle.record(Trial("c", 4, "approve", "canary", "approve"), 11.0) is None
    assert lifecycle.late("canary") == 1 and lifecycle.late("other") == 0


def wire(batches: list[list[Trial]], declaration: RunDeclaration, span_at: int, cases: int):
    """The batches through a receiver's wire (protobuf requests), the run span in batch
    `span_at`; the receiver's final assessment."""
    clock = ManualClock(1000.0)
    receiver = Receiver(Store(), None, ReceiverConfig(idle=3600), clock=clock)
    attributes = run_attributes(
        declaration.run_id,
        declaration.suite,
        declaration.policy,
        declaration.planned_trials or 0,
        Isolation.FRESH_SESSION,
    )
    for number, batch in enumerate(batches):
        spans = [span("decide approval_gate", trial_attributes(t)) for t in batch]
        if number == span_at:
            spans.append(span(names.RUN_SPAN, attributes))
        receiver.ingest(extract_protobuf(request(spans).SerializeToString()))
        receiver.tick()
        assert receiver.flush()
    assessment = receiver.assessment(declaration.run_id)
    receiver.close()
    return assessment


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_the_receiver_gives_the_same_answer_for_any_order_batching_and_repeats(data) -> None:
    declaration, trials = data.draw(runs(most_cases=3, most_pairs=8))
    batches = data.draw(deliveries(trials))
    span_at = data.draw(st.integers(0, len(batches) - 1))
    got = wire(batches, declaration, span_at, len(declaration.suite.cases))
    assert got is not None and not got.in_progress
    assert without_repeats(got) == expected(declaration, trials)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_the_processor_gives_the_same_answer_for_any_order_and_repeats(data) -> None:
    declaration, trials = data.draw(runs(most_cases=3, most_pairs=8))
    stream = [t for batch in data.draw(deliveries(trials)) for t in batch]
    provider = TracerProvider()
    processor = EvidenceProcessor(clock=ManualClock())
    provider.add_span_processor(processor)
    with evaluation_run(
        run_id="r",
        suite=declaration.suite,
        policy=declaration.policy,
        planned_trials=declaration.planned_trials or 0,
        isolation=Isolation.FRESH_SESSION,
        tracer_provider=provider,
    ) as run_span:
        run_span.set_attribute(names.PLAN_CASES, len(declaration.suite.cases))
        for item in stream:
            with (
                trial(run="r", index=item.index, case=item.case, expected=item.expected),
                decision("approval_gate", tracer_provider=provider) as recorder,
            ):
                recorder.record(item.decision)
                if item.tied_steps:  # as a decision rule records a path it read tied
                    otel_trace.get_current_span().set_attribute(
                        names.TIED_STEPS, flat_ranges(item.tied_steps)
                    )
    assert processor.force_flush()
    got = processor.assessment("r")
    provider.shutdown()
    want = expected(declaration, trials)
    assert without_repeats(replace(got, latency=None)) == replace(want, latency=None)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_a_trials_file_gives_the_same_answer_in_any_order_with_repeats(
    data, tmp_path_factory
) -> None:
    """The trials written in any order, some twice, and read back: the same evidence, tied
    steps and all."""
    declaration, trials = data.draw(runs(most_cases=3, most_pairs=8))
    stream = [t for batch in data.draw(deliveries(trials)) for t in batch]
    buffer = io.BytesIO()
    writer = TrialWriter(buffer, "gate", "approval_gate", Isolation.FRESH_SESSION)
    for item in stream:
        writer.add(item)
    path = tmp_path_factory.mktemp("file") / "trials.jsonl"
    path.write_bytes(buffer.getvalue())
    evidence, _ = read_trials(path)
    got = assess_declared(evidence, declaration)
    assert without_repeats(got) == expected(declaration, trials)


# The 900 trials of issue 22: six cases, every one flipping on its first rerun pair and never
# again. The sequential rule rejects them at round 1; judged whole, 6 flips in 450 pairs would
# qualify. Whatever the batching, the receiver says what `assess --sequential` says.

CASES, PAIRS = 6, 75


def flipping_first() -> list[Trial]:
    trials = []
    for case in range(CASES):
        route, other = ROUTES[case % 3], ROUTES[(case + 1) % 3]
        for index in range(2 * PAIRS):
            trials.append(Trial(f"c{case}", index, other if index == 1 else route, "r", route))
    return trials


def assess_sequential(tmp_path, trials: list[Trial]) -> dict:
    path = tmp_path / "trials.jsonl"
    with open(path, "wb") as stream:
        writer = TrialWriter(stream, "gate", "approval_gate", Isolation.FRESH_SESSION)
        for item in trials:
            writer.add(item)
    result = CliRunner().invoke(
        main, ["assess", "--trials", str(path), "--sequential", "--format", "json"]
    )
    return json.loads(result.stdout)


def test_the_900_trials_get_one_status_however_they_arrive(tmp_path) -> None:
    trials = flipping_first()
    declaration = declaration_of("r", CASES, 2 * PAIRS, Method.SEQUENTIAL)
    offline = assess_sequential(tmp_path, trials)
    assert offline["status"] == "rejected" and offline["sequential"]["rounds"] == 1
    by_round = sorted(trials, key=lambda t: (t.index // 2, t.case, t.index))
    arrivals = {
        "one request": [trials],
        "3 requests of 300": [trials[n : n + 300] for n in range(0, 900, 300)],
        "round by round": [by_round[n : n + 2 * CASES] for n in range(0, 900, 2 * CASES)],
    }
    for name, batches in arrivals.items():
        got = wire(batches, declaration, len(batches) - 1, CASES)
        assert got.status.value == offline["status"] == "rejected", name
        assert got.reason_codes == tuple(r["code"] for r in offline["reasons"]), name
        assert got.pooled.pairs == CASES, name  # judged at round 1
    whole = assess(trials, suite_of(CASES), Policy(method=Method.SEQUENTIAL))
    assert whole.status is not Status.REJECTED  # what a look at all of them at once said
