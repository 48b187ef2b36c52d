"""Test support for the OpenTelemetry path: in-memory pipelines, a local OTLP/gRPC server, the
spans of one run made through the SDK, and OTLP attributes read back as a dict."""

from __future__ import annotations

from concurrent import futures
from dataclasses import dataclass, field

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from verdictgate import Contract, Policy, Suite, decision, evaluation_run, trial
from verdictgate.otel.telemetry import Telemetry

REFUND_SUITE = Suite("refunds", "refund_gate", (), Contract({"approve", "deny"}))
"""The suite of `run_spans`."""


def run_spans(run_id: str, flips: bool) -> list:
    """The finished spans of one run: 2 cases x 6 trials, the second case flipping if asked."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with evaluation_run(
        run_id=run_id,
        suite=REFUND_SUITE,
        policy=Policy(tolerance=0.15),
        planned_trials=12,
        tracer_provider=provider,
    ):
        for case, route in (("c1", "approve"), ("c2", "deny")):
            for index in range(6):
                with (
                    trial(
                        run=run_id, case=case, index=index, expected=route, suite=REFUND_SUITE.name
                    ),
                    decision(REFUND_SUITE.point, tracer_provider=provider) as recorder,
                ):
                    recorder.record("approve" if flips and case == "c2" and index % 2 else route)
    return list(memory.get_finished_spans())


def attributes(proto_attributes) -> dict:
    """OTLP (protobuf) attributes as a dict: key -> scalar, or a list of strings for an array."""
    values = {}
    for item in proto_attributes:
        value = item.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            values[item.key] = [v.string_value for v in value.array_value.values]
        else:
            values[item.key] = getattr(value, kind)
    return values


@dataclass
class MemoryTelemetry:
    """A Telemetry pipeline whose every export lands in memory."""

    spans: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    metrics: InMemoryMetricReader = field(default_factory=InMemoryMetricReader)
    logs: InMemoryLogRecordExporter = field(default_factory=InMemoryLogRecordExporter)

    def __post_init__(self) -> None:
        self.telemetry = Telemetry(
            span_exporter=self.spans, metric_reader=self.metrics, log_exporter=self.logs
        )

    def metric_points(self) -> dict[str, list]:
        """Metric name -> data points (collected now)."""
        points: dict[str, list] = {}
        data = self.metrics.get_metrics_data()
        for resource_metrics in data.resource_metrics if data else ():
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    points.setdefault(metric.name, []).extend(metric.data.data_points)
        return points


class OtlpCollector:
    """A local OTLP/gRPC server that keeps every request it receives (traces, metrics, logs)."""

    def __init__(self, port: int = 0, max_request: int | None = None) -> None:
        self.traces: list = []
        self.metrics: list = []
        self.logs: list = []
        options = [] if max_request is None else [("grpc.max_receive_message_length", max_request)]
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=options)
        collector = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                collector.traces.append(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):
                collector.metrics.append(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request, context):
                collector.logs.append(request)
                return logs_service_pb2.ExportLogsServiceResponse()

        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), self.server)
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")

    def __enter__(self) -> OtlpCollector:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=None)

    def spans(self) -> list:
        return [
            span
            for request in self.traces
            for resource_spans in request.resource_spans
            for scope in resource_spans.scope_spans
            for span in scope.spans
        ]

    def _metrics(self) -> list:
        """Every metric received, request after request."""
        return [
            metric
            for request in self.metrics
            for resource_metrics in request.resource_metrics
            for scope in resource_metrics.scope_metrics
            for metric in scope.metrics
        ]

    def data_points(self, name: str) -> list:
        """Every data point received of the metric `name` (a gauge's or a sum's)."""
        return [
            point
            for metric in self._metrics()
            if metric.name == name
            for point in (*metric.gauge.data_points, *metric.sum.data_points)
        ]

    def metric_names(self) -> set[str]:
        return {metric.name for metric in self._metrics()}

    def log_records(self) -> list:
        return [
            record
            for request in self.logs
            for resource_logs in request.resource_logs
            for scope in resource_logs.scope_logs
            for record in scope.log_records
        ]
