"""The EvidenceProcessor: same answer as assess(), any order, duplicates, canaries, bad spans."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_support import MemoryTelemetry
from verdictgate import (
    Contract,
    EvidenceProcessor,
    Isolation,
    ManualClock,
    NoDecision,
    Policy,
    Publisher,
    Suite,
    Trial,
    assess,
    decision,
    evaluation_run,
    trial,
)
from verdictgate.otel import conventions as names
from verdictgate.otel.span_facts import CASE_KEYS, DecisionReader, attributes_of
from verdictgate.tiers.cascade import TierOutcome

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
        run_id="run-1",
        suite=SUITE,
        policy=policy,
        planned_trials=planned,
        isolation=Isolation.FRESH_SESSION,
        tracer_provider=provider,
    ):
        emit(delivered, provider)
    assert provider.force_flush()
    got = processor.assessment("run-1")
    want = assess(
        trials,
        Suite("s", "p", (), CONTRACT, 0.1),
        policy,
        run_id="run-1",
        isolation=Isolation.FRESH_SESSION,
        planned_trials=planned,
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
    assert processor.force_flush()
    assert processor.dropped == 2


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
    assert processor.force_flush()  # watchers are called on the worker, in order with the spans
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
    provider.force_flush()
    points = memory.metric_points()
    memory.telemetry.shutdown()
    routes = {dict(p.attributes).get(names.ROUTE) for p in points[names.METRIC_CHANGE_RATE_UPPER]}
    assert routes == {None, "a", names.OTHER_ROUTE}
    for name, metric_points in points.items():
        run_id = {names.RUN_ID} if name == names.METRIC_ADMISSION_RUN else set()
        for point in metric_points:
            allowed = {names.SUITE, names.POINT, names.ROUTE, names.OUTCOME, *run_id}
            assert set(point.attributes) <= allowed
    (admission,) = points[names.METRIC_ADMISSION]
    assert admission.value == 0


def test_the_gauges_show_the_latest_run_of_a_suite_alone():
    """A long-lived process admits run after run: the run series names the latest run only,
    and a route only an earlier run reached has no series left."""
    memory = MemoryTelemetry()
    provider = memory.telemetry.tracer_provider
    for run, routes in (("r1", ("a", "b")), ("r2", ("a",))):
        with evaluation_run(
            run_id=run, suite=SUITE, policy=Policy(), planned_trials=8, tracer_provider=provider
        ):
            for case, route in enumerate(routes):
                emit([Trial(f"c{case}", i, route, run, route) for i in range(4)], provider)
        provider.force_flush()
        points = memory.metric_points()
        (latest,) = points[names.METRIC_ADMISSION_RUN]
        assert dict(latest.attributes)[names.RUN_ID] == run
        (when,) = points[names.METRIC_ADMISSION_TIME]
        assert latest.value == when.value
        shown = {
            dict(p.attributes).get(names.ROUTE) for p in points[names.METRIC_CHANGE_RATE_UPPER]
        }
        assert shown == {None, *routes}
    memory.telemetry.shutdown()


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
    provider.force_flush()
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


def _canary(provider: TracerProvider, run: str = "canary-1", flush_each: bool = True) -> None:
    """The README's canary: 2 cases x 4 trials, no run span, a flush after every trial."""
    for index in range(4):
        for case in ("c1", "c2"):
            emit([Trial(case, index, "ab"[case == "c2"], run, "ab"[case == "c2"])], provider)
            if flush_each:
                assert provider.force_flush()


def test_a_flush_after_every_trial_never_splits_a_canary_run():
    seen = []
    provider = TracerProvider()
    processor = EvidenceProcessor(on_assessment=seen.append)
    provider.add_span_processor(processor)
    _canary(provider)
    assert seen == [] and processor.assessment("canary-1") is None
    provider.shutdown()
    (assessment,) = seen
    assert assessment.trials.received == 8 and assessment.trials.missing == 0
    assert assessment.pooled.pairs == 4 and not assessment.in_progress
    assert processor.assessment("canary-1") is assessment


def test_a_canary_ends_after_its_idle_period_and_later_trials_are_late():
    seen = []
    clock = ManualClock()
    provider = TracerProvider()
    processor = EvidenceProcessor(idle=1.0, on_assessment=seen.append, clock=clock)
    provider.add_span_processor(processor)
    _canary(provider)
    clock.advance(0.99)
    assert processor.force_flush() and seen == []  # not idle long enough yet
    clock.advance(0.01)
    assert processor.force_flush()
    (assessment,) = seen
    assert assessment.trials.received == 8
    emit([Trial("c1", 4, "a", "canary-1", "a")], provider)  # after the end: late, not a new run
    provider.shutdown()
    assert len(seen) == 1 and processor.late == 1


def test_canary_windows_publish_interim_admissions_without_ending_the_run():
    seen = []
    clock = ManualClock()
    provider = TracerProvider()
    processor = EvidenceProcessor(idle=None, window=5.0, on_assessment=seen.append, clock=clock)
    provider.add_span_processor(processor)
    _canary(provider)
    assert processor.force_flush() and seen == []
    clock.advance(5.0)
    assert processor.force_flush()
    (interim,) = seen
    assert interim.in_progress and interim.trials.received == 8
    assert [r.code for r in interim.reasons].count("in_progress") == 1
    clock.advance(5.0)
    assert processor.force_flush() and len(seen) == 2 and seen[-1].in_progress
    provider.shutdown()
    final = seen[-1]
    assert not final.in_progress and final.trials.received == 8
    assert sum(not a.in_progress for a in seen) == 1


def test_the_old_name_of_the_window_still_works_for_one_release():
    clock = ManualClock()
    with pytest.warns(DeprecationWarning, match="window"):
        processor = EvidenceProcessor(idle=None, canary_window=5.0, clock=clock)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _canary(provider)
    clock.advance(5.0)
    assert processor.force_flush()
    assert processor.assessment("canary-1").in_progress
    provider.shutdown()


class _BlockingExporter(SpanExporter):
    """An exporter that holds every export until released (a collector that does not answer)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.exported: list[str] = []

    def export(self, spans):
        self.entered.set()
        self.release.wait(5)
        self.exported.extend(span.name for span in spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        self.release.set()


def _blocked_publishing(run: str, trials: int):
    """A processor whose publisher's exporter holds every export until released, and a run of
    `trials` trials that has ended: its admission is being published, held."""
    exporter = _BlockingExporter()
    publishing = TracerProvider()
    publishing.add_span_processor(SimpleSpanProcessor(exporter))  # exports in the publisher
    provider = TracerProvider()
    processor = EvidenceProcessor(Publisher(tracer_provider=publishing))
    provider.add_span_processor(processor)
    with evaluation_run(
        run_id=run, suite=SUITE, policy=Policy(), planned_trials=trials, tracer_provider=provider
    ):
        emit([Trial("c", i, "a", run, "a") for i in range(trials)], provider)
    assert exporter.entered.wait(5)  # the worker is publishing the run, held by the exporter
    return exporter, provider, processor


def test_a_blocked_publisher_never_holds_the_instrumented_thread():
    exporter, _, processor = _blocked_publishing("r", 4)
    # The run span has ended and this thread goes on while the export is still held.
    assert exporter.exported == []
    assert processor.force_flush(timeout_millis=50) is False  # honours its timeout
    exporter.release.set()
    assert processor.force_flush(timeout_millis=10_000) is True
    assert exporter.exported == [names.ADMISSION_SPAN]
    assert processor.assessment("r").trials.received == 4


def test_a_flush_racing_shutdown_loses_nothing_and_shutdown_finishes():
    exporter, provider, processor = _blocked_publishing("r1", 2)
    flushed: list[bool] = []
    flusher = threading.Thread(target=lambda: flushed.append(processor.force_flush(10_000)))
    flusher.start()
    _canary(provider, flush_each=False)  # queued behind that flush
    stopper = threading.Thread(target=processor.shutdown)
    stopper.start()
    exporter.release.set()
    flusher.join(10)
    stopper.join(10)
    assert flushed == [True] and not stopper.is_alive()
    canary = processor.assessment("canary-1")
    assert canary is not None and canary.trials.received == 8 and not canary.in_progress
    assert processor.force_flush() and processor.late == 0


def test_after_shutdown_spans_are_ignored_and_shutdown_is_idempotent():
    seen = []
    provider = TracerProvider()
    processor = EvidenceProcessor(on_assessment=seen.append)
    provider.add_span_processor(processor)
    _canary(provider, flush_each=False)
    processor.shutdown()
    processor.shutdown()
    emit([Trial("c1", 9, "a", "canary-2", "a")], provider)
    with evaluation_run(
        run_id="r2", suite=SUITE, policy=Policy(), planned_trials=2, tracer_provider=provider
    ):
        pass
    assert [a.run.id for a in seen] == ["canary-1"] and processor.late == 2
    assert processor.force_flush() is True


def test_a_declared_run_is_never_ended_for_idleness_however_slow_its_trials():
    seen = []
    clock = ManualClock()
    provider = TracerProvider()
    processor = EvidenceProcessor(idle=1.0, window=1.0, on_assessment=seen.append, clock=clock)
    provider.add_span_processor(processor)
    with evaluation_run(
        run_id="slow", suite=SUITE, policy=Policy(), planned_trials=4, tracer_provider=provider
    ):
        for index in range(4):
            emit([Trial("c", index, "a", "slow", "a")], provider)
            clock.advance(4.0)  # four idle periods between trials
            assert processor.force_flush() and seen == []  # neither ended nor windowed
    assert processor.force_flush()
    (assessment,) = seen
    assert assessment.trials.received == 4 and processor.late == 0
    assert assessment.trials.expected == 4  # judged by its declaration, not as a canary


def test_a_forked_child_starts_empty_and_never_publishes_the_parents_runs():
    import os

    seen = []
    provider = TracerProvider()
    processor = EvidenceProcessor(on_assessment=seen.append)
    provider.add_span_processor(processor)
    _canary(provider, flush_each=False)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: shut down, report what it published, leave at once
        processor.shutdown()
        os.write(write, str(len(seen)).encode())
        os._exit(0)
    os.close(write)
    published_by_child = os.read(read, 16).decode()
    os.waitpid(child, 0)
    provider.shutdown()
    assert published_by_child == "0"
    assert [a.run.id for a in seen] == ["canary-1"] and seen[0].trials.received == 8


def test_a_flush_from_the_workers_own_callback_returns_instead_of_waiting_on_itself():
    results = []
    provider = TracerProvider()
    processor = EvidenceProcessor(on_assessment=lambda a: results.append(provider.force_flush()))
    provider.add_span_processor(processor)
    with evaluation_run(
        run_id="r", suite=SUITE, policy=Policy(), planned_trials=2, tracer_provider=provider
    ):
        emit([Trial("c", 0, "a", "r", "a"), Trial("c", 1, "a", "r", "a")], provider)
    assert processor.force_flush(timeout_millis=10_000)
    assert results == [False]  # it could not wait for its own job, and did not hang


def test_a_window_snapshot_is_not_changed_by_later_trials():
    from verdictgate import Evidence

    evidence = Evidence([Trial("c", 0, "a", "r", "a", latency_ms=5.0, passed=True)])
    frozen = evidence.snapshot()
    evidence.add(Trial("c", 1, "b", "r", "a", latency_ms=7.0, passed=False))
    evidence.add(Trial("c", 0, "b", "r", "a"))  # a conflict
    evidence.add(Trial("d", 0, None, "r", "a", "Boom"))
    assert [t.decision for t in frozen.trials()] == ["a"]
    assert frozen.conflicts == 0 and not frozen.error_types
    assert frozen.cases[("r", "c")].latency_values() == [5.0]
    assert frozen.cases[("r", "c")].pass_counts() == (1, 1)
    assert [t.decision for t in evidence.trials()] == ["a", "b", None]


def test_two_publishers_on_one_meter_provider_both_publish():
    """The SDK keeps the first callbacks of an instrument name; a second publisher on the same
    provider (two processors in one service) must not publish into nothing."""
    memory = MemoryTelemetry()
    first = Publisher(meter_provider=memory.telemetry.meter_provider)
    second = Publisher(meter_provider=memory.telemetry.meter_provider)
    for publisher, suite in ((first, "payments"), (second, "refunds")):
        trials = [Trial(f"c{c}", i, "a", suite) for c in range(2) for i in range(4)]
        publisher.publish(assess(trials, Suite(name=suite, point="p", contract=CONTRACT)), set())
    points = memory.metric_points()
    memory.telemetry.shutdown()
    assert {dict(p.attributes)[names.SUITE] for p in points[names.METRIC_ADMISSION]} == {
        "payments",
        "refunds",
    }


def test_one_collection_reads_one_admission_even_if_another_replaces_it_meanwhile():
    """Gauges are read one after another: an admission that replaces another between two of
    them must not make a collection read half of each (inconclusive, then qualified, must not
    read as rejected)."""
    from verdictgate.otel.admission_record import AdmissionRecord, TrialTally
    from verdictgate.otel.latest_admissions import LatestAdmissions

    class RecordingMeter:  # the one part of a Meter LatestAdmissions uses
        def __init__(self) -> None:
            self.callbacks: dict[str, object] = {}

        def create_observable_gauge(self, name, callbacks, unit="", description=""):
            self.callbacks[name] = callbacks[0]

    def publication(flips: bool) -> AdmissionRecord:
        routes = ["a", "b"]
        trials = [
            Trial(f"c{c}", i, routes[(c + (flips and i % 2)) % 2], "r", routes[c % 2])
            for c in range(40)
            for i in range(4)
        ]
        suite = Suite(name="s", point="p", contract=Contract({"a", "b"}))
        return AdmissionRecord.of(assess(trials, suite), frozenset(), TrialTally())

    meter = RecordingMeter()
    latest = LatestAdmissions.on(meter)  # type: ignore[arg-type]
    latest.replace(first := publication(flips=True))
    values = {}
    for number, (name, observe) in enumerate(meter.callbacks.items()):
        values[name] = [o.value for o in observe(None)]
        if number == 0:
            latest.replace(publication(flips=False))  # between two gauges of one collection
    expected = {name: [v for g, v, _ in first.gauges if g == name] for name in meter.callbacks}
    assert values == expected  # all from the first admission
    second = {name: [o.value for o in observe(None)] for name, observe in meter.callbacks.items()}
    assert second[names.METRIC_ADMISSION] != values[names.METRIC_ADMISSION]  # the next: the new one


# The bounded intake: the caller waits for room, and nothing accepted is lost


def _decision_span(run: str, case: str, index: int) -> ReadableSpan:
    """An ended decision span, as the SDK hands it to `on_end`."""
    attributes = {names.RUN_ID: run, names.CASE_ID: case, names.TRIAL: index}
    attributes |= {names.OUTCOME: "decision", names.VERDICT: "a"}
    return ReadableSpan(name="decide p", attributes=attributes, start_time=1_000, end_time=3_000)


def _eventually(check: Callable[[], object]) -> None:
    """Wait for another thread to get where `check` sees it (a thread takes no clock)."""
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, "the other thread never got there"
        time.sleep(0.001)


def _held(max_queue_size: int) -> tuple[EvidenceProcessor, threading.Event]:
    """A processor whose worker is held inside a watcher until the returned event is set: what
    ends from now on stays queued."""
    processor = EvidenceProcessor(max_queue_size=max_queue_size)
    entered, release = threading.Event(), threading.Event()
    processor.watch("hold", lambda _: (entered.set(), release.wait(20)))
    assert processor.force_flush()  # the watcher set: the intake is empty
    processor.on_end(_decision_span("hold", "c", 0))
    assert entered.wait(20)
    return processor, release


def _ending(processor: EvidenceProcessor, spans: int) -> tuple[threading.Thread, list[int]]:
    """A thread that ends `spans` decision spans of run "q", one after another; the list
    counts those whose `on_end` returned."""
    returned: list[int] = []

    def end() -> None:
        for index in range(spans):
            processor.on_end(_decision_span("q", f"c{index}", 0))
            returned.append(index)

    thread = threading.Thread(target=end)
    thread.start()
    return thread, returned


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(0, 14))
def test_a_full_intake_makes_the_caller_wait_and_loses_nothing(size, spans):
    processor, release = _held(size)
    thread, returned = _ending(processor, spans)
    if spans > size:
        _eventually(lambda: processor.waited)
        assert len(returned) == size  # the bound holds: the next caller waits for room
        assert processor.waited == 1 and thread.is_alive()
    else:
        thread.join(20)
        assert len(returned) == spans and processor.waited == 0
    release.set()
    thread.join(20)
    assert not thread.is_alive() and len(returned) == spans
    assert processor.force_flush(timeout_millis=20_000)
    processor.shutdown()
    received = processor.assessment("q")
    assert (received.trials.received if received else 0) == spans  # every one recorded
    assert processor.late == processor.dropped == 0


def test_a_flush_never_waits_for_room_and_honours_its_timeout():
    processor, release = _held(2)
    thread, _ = _ending(processor, 3)
    _eventually(lambda: processor.waited)
    assert processor.force_flush(timeout_millis=10) is False  # queued past the bound, timed out
    release.set()
    thread.join(20)
    assert processor.force_flush(timeout_millis=20_000) is True
    processor.shutdown()
    assert processor.assessment("q").trials.received == 3


def test_shutdown_releases_a_caller_waiting_for_room_and_its_span_is_late():
    processor, release = _held(1)
    thread, returned = _ending(processor, 2)
    _eventually(lambda: processor.waited)
    stopper = threading.Thread(target=processor.shutdown)
    stopper.start()
    thread.join(20)
    assert not thread.is_alive() and returned == [0, 1]
    assert processor.late == 1  # the span that waited: shutdown came before room did
    release.set()
    stopper.join(20)
    assert not stopper.is_alive()
    processor.shutdown()  # idempotent
    assert processor.force_flush() is True
    assert processor.assessment("q").trials.received == 1  # what was accepted is published


def test_the_workers_own_thread_never_waits_for_room():
    """A span a callback ends on the worker is queued past the bound (it could only wait on
    itself)."""
    processor = EvidenceProcessor(max_queue_size=1)
    spans = [_decision_span("inner", f"c{n}", 0) for n in range(3)]
    processor.watch("outer", lambda _: [processor.on_end(span) for span in spans])
    assert processor.force_flush()
    processor.on_end(_decision_span("outer", "c", 0))
    assert processor.force_flush(timeout_millis=20_000)
    processor.shutdown()
    assert processor.assessment("inner").trials.received == 3 and processor.waited == 0


def test_a_queued_decision_keeps_its_facts_not_its_span():
    processor, release = _held(8)
    span = _decision_span("q", "c", 0)
    processor.on_end(span)
    gone = weakref.ref(span)
    del span
    gc.collect()
    assert gone() is None  # queued, and the span already collected
    release.set()
    processor.shutdown()
    assert processor.assessment("q").trials.received == 1


def test_the_queue_bound_is_at_least_one():
    with pytest.raises(ValueError, match="max_queue_size"):
        EvidenceProcessor(max_queue_size=0)


attribute_values = st.one_of(
    st.none(),
    st.sampled_from(["a", "b"]),
    st.booleans(),
    st.integers(0, 3),
    st.lists(st.sampled_from(["x", "y"]), max_size=2).map(tuple),
)


@settings(max_examples=100, deadline=None)
@given(st.fixed_dictionaries({}, optional=dict.fromkeys(CASE_KEYS, attribute_values)))
def test_a_decisions_facts_are_the_attributes_it_reads_shared_across_its_trials(attributes):
    reader = DecisionReader()
    read = {key: value for key, value in attributes.items() if value is not None}
    first = reader.facts(_decision_span_with(attributes, 0))
    second = reader.facts(_decision_span_with(attributes, 1))
    assert attributes_of(first) == {**read, names.TRIAL: 0}
    assert attributes_of(second) == {**read, names.TRIAL: 1}
    assert first[0] is second[0]  # one case, one answer: its values kept once
    assert first[2] == 2_000  # the duration, in nanoseconds


def _decision_span_with(attributes: dict[str, object], index: int) -> ReadableSpan:
    values = {key: value for key, value in attributes.items() if value is not None}
    return ReadableSpan(
        name="decide p", attributes={**values, names.TRIAL: index}, start_time=1, end_time=2_001
    )
