"""Publishing never stalls senders: with the publish target down, the official exporter's
exports succeed within its timeout; admissions wait in the durable outbox, survive a restart,
and reach the collector when it appears, exactly as if it had been there all along."""

from __future__ import annotations

import signal
import subprocess
import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from components import free_port
from otel_support import OtlpCollector, attributes, run_spans
from receiver_support import start_serve, wait_until
from verdictgate.otel import conventions as names
from verdictgate.otel.admission_record import GAUGES
from verdictgate.receiver.store import Store

RUNS = ("outage-1", "outage-2", "outage-3")


def stop(process: subprocess.Popen) -> str:
    """SIGTERM; what it logged until it exited (how long it takes to exit during an outage is
    a figure benchmarks/publish_outage.py prints)."""
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    return stderr


def export_runs(grpc_port: int, runs: list[list]) -> list[SpanExportResult]:
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True, timeout=2)
    try:
        return [exporter.export(spans) for spans in runs]
    finally:
        exporter.shutdown()


def wait_for_admissions(collector: OtlpCollector, count: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        spans = [s for s in collector.spans() if s.name == names.ADMISSION_SPAN]
        if len(spans) >= count and len(collector.log_records()) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"{len(collector.spans())} spans reached the collector, want {count}")


def published(collector: OtlpCollector) -> dict:
    """What reached the collector, independent of when: admission spans and events by run,
    the last value of every gauge series and the total of every counter series."""
    spans = {
        attributes(s.attributes)[names.RUN_ID]: attributes(s.attributes)
        for s in collector.spans()
        if s.name == names.ADMISSION_SPAN
    }
    events = {
        attributes(r.attributes)[names.RUN_ID]: (r.event_name, attributes(r.attributes))
        for r in collector.log_records()
    }
    gauges, totals = {}, {}
    for request in collector.metrics:
        for resource_metrics in request.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        series = (metric.name, tuple(sorted(attributes(point.attributes).items())))
                        value = point.as_int if point.HasField("as_int") else point.as_double
                        if kind == "sum":
                            totals[series] = value  # cumulative: the latest is the total
                        else:
                            gauges.setdefault(series, []).append((point.time_unix_nano, value))
    last = {  # when each admission was made differs between two runs of the test, not what
        series: max(points)[1] if GAUGES[series[0]][0] != "s" else "a time"
        for series, points in gauges.items()
    }
    return {"spans": spans, "events": events, "gauges": last, "totals": totals}


def test_an_unreachable_publish_target_never_stalls_senders_and_loses_no_admission(tmp_path):
    runs = [run_spans(run, flips=run == RUNS[1]) for run in RUNS]  # the same spans twice
    # The reference: the collector is there from the start.
    publish_port = free_port()
    with OtlpCollector(publish_port) as collector:
        process = start_serve(
            tmp_path / "reference.sqlite",
            grpc_port := free_port(),
            "--publish-endpoint",
            f"http://127.0.0.1:{publish_port}",
        )
        for admitted, spans in enumerate(runs, 1):  # one admission at a time: the suite's
            assert export_runs(grpc_port, [spans]) == [SpanExportResult.SUCCESS]  # gauges
            wait_for_admissions(collector, admitted)  # end on the same run whatever the threads
        stop(process)
    reference = published(collector)
    assert set(reference["spans"]) == set(RUNS)
    assert reference["spans"]["outage-2"][names.STATUS] == "rejected"

    # The outage: nothing listens on the publish port.
    publish_port = free_port()
    store = tmp_path / "outage.sqlite"
    process = start_serve(
        store, grpc_port := free_port(), "--publish-endpoint", f"http://127.0.0.1:{publish_port}"
    )
    for admitted, spans in enumerate(runs, 1):  # in the reference's order
        assert export_runs(grpc_port, [spans]) == [SpanExportResult.SUCCESS]
        wait_until(lambda admitted=admitted: outbox_size(store) == admitted)  # none delivered
    time.sleep(1.0)  # a few attempts fail and back off, as after the restart below
    log = stop(process)
    assert log.count("cannot publish admissions") == 1, log  # once per state change
    assert "3 admissions wait in the outbox" in log

    # A restart while the target is still down, then the collector appears.
    process = start_serve(
        store, grpc_port, "--publish-endpoint", f"http://127.0.0.1:{publish_port}"
    )
    time.sleep(1.0)  # a few attempts fail and back off
    with OtlpCollector(publish_port) as collector:
        wait_for_admissions(collector, 3)
        log = stop(process)
    assert log.count("cannot publish admissions") == 1, log
    assert "(3 admissions waiting)" in log  # the restart found them
    assert log.count("again; the outbox is delivered") == 1, log  # ... once when it works again
    after = published(collector)
    assert len([s for s in collector.spans() if s.name == names.ADMISSION_SPAN]) == 3
    for part in ("spans", "events", "gauges", "totals"):
        assert after[part] == reference[part], part


def outbox_size(location) -> int:
    """The admissions a store's outbox holds, read by another connection."""
    store = Store(location)
    try:
        return store.outbox_size()
    finally:
        store.close()
