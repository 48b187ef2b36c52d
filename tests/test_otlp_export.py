"""`verdictgate run --otlp-endpoint` through the real OTLP/gRPC exporters to a local server."""

from __future__ import annotations

import json
from pathlib import Path

from otel_support import OtlpCollector, attributes
from verdictgate.otel import conventions as names

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_run_exports_decisions_admission_metrics_and_event(cli):
    with OtlpCollector() as collector:
        result = cli(
            "run",
            "--agent",
            f"{EXAMPLES / 'payment_router.py'}:flipping_router",
            "--suite",
            str(EXAMPLES / "payment_suite.json"),
            "--isolation",
            "fresh-instance",
            "--format",
            "json",
            "--otlp-endpoint",
            f"http://127.0.0.1:{collector.port}",
        )
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["status"] == "rejected"

    spans = collector.spans()
    decisions = [s for s in spans if s.name == "decide payment_router"]
    assert len(decisions) == report["trials"]["received"] == 856
    (run_span,) = [s for s in spans if s.name == names.RUN_SPAN]
    assert all(s.parent_span_id == run_span.span_id for s in decisions)
    (admission,) = [s for s in spans if s.name == names.ADMISSION_SPAN]
    admitted = attributes(admission.attributes)
    assert admitted[names.STATUS] == report["status"]
    assert admitted[names.REASONS] == [r["code"] for r in report["reasons"]]
    assert admitted[names.RUN_ID] == report["run"]["id"]

    assert {
        names.METRIC_ADMISSION,
        names.METRIC_CHANGE_RATE_UPPER,
        names.METRIC_TRIALS,
    } <= collector.metric_names()
    events = [r for r in collector.log_records() if r.event_name == names.EVALUATION_EVENT]
    assert len(events) == 1
    event = attributes(events[0].attributes)
    assert event[names.EVALUATION_SCORE_LABEL] == "rejected"
    assert event[names.EVALUATION_SCORE_VALUE] == report["stability"]["pooled"]["ci_high"]
    assert events[0].span_id == admission.span_id and events[0].trace_id == admission.trace_id


def test_results_are_identical_with_and_without_telemetry(cli):
    for fmt in ("json", "text"):
        args = [
            "run",
            "--agent",
            f"{EXAMPLES / 'payment_router.py'}:stable_router",
            "--run-id",
            "nightly-7",
            "--suite",
            str(EXAMPLES / "payment_suite.json"),
            "--format",
            fmt,
        ]
        plain = cli(*args)
        with OtlpCollector() as collector:
            exported = cli(*args, "--otlp-endpoint", f"http://127.0.0.1:{collector.port}")
        assert plain.exit_code == exported.exit_code == 0
        if fmt == "json":  # two runs time their calls differently; everything else is the same
            plain_report, exported_report = json.loads(plain.stdout), json.loads(exported.stdout)
            assert plain_report.pop("latency")["trials"] == exported_report.pop("latency")["trials"]
            assert plain_report == exported_report
        else:
            assert without_timing(plain.stdout) == without_timing(exported.stdout)
        assert collector.spans()


def without_timing(text: str) -> str:
    """The text report without its Tiers table, whose latency row differs from run to run."""
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.rstrip() == "Tiers")
    end = next(n for n in range(start, len(lines)) if lines[n].startswith("└"))
    assert any("latency" in line for line in lines[start:end])
    return "\n".join(lines[:start] + lines[end + 1 :])


def test_the_canary_example_reaches_a_collector():
    import subprocess
    import sys

    with OtlpCollector() as collector:
        result = subprocess.run(
            [
                sys.executable,
                str(EXAMPLES / "otel_canary.py"),
                "--endpoint",
                f"http://127.0.0.1:{collector.port}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert ": qualified" in result.stdout
    (admission,) = [s for s in collector.spans() if s.name == names.ADMISSION_SPAN]
    assert attributes(admission.attributes)[names.STATUS] == "qualified"
    assert names.METRIC_ADMISSION in collector.metric_names()
    assert [r.event_name for r in collector.log_records()] == [names.EVALUATION_EVENT]


def test_spans_a_full_export_queue_drops_count_as_lost():
    """The SDK's batch processor drops spans when its queue is full, without an error from
    any export: a run that meant to send its spans must still count them as not arrived."""
    import threading

    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from verdictgate.otel.telemetry import Telemetry

    class HeldExporter(SpanExporter):
        """Acknowledges every batch, but only once the test lets it go."""

        def __init__(self) -> None:
            self.released = threading.Event()
            self.received = 0

        def export(self, spans):
            self.released.wait(timeout=60)
            self.received += len(spans)
            return SpanExportResult.SUCCESS

    held = HeldExporter()
    telemetry = Telemetry(span_exporter=held, collect=False)
    tracer = telemetry.tracer_provider.get_tracer("test")
    for index in range(5_000):  # far beyond the default queue of 2,048 while nothing leaves
        tracer.start_span(f"span {index}").end()
    held.released.set()
    telemetry.shutdown()
    assert 0 < held.received < 5_000
    assert telemetry.spans_lost == 5_000 - held.received
