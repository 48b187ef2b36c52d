"""The two encoders of one admission agree: the in-process `Publisher` (through the
OpenTelemetry SDK and its OTLP exporters) and the receiver's `OtlpTarget` (OTLP protobuf
written directly) send a collector the same admission span, evaluation event and metrics for
the same `AdmissionRecord`, but for the ids and times each pipeline gives them."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_support import OtlpCollector, attributes
from verdictgate import Contract, Suite, Trial, assess
from verdictgate.otel.admission_record import AdmissionRecord, TrialTally
from verdictgate.otel.publisher import Publisher
from verdictgate.receiver.publishing.forwarder import ALL_SIGNALS
from verdictgate.receiver.publishing.otlp_target import OtlpTarget

SUITE = Suite("refunds", "refund_gate", (), Contract({"approve", "deny"}))


def admission() -> AdmissionRecord:
    """A run whose route flips on one case: every gauge, the counter and a streak have values."""
    trials = [
        Trial(case, index, "deny" if case == "c2" and index % 2 else "approve", "r", "approve")
        for case in ("c1", "c2")
        for index in range(8)
    ]
    return AdmissionRecord.of(assess(trials, SUITE), {"approve", "deny"}, TrialTally())


def signals(collector: OtlpCollector) -> dict[str, object]:
    """What a collector received, without ids and times: the spans (name, kind, attributes),
    the log records (event name, attributes, whether in the span's context) and each metric's
    kind and points (attributes, value)."""
    spans = [(s.name, s.kind, attributes(s.attributes)) for s in collector.spans()]
    logs = [
        (r.event_name, attributes(r.attributes), r.span_id == collector.spans()[0].span_id)
        for r in collector.log_records()
    ]
    metrics: dict[str, tuple[str, bool, int, list[tuple[object, ...]]]] = {}
    for request in collector.metrics:
        for resource_metrics in request.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    data = getattr(metric, kind)
                    points = sorted(
                        (
                            tuple(sorted(attributes(p.attributes).items())),
                            getattr(p, p.WhichOneof("value")),
                        )
                        for p in data.data_points
                    )
                    monotonic = getattr(data, "is_monotonic", False)
                    temporality = getattr(data, "aggregation_temporality", 0)
                    metrics[metric.name] = (kind, monotonic, temporality, points)
    return {"spans": spans, "logs": logs, "metrics": metrics}


def test_the_publisher_and_the_receivers_target_send_the_same_admission() -> None:
    record = admission()
    with OtlpCollector() as direct, OtlpCollector() as through_sdk:
        target = OtlpTarget(f"http://127.0.0.1:{direct.port}")
        assert target.deliver(1, record, ALL_SIGNALS) == (ALL_SIGNALS, None)
        target.close()
        endpoint = f"127.0.0.1:{through_sdk.port}"
        spans = TracerProvider()
        spans.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint, insecure=True)))
        logs = LoggerProvider()
        logs.add_log_record_processor(
            SimpleLogRecordProcessor(OTLPLogExporter(endpoint, insecure=True))
        )
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint, insecure=True), export_interval_millis=3_600_000
        )
        meters = MeterProvider(metric_readers=[reader])
        Publisher(spans, meters, logs).emit(record)
        for provider in (spans, logs, meters):
            provider.shutdown()  # exports what it holds
    sent, published = signals(direct), signals(through_sdk)
    assert sent["spans"] and sent["logs"] and sent["metrics"]
    assert sent == published
