"""The SDK pipeline a run records through: evidence processor always, OTLP export on request."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from urllib.parse import urlparse

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from . import conventions as names
from .processor import EvidenceProcessor
from .publisher import Publisher

EXPORT_INTERVAL_MS = 60_000
"""Metric export interval; a run flushes its metrics on shutdown whatever the interval."""


class CountedExporter(SpanExporter):
    """A span exporter that counts the spans its target acknowledged."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self.acknowledged = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.acknowledged += len(spans)
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._inner.shutdown()


class CountedBatchProcessor(BatchSpanProcessor):
    """The SDK's batch processor, counting the spans offered to it for export (`offered`):
    the ones its queue drops when full are among them, so a run that meant to send its spans
    can say how many never arrived, whichever way they were lost."""

    def __init__(self, exporter: SpanExporter) -> None:
        super().__init__(exporter)
        self.offered = 0
        self._counting = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            with self._counting:  # on_end runs on whichever thread ends the span
                self.offered += 1
        super().on_end(span)


class Telemetry:
    """Tracer, meter and logger providers with an EvidenceProcessor on the tracer.

    With exporters (or an OTLP endpoint) everything the run emits — decision spans, the run
    span, the admission span, the metrics and the evaluation event — is exported too.
    """

    def __init__(
        self,
        *,
        span_exporter: SpanExporter | None = None,
        metric_reader: MetricReader | None = None,
        log_exporter: LogRecordExporter | None = None,
        resource: Resource | None = None,
        collect: bool = True,
    ) -> None:
        resource = resource or Resource.create({names.SERVICE_NAME: "verdictgate"})
        self.tracer_provider = TracerProvider(resource=resource)
        self.meter_provider = MeterProvider(
            resource=resource, metric_readers=[metric_reader] if metric_reader else []
        )
        self.logger_provider = LoggerProvider(resource=resource)
        if log_exporter is not None:
            self.logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
        self.publisher = Publisher(self.tracer_provider, self.meter_provider, self.logger_provider)
        self.processor = EvidenceProcessor(self.publisher) if collect else None
        if self.processor is not None:
            self.tracer_provider.add_span_processor(self.processor)  # first: reads before export
        self._exported = None if span_exporter is None else CountedExporter(span_exporter)
        self._batch = None if self._exported is None else CountedBatchProcessor(self._exported)
        if self._batch is not None:
            self.tracer_provider.add_span_processor(self._batch)

    @property
    def spans_lost(self) -> int:
        """Spans offered for export that the target has not acknowledged: refused, never
        answered, or dropped by a full queue (after `shutdown`, nothing is still in flight)."""
        if self._exported is None or self._batch is None:
            return 0
        return max(0, self._batch.offered - self._exported.acknowledged)

    @classmethod
    def otlp(cls, endpoint: str, *, collect: bool = True) -> Telemetry:
        """Export over OTLP/gRPC to `endpoint` (`http://` means no TLS); the standard
        `OTEL_EXPORTER_OTLP_*` variables set headers, timeouts and certificates. Without
        `collect` there is no EvidenceProcessor: the pipeline only publishes."""
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        insecure = urlparse(endpoint).scheme == "http"
        return cls(
            span_exporter=OTLPSpanExporter(endpoint=endpoint, insecure=insecure),
            metric_reader=PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=endpoint, insecure=insecure),
                export_interval_millis=EXPORT_INTERVAL_MS,
            ),
            log_exporter=OTLPLogExporter(endpoint=endpoint, insecure=insecure),
            collect=collect,
        )

    def flush(self) -> None:
        """Export what is pending now (admissions are rare; waiting for an interval is not needed)."""
        self.tracer_provider.force_flush()
        self.meter_provider.force_flush()
        self.logger_provider.force_flush()

    def shutdown(self) -> None:
        """Flush and stop every provider: spans, then metrics and the event."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        self.logger_provider.shutdown()
