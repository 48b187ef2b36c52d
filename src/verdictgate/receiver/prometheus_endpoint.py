"""The receiver's admission metrics as a Prometheus scrape endpoint, through OpenTelemetry's own
Prometheus exporter, so names and labels follow the standard conversion (`verdictgate.admission`
becomes `verdictgate_admission`, its `verdictgate.suite` attribute the `verdictgate_suite`
label, a unit of seconds the `_seconds` suffix)."""

from __future__ import annotations

from opentelemetry._logs import NoOpLoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NoOpTracerProvider

from ..otel.publication import Publication, publishing_resource
from ..otel.publisher import Publisher

EXTRA = "prometheus"
"""The extra that installs the exporter: `pip install 'verdictgate[prometheus]'`."""


class PrometheusEndpoint:
    """Serves the latest admission of every (suite, point) on `host:port` (`/metrics`), each
    gauge until a newer admission replaces it; `port` 0 picks a free one (`self.port`)."""

    def __init__(self, host: str, port: int) -> None:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            raise RuntimeError(
                f"a Prometheus endpoint needs the exporter: pip install 'verdictgate[{EXTRA}]'"
            ) from None
        registry = CollectorRegistry()  # this endpoint's own, not the process-wide default
        self._provider = MeterProvider(
            metric_readers=[PrometheusMetricReader(registry=registry)],
            resource=Resource.create(publishing_resource()),
        )
        self._publisher = Publisher(NoOpTracerProvider(), self._provider, NoOpLoggerProvider())
        self._server, _ = start_http_server(port, addr=host, registry=registry)
        self.port: int = self._server.server_port

    def emit(self, publication: Publication) -> None:
        """Show an admission's metrics (its gauges replace the previous ones of their series)."""
        self._publisher.emit(publication)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._provider.shutdown()
