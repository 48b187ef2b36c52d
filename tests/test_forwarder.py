"""The receiver's outbox and forwarder: bounded, in order, never stuck on one bad entry, and
never stopped by a long outage."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from otel_support import OtlpCollector, attributes
from receiver_support import wait_until
from verdictgate import Contract, Suite, Trial, assess
from verdictgate.otel import conventions as names
from verdictgate.otel.admission_record import AdmissionRecord, TrialTally
from verdictgate.receiver.publishing.forwarder import ALL_SIGNALS, METRICS, Forwarder
from verdictgate.receiver.publishing.otlp_target import OtlpTarget
from verdictgate.receiver.store import Batch, Store

SUITE = Suite("refunds", "refund_gate", (), Contract({"approve"}))


def publication(run: str, final: bool = True, now_ns: int | None = None) -> str:
    trials = [Trial("c", i, "approve", run, "approve") for i in range(4)]
    assessment = assess(trials, SUITE)
    return AdmissionRecord.of(
        assessment, {"approve"}, TrialTally(), final=final, now_ns=now_ns
    ).to_json()


def open_run(store: Store, run: str) -> None:
    store.write(Batch([Trial("c", 0, "approve", run, "approve")]))


class FlakyTarget:
    """Fails `failures` times, then delivers; remembers what it delivered, in order."""

    endpoint = "a flaky target"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self.delivered: list[str] = []
        self.done = threading.Event()

    def deliver(self, seq, publication, pending):
        self.attempts += 1
        if self.attempts <= self.failures:
            return 0, "UNAVAILABLE: down"
        self.delivered.append(publication.run_id)
        self.done.set()
        return ALL_SIGNALS, None

    def close(self):
        pass


def test_the_outbox_drops_interim_admissions_first_and_warns_once(caplog):
    store = Store(outbox_limit=3)
    for run in ("w1", "w2"):
        open_run(store, run)
        assert store.stage(run, publication(run, final=False))
    with caplog.at_level(logging.WARNING):
        for run in ("f1", "f2", "f3"):
            open_run(store, run)
            assert store.finish(run, "qualified", publication(run))
    now = time.time()
    claimed = store.outbox.claim("local", now, now + 60, 10)
    kept = [AdmissionRecord.from_json(body).run_id for _, body, _ in claimed]
    assert kept == ["f1", "f2", "f3"] and store.outbox_size() == 3
    assert sum("outbox holds 3" in r.getMessage() for r in caplog.records) == 1
    assert not store.finish("f1", "rejected", publication("f1"))  # final once
    assert not store.stage("f1", publication("f1", final=False))  # nothing after the final one


def test_an_unreadable_entry_is_dropped_and_never_blocks_the_ones_behind_it(caplog):
    store = Store()
    for run in ("a", "b"):
        open_run(store, run)
    store.finish("a", "qualified", '{"not": "a publication"}')
    store.finish("b", "qualified", publication("b"))
    target = FlakyTarget(0)
    with caplog.at_level(logging.ERROR):
        assert Forwarder(store, target).drain()
    assert target.delivered == ["b"] and store.outbox_size() == 0
    assert any("unreadable" in r.getMessage() for r in caplog.records)


def test_a_long_outage_never_stops_the_forwarder():
    store = Store()
    open_run(store, "late")
    store.finish("late", "qualified", publication("late"))
    target = FlakyTarget(2000)  # far past where 2 ** failures once overflowed a float
    forwarder = Forwarder(store, target, backoff=(1e-300, 1e-300))
    forwarder.start()
    try:
        assert target.done.wait(120), f"{target.attempts} attempts, then nothing"
    finally:
        forwarder.stop()
    assert target.delivered == ["late"] and store.outbox_size() == 0


def test_a_replayed_admission_keeps_its_time_and_a_counter_start_before_it(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gate-receiver")
    staged_ns = time.time_ns() - 3_600 * 10**9  # staged an hour before this process started
    store = Store()
    open_run(store, "old")
    store.finish("old", "qualified", publication("old", now_ns=staged_ns))
    with OtlpCollector() as collector:
        target = OtlpTarget(f"http://127.0.0.1:{collector.port}")
        assert Forwarder(store, target).drain()
        target.close()
    (span,) = collector.spans()
    assert span.start_time_unix_nano == staged_ns
    (record,) = collector.log_records()
    assert record.time_unix_nano == staged_ns and record.span_id == span.span_id
    resource = collector.traces[0].resource_spans[0].resource
    assert attributes(resource.attributes)[names.SERVICE_NAME] == "gate-receiver"
    sums = collector.data_points(names.METRIC_TRIALS)
    assert sums and all(p.start_time_unix_nano <= p.time_unix_nano == staged_ns for p in sums)
    assert sum(p.as_int for p in sums) == 4


def oversized_publication(run: str) -> str:
    """An admission of 512 routes with long names: its metrics are megabytes."""
    routes = [f"{n:03d}-" + "r" * 3000 for n in range(512)]
    trials = [
        Trial(f"c{n}", i, route, run, route) for n, route in enumerate(routes) for i in range(2)
    ]
    assessment = assess(trials, Suite("big", "gate", (), Contract(frozenset(routes))))
    return AdmissionRecord.of(assessment, set(routes), TrialTally()).to_json()


def test_an_oversized_admission_is_delivered_in_parts_and_the_ones_after_it_flow() -> None:
    """A target whose request limit (1.5 MiB here; the Collector's default is 4 MiB) is below
    the admission's metrics (1.6 MB in one request): they go in requests of 1 MiB at most, every
    point arrives, and the 5 admissions after it too."""
    store = Store()
    runs = ["huge", *(f"after-{n}" for n in range(5))]
    for run in runs:
        open_run(store, run)
    big = oversized_publication("huge")
    store.stage("huge", big)
    for run in runs[1:]:
        store.stage(run, publication(run))
    with OtlpCollector(max_request=3 << 19) as collector:
        target = OtlpTarget(f"http://127.0.0.1:{collector.port}")
        assert Forwarder(store, target).drain()
    assert store.outbox_size() == 0 and target.set_aside == 0
    assert all(request.ByteSize() <= 1 << 20 for request in collector.metrics)
    sent = AdmissionRecord.from_json(big)
    assert len(collector.data_points(names.METRIC_CHANGE_RATE_UPPER)) >= sum(
        1 for name, _, _ in sent.gauges if name == names.METRIC_CHANGE_RATE_UPPER
    )
    delivered = [attributes(span.attributes)[names.RUN_ID] for span in collector.spans()]
    assert delivered == runs


def test_a_request_the_target_never_takes_is_set_aside_and_the_rest_flow(caplog) -> None:
    """A target whose limit is below the admission span itself answers RESOURCE_EXHAUSTED
    without RetryInfo: after a few attempts that request is set aside, logged, and the outbox
    goes on."""
    store = Store()
    for run in ("huge", "next"):
        open_run(store, run)
    store.stage("huge", oversized_publication("huge"))
    store.stage("next", publication("next"))
    with OtlpCollector(max_request=64 << 10) as collector:
        target = OtlpTarget(f"http://127.0.0.1:{collector.port}")
        forwarder = Forwarder(store, target, backoff=(0.001, 0.002))
        with caplog.at_level(logging.ERROR, logger="verdictgate"):
            for _ in range(60):
                if forwarder.drain():
                    break
    assert store.outbox_size() == 0 and target.set_aside >= 1
    assert "set aside" in caplog.text
    assert "next" in [attributes(span.attributes)[names.RUN_ID] for span in collector.spans()]


def test_a_busy_target_that_sends_retry_info_is_waited_for_not_set_aside() -> None:
    """RESOURCE_EXHAUSTED with RetryInfo (a target shedding load, as verdictgate itself does)
    is tried again however often it comes, unlike the same code without it."""
    refusals = []

    class BusyTraces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            if len(refusals) < 8:  # more than the attempts a refusal without RetryInfo gets
                refusals.append(1)
                detail = any_pb2.Any()
                detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(nanos=1)))
                status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, details=[detail])
                context.set_trailing_metadata(
                    (("grpc-status-details-bin", status.SerializeToString()),)
                )
                context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
                context.set_details("busy")
                return trace_service_pb2.ExportTraceServiceResponse()
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request, context):
            return metrics_service_pb2.ExportMetricsServiceResponse()

    class Logs(logs_service_pb2_grpc.LogsServiceServicer):
        def Export(self, request, context):
            return logs_service_pb2.ExportLogsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(BusyTraces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        store = Store()
        open_run(store, "busy")
        store.stage("busy", publication("busy"))
        target = OtlpTarget(f"http://127.0.0.1:{port}")
        forwarder = Forwarder(store, target)
        attempts = 0
        while not forwarder.drain():
            attempts += 1
            assert attempts < 20
        assert len(refusals) == 8 and target.set_aside == 0 and store.outbox_size() == 0
    finally:
        server.stop(grace=None)


def test_a_failed_delivery_is_logged_once_an_episode_in_one_line(caplog) -> None:
    """30 failed attempts, then deliveries work: one line when they start failing (naming the
    target and the error's first line, no traceback), one when they work again."""
    store = Store()
    for run in ("a", "b"):
        open_run(store, run)
        store.finish(run, "qualified", publication(run))
    target = FlakyTarget(30)
    forwarder = Forwarder(store, target, backoff=(1e-6, 1e-6))
    with caplog.at_level(logging.DEBUG, "verdictgate"):
        forwarder.start()
        try:
            assert target.done.wait(60)
            wait_until(lambda: store.outbox_size() == 0 and forwarder.failing is None)
        finally:
            forwarder.stop()
    shown = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in shown] == [
        "verdictgate: cannot publish admissions to a flaky target (UNAVAILABLE: down); they "
        "wait in the outbox, retried with backoff, the others delivered meanwhile",
        "verdictgate: publishing to a flaky target again; the outbox is delivered",
    ]
    assert target.attempts > 30 and not any(r.exc_info for r in shown)


def test_a_store_failing_the_forwarder_is_one_line_without_a_traceback(caplog) -> None:
    store = Store()
    open_run(store, "a")
    store.finish("a", "qualified", publication("a"))
    claim, failures = store.outbox.claim, []

    def locked_for_a_while(*args, **kwargs):
        if len(failures) < 20:
            failures.append(1)
            raise sqlite3.OperationalError("database is locked\n(a second line)")
        return claim(*args, **kwargs)

    store.outbox.claim = locked_for_a_while
    target = FlakyTarget(0)
    forwarder = Forwarder(store, target, backoff=(1e-6, 1e-6))
    with caplog.at_level(logging.WARNING, "verdictgate"):
        forwarder.start()
        try:
            assert target.done.wait(60)
            wait_until(lambda: forwarder.failing is None)
        finally:
            forwarder.stop()
    failing, working = (r.getMessage() for r in caplog.records)
    assert "(the store is unavailable: database is locked)" in failing
    assert "second line" not in failing and not any(r.exc_info for r in caplog.records)
    assert "again" in working and len(failures) == 20


class StallingCollector:
    """An OTLP/gRPC server whose metrics calls stall while `stalling` is set (answering nothing,
    so that the caller's deadline passes, and taking nothing); it records each call as (signal,
    run) in the order they came, and those it accepted."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.accepted: list[tuple[str, str]] = []
        self.stalling = threading.Event()
        self.stalling.set()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        collector = self

        def take(signal: str, run: str, context) -> None:
            collector.calls.append((signal, run))
            if signal == "metrics" and collector.stalling.is_set():
                while collector.stalling.is_set() and context.is_active():
                    time.sleep(0.01)
                context.abort(grpc.StatusCode.UNAVAILABLE, "stalled")  # nothing taken
            collector.accepted.append((signal, run))

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                span = request.resource_spans[0].scope_spans[0].spans[0]
                take("traces", attributes(span.attributes)[names.RUN_ID], context)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request, context):
                record = request.resource_logs[0].scope_logs[0].log_records[0]
                take("logs", attributes(record.attributes)[names.RUN_ID], context)
                return logs_service_pb2.ExportLogsServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):
                metric = request.resource_metrics[0].scope_metrics[0].metrics[0]
                point = metric.gauge.data_points[0]
                take("metrics", attributes(point.attributes)[names.SUITE], context)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> StallingCollector:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stalling.clear()
        self.server.stop(grace=None)


def suite_publication(run: str) -> str:
    """An admission whose suite is named after its run (metrics carry the suite, not the run)."""
    trials = [Trial("c", i, "approve", run, "approve") for i in range(4)]
    assessment = assess(trials, Suite(run, "refund_gate", (), Contract({"approve"})))
    return AdmissionRecord.of(assessment, {"approve"}, TrialTally()).to_json()


def stage(store: Store, runs: list[str]) -> None:
    for run in runs:
        open_run(store, run)
        store.stage(run, suite_publication(run))


def test_a_stalled_signal_waits_behind_the_admissions_after_it() -> None:
    """A target that takes spans and events but stalls metrics calls: each call ends at its own
    deadline, the next 10 admissions' spans and events are delivered, the stalled metrics are
    tried again after them, and once the target takes metrics every admission's arrive, none
    lost, none twice."""
    store = Store()
    runs = [f"a{n}" for n in range(11)]
    with StallingCollector() as collector:
        target = OtlpTarget(f"http://127.0.0.1:{collector.port}", timeout=0.3)
        forwarder = Forwarder(store, target)
        stage(store, runs[:1])
        assert not forwarder.drain()  # its metrics call passed its deadline
        assert forwarder.stalled == METRICS and "metrics: DEADLINE_EXCEEDED" in forwarder.failing
        stage(store, runs[1:])
        assert not forwarder.drain()
        calls = collector.calls
        assert [run for signal, run in collector.accepted if signal == "traces"] == runs
        assert [run for signal, run in collector.accepted if signal == "logs"] == runs
        assert [call for call in calls if call[0] == "metrics"] == [("metrics", "a0")] * 2
        assert calls.index(("traces", "a10")) < len(calls) - 1 - calls[::-1].index(
            ("metrics", "a0")
        )  # tried again behind them
        assert store.outbox_size() == 11  # their metrics wait in the outbox
        collector.stalling.clear()
        assert forwarder.drain()
        target.close()
    assert [run for signal, run in collector.accepted if signal == "metrics"] == runs
    assert collector.accepted.count(("traces", "a0")) == 1 and store.outbox_size() == 0


def test_an_admission_staged_while_a_signal_stalls_is_delivered_before_the_backoff_ends() -> None:
    store = Store()
    with StallingCollector() as collector:
        target = OtlpTarget(f"http://127.0.0.1:{collector.port}", timeout=0.3)
        forwarder = Forwarder(store, target, backoff=(600.0, 600.0))
        stage(store, ["first"])
        forwarder.start()
        try:
            wait_until(lambda: forwarder.stalled == METRICS)
            stage(store, ["next"])
            forwarder.wake()  # as the receiver does when it stages an admission
            wait_until(lambda: ("logs", "next") in collector.accepted)
        finally:
            forwarder.stop()
    assert ("traces", "next") in collector.accepted
    assert ("metrics", "next") not in collector.calls  # metrics wait for the backoff
