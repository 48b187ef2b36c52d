"""The receiver's admission metrics as a Prometheus scrape endpoint, through OpenTelemetry's own
Prometheus exporter, so names and labels follow the standard conversion (`verdictgate.admission`
becomes `verdictgate_admission`, its `verdictgate.suite` attribute the `verdictgate_suite`
label, a unit of seconds the `_seconds` suffix).

A scrape is answered from a snapshot rendered when an admission changes it, on a bounded HTTP
server of its own (timeouts, a connection cap, a cap per host, a few workers), so no number of
scrapers slows ingest or finishing, and idle sockets cannot take the process's descriptors."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource

from ..errors import InputError
from ..otel import conventions as names
from ..otel.admission_record import COUNTER, Publication, publishing_resource
from ..otel.latest_admissions import LatestAdmissions
from .http import BoundedHttpServer, RequestHandler
from .limits import Limits

EXTRA = "prometheus"
"""The extra that installs the exporter: `pip install -e '.[prometheus]'` from a checkout."""
SCRAPE_LIMITS = Limits(
    max_connections=64,
    max_connections_per_host=16,
    http_workers=2,
    http_queue=32,
    http_backlog=64,
)
"""What scrapers may cost: 64 connections, 16 from one host, two workers; the OTLP ports'
timeouts (a head in 10 s, a response in 30 s, 60 s idle)."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class PrometheusEndpoint:
    """Shows the latest admission of every (suite, point) (`LatestAdmissions`), read whole by
    each scrape: a scrape never sees half of one admission and half of the next (a qualified
    run followed by an inconclusive one must not read as rejected). `serve` starts the HTTP
    endpoint (`/metrics` on `host:port`; port 0 picks a free one, `self.port`)."""

    def __init__(self) -> None:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import CollectorRegistry
            from prometheus_client.metrics_core import Metric
        except ImportError:
            raise RuntimeError(
                f"a Prometheus endpoint needs the exporter: pip install -e '.[{EXTRA}]' in a checkout "
                "of verdictgate (or pip install opentelemetry-exporter-prometheus)"
            ) from None
        self._lock = threading.RLock()
        """Held by a whole scrape, and by an admission replacing another."""
        lock = self._lock

        class WholeScrapes(CollectorRegistry):
            def collect(self) -> Iterator[Metric]:
                with lock:
                    yield from super().collect()

        self._registry = WholeScrapes()  # this endpoint's own, not the process-wide one
        self._provider = MeterProvider(
            metric_readers=[PrometheusMetricReader(registry=self._registry)],
            resource=Resource.create(publishing_resource()),
        )
        meter = self._provider.get_meter(names.INSTRUMENTATION_SCOPE)
        self._latest = LatestAdmissions(meter, lock)
        unit, description = COUNTER
        self._trials = meter.create_counter(names.METRIC_TRIALS, unit=unit, description=description)
        self._server: BoundedHttpServer | None = None
        self.port = 0
        self.snapshot = self._render()
        """What a scrape is answered with: the exposition as the latest admissions left it."""

    def serve(self, host: str, port: int) -> None:
        """Start answering scrapes on host:port; an InputError names the address it cannot
        take."""
        endpoint = self

        class Scrapes(RequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404, "not found: scrape /metrics")
                    return
                body = endpoint.snapshot
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.responded = True
                self.wfile.write(body)

        try:
            self._server = BoundedHttpServer((host, port), Scrapes, SCRAPE_LIMITS)
        except OSError as error:
            reason = error.strerror or str(error)
            raise InputError(
                f"cannot listen on {host}:{port} ({reason})", field="--prometheus-listen"
            ) from None
        self.port = self._server.server_address[1]
        threading.Thread(
            target=self._server.serve_forever, name="verdictgate-scrapes", daemon=True
        ).start()

    def emit(self, publication: Publication) -> None:
        """Make an admission the latest of its (suite, point), count its trials, and render the
        snapshot scrapes are answered with."""
        with self._lock:
            self._latest.replace(publication)
            for outcome, added in publication.trials_added.items():
                self._trials.add(added, {**publication.metric_base, names.OUTCOME: outcome})
            self.snapshot = self._render()

    def _render(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self._registry))

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._provider.shutdown()
