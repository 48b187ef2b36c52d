"""The EvidenceProcessor: same answer as assess(), any order, duplicates, canaries, bad spans."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider

from otel_support import MemoryTelemetry
from verdictgate import (
    Contract,
    EvidenceProcessor,
    Isolation,
    NoDecision,
    Policy,
    RunInfo,
    Status,
    Suite,
    Trial,
    assess,
    decision,
    evaluation_run,
    trial,
)
from verdictgate import conventions as names
from verdictgate.fingerprints import fingerprint_mode
from verdictgate.tiers import TierOutcome

CONTRACT = Contract({"a", "b", "c"}, targets={"a": 0.2}, allowed_no_decisions={"refused"})
SUITE = Suite(name="s", point="p", contract=CONTRACT)


def emit(trials: list[Trial], provider: TracerProvider) -> None:
    """Emit each trial as a decision span, exactly as instrumented code does."""
    for item in trials:
        with (
            trial(
                run=item.run, index=item.index, case=item.case, expected=item.expected, suite="s"
            ),
            decision("p", tracer_provider=provider) as recorder,
        ):
            if item.decision is None:
                recorder.record_error(item.error_type or "error")
            else:
                recorder.record(item.decision)


decisions = st.one_of(
    st.sampled_from(["a", "b", "c", "zzz"]),
    st.none(),
    st.just(NoDecision("refused")),
    st.lists(st.sampled_from(["x", "y"]), min_size=1, max_size=2).map(tuple),
)
trial_tables = st.dictionaries(
    st.tuples(st.sampled_from([f"case-{i}" for i in range(5)]), st.integers(0, 7)),
    decisions,
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(trial_tables, st.randoms(use_true_random=False), st.lists(st.integers(0, 39), max_size=20))
def test_processor_assessment_equals_assess_on_the_same_trials(table, rng, retries):
    expected_route = {f"case-{i}": "abc"[i % 3] for i in range(5)}
    trials = [
        Trial(case, index, value, "run-1", expected_route[case], "Boom" if value is None else None)
        for (case, index), value in table.items()
    ]
    delivered = list(trials) + [trials[i % len(trials)] for i in retries] if trials else []
    rng.shuffle(delivered)
    provider = TracerProvider()
    processor = EvidenceProcessor()
    provider.add_span_processor(processor)
    policy = Policy(tolerance=0.1)
    planned = 5 * 8
    with evaluation_run(
        run_id="run-1", suite=SUITE, policy=policy, planned_trials=planned,
        isolation=Isolation.FRESH_SESSION, tracer_provider=provider,
    ):  # fmt: skip
        emit(delivered, provider)
    got = processor.assessment("run-1")
    info = RunInfo(
        "run-1", "s", "p", Isolation.FRESH_SESSION, fingerprint_mode(t.case for t in trials)
    )
    want = assess(
        trials, Suite("s", "p", (), CONTRACT, 0.1), policy, run=info, planned_trials=planned
    )
    assert got.trials.duplicates == len(delivered) - len(trials)
    assert (got.latency.trials if got.latency else 0) == len(trials)  # timed from the spans
    assert replace(got, trials=replace(got.trials, duplicates=0), latency=None) == want


def test_the_processor_ignores_its_own_admission_span_and_other_spans():
    memory = MemoryTelemetry()
    provider = memory.telemetry.tracer_provider
    tracer = provider.get_tracer("app")
    with evaluation_run(
        run_id="r", suite=SUITE, policy=Policy(), planned_trials=4, tracer_provider=provider
    ):
        with tracer.start_as_current_span("GET /health"):
            pass
        emit([Trial("c", i, "a", "r", "a") for i in range(4)], provider)
    memory.telemetry.shutdown()
    names_seen = [s.name for s in memory.spans.get_finished_spans()]
    assert names_seen.count(names.ADMISSION_SPAN) == 1
    assert memory.telemetry.processor.dropped == 0


def test_a_malformed_decision_span_is_dropped_never_raised():
    provider = TracerProvider()
    processor = EvidenceProcessor()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span(
        "decide p", attributes={names.OUTCOME: "decision", names.TRIAL: "x"}
    ):
        pass
    with tracer.start_as_current_span(names.RUN_SPAN, attributes={names.TOLERANCE: "oops"}):
        pass
    assert processor.dropped == 2


def test_canary_runs_without_a_run_span_are_assessed_on_flush():
    seen = []
    provider = TracerProvider()
    processor = EvidenceProcessor(on_assessment=seen.append)
    provider.add_span_processor(processor)
    emit(
        [
            Trial(f"c{n}", i, "ab"[n % 2], "nightly", "ab"[n % 2])
            for n in range(4)
            for i in range(40)
        ],
        provider,
    )
    assert seen == []
    provider.force_flush()
    (assessment,) = seen
    assert assessment.run.id == "nightly" and assessment.run.point == "p"
    assert assessment.pooled.pairs == 80 and assessment.status is Status.QUALIFIED


def test_a_canary_window_closes_after_its_duration():
    seen = []
    provider = TracerProvider()
    processor = EvidenceProcessor(canary_window=0.0, on_assessment=seen.append)
    provider.add_span_processor(processor)
    emit([Trial("c", 0, "a", "w"), Trial("c", 1, "a", "w")], provider)
    assert len(seen) == 2  # each decision closed a zero-length window
    assert processor.assessment("w") is seen[-1]


def test_watchers_see_each_new_trial_once():
    provider = TracerProvider()
    processor = EvidenceProcessor()
    provider.add_span_processor(processor)
    got = []
    processor.watch("r", got.append)
    emit(
        [
            Trial("c", 0, "a", "r"),
            Trial("c", 0, "a", "r"),
            Trial("c", 1, None, "r", None, "Timeout"),
        ],
        provider,
    )
    processor.watch("r", None)
    emit([Trial("c", 2, "a", "r")], provider)
    assert [(t.index, t.decision, t.error_type) for t in got] == [
        (0, "a", None),
        (1, None, "Timeout"),
    ]


def test_metric_routes_outside_the_contract_fold_into_other():
    memory = MemoryTelemetry()
    provider = memory.telemetry.tracer_provider
    with evaluation_run(
        run_id="r", suite=SUITE, policy=Policy(), planned_trials=8, tracer_provider=provider
    ):
        emit([Trial("c", i, "a", "r", "a") for i in range(4)], provider)
        emit([Trial("d", i, "q", "r", "not-in-contract") for i in range(4)], provider)
    points = memory.metric_points()
    memory.telemetry.shutdown()
    routes = {dict(p.attributes).get(names.ROUTE) for p in points[names.METRIC_CHANGE_RATE_UPPER]}
    assert routes == {None, "a", names.OTHER_ROUTE}
    for metric_points in points.values():
        for point in metric_points:
            assert set(point.attributes) <= {names.SUITE, names.POINT, names.ROUTE, names.OUTCOME}
    (admission,) = points[names.METRIC_ADMISSION]
    assert admission.value == 0


def test_the_pass_rate_gauge_and_tier_fields_on_the_admission_span():
    memory = MemoryTelemetry()
    provider = memory.telemetry.tracer_provider
    with evaluation_run(
        run_id="r", suite=SUITE, policy=Policy(), planned_trials=8, tracer_provider=provider
    ):
        for index in range(8):
            with (
                trial(run="r", index=index, case="c", expected="a", suite="s"),
                decision("p", tracer_provider=provider) as recorder,
            ):
                blocked = ("no_ids",) if index == 3 else ()
                recorder.record("a", TierOutcome(blocked, passed=index not in (3, 5)))
    points = memory.metric_points()
    memory.telemetry.shutdown()
    (admission,) = [s for s in memory.spans.get_finished_spans() if s.name == names.ADMISSION_SPAN]
    assert admission.attributes[names.INVARIANTS_BLOCKED] == ("no_ids",)
    assert "invariant_blocked" in admission.attributes[names.REASONS]
    lower = {
        dict(p.attributes).get(names.ROUTE): p.value for p in points[names.METRIC_PASS_RATE_LOWER]
    }
    assert set(lower) == {None, "a"} and 0 < lower[None] < 6 / 8
    assert all(
        set(dict(p.attributes)) <= {names.SUITE, names.POINT, names.ROUTE}
        for p in points[names.METRIC_PASS_RATE_LOWER]
    )
