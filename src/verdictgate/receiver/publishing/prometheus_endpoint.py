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
from typing import TYPE_CHECKING

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource

from ...errors import ExtraMissing, InputError
from ...otel import conventions as names
from ...otel.admission_record import COUNTER, AdmissionRecord, publishing_resource
from ...otel.latest_admissions import LatestAdmissions
from ...wire_types import AttributeValue
from ..http import BoundedHttpServer, RequestHandler
from ..limits import Limits

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

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
RECYCLE_AFTER = 100
"""Admissions one MeterProvider renders before a new one replaces it (and what the old one
kept of earlier runs' attribute sets goes with it)."""


class PrometheusEndpoint:
    """Shows the latest admission of every (suite, point) and the trials counted so far.

    Each admission renders the exposition once, under a lock, so a scrape never sees half of
    one admission and half of the next (a qualified run followed by an inconclusive one must
    not read as rejected). The SDK keeps every attribute set an instrument ever saw (each run
    id), so the MeterProvider that renders is replaced every `RECYCLE_AFTER` admissions: memory
    follows the suites, not the runs. `serve` starts the HTTP endpoint (`/metrics` on
    `host:port`; port 0 picks a free one, `self.port`)."""

    def __init__(self) -> None:
        try:
            import opentelemetry.exporter.prometheus  # noqa: F401
        except ImportError:
            raise ExtraMissing(
                f"a Prometheus endpoint needs the exporter: pip install -e '.[{EXTRA}]' in a checkout "
                "of verdictgate (or pip install opentelemetry-exporter-prometheus)"
            ) from None
        self._lock = threading.Lock()
        """Held by an admission while it replaces another and renders."""
        self._resource = Resource.create(publishing_resource())
        self._trials: dict[tuple[tuple[str, AttributeValue], ...], int] = {}
        """The trials counter's series (its attributes, sorted) -> trials counted so far."""
        self._provider: MeterProvider | None = None
        self._registry: CollectorRegistry | None = None
        self._admissions: LatestAdmissions | None = None
        """The latest admissions, as the current provider's gauges read them."""
        self._renders = 0
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

    def emit(self, publication: AdmissionRecord) -> None:
        """Make an admission the latest of its (suite, point), count its trials, and render the
        snapshot scrapes are answered with."""
        with self._lock:
            for outcome, added in publication.trials_added.items():
                series = tuple(sorted({**publication.metric_base, names.OUTCOME: outcome}.items()))
                self._trials[series] = self._trials.get(series, 0) + added
            self.snapshot = self._render(publication)

    def _render(self, publication: AdmissionRecord | None = None) -> bytes:
        """The exposition with `publication` the latest of its (suite, point)."""
        from prometheus_client import generate_latest

        if self._renders % RECYCLE_AFTER == 0:
            self._recycle()
        self._renders += 1
        assert self._admissions is not None and self._registry is not None
        if publication is not None:
            self._admissions.replace(publication)
        return bytes(generate_latest(self._registry))

    def _recycle(self) -> None:
        """A new MeterProvider and the registry it renders into, holding the latest admissions
        of the old one, which is shut down."""
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry

        carried = self._admissions.publications() if self._admissions is not None else []
        if self._provider is not None:
            self._provider.shutdown()
        registry = CollectorRegistry()  # this endpoint's own, not the process-wide one
        self._provider = MeterProvider(  # not kept alive by an exit hook: close shuts it down
            metric_readers=[PrometheusMetricReader(registry=registry)],
            resource=self._resource,
            shutdown_on_exit=False,
        )
        meter = self._provider.get_meter(names.INSTRUMENTATION_SCOPE)

        def counted(options: CallbackOptions) -> Iterator[Observation]:
            for series, total in list(self._trials.items()):
                yield Observation(total, dict(series))

        unit, description = COUNTER
        meter.create_observable_counter(
            names.METRIC_TRIALS, callbacks=[counted], unit=unit, description=description
        )
        self._registry = registry
        self._admissions = LatestAdmissions.on(meter)
        for kept in carried:
            self._admissions.replace(kept)

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._provider is not None:
            self._provider.shutdown()
