"""The receiver's admission metrics as a Prometheus scrape endpoint, through OpenTelemetry's own
Prometheus exporter, so names and labels follow the standard conversion (`verdictgate.admission`
becomes `verdictgate_admission`, its `verdictgate.suite` attribute the `verdictgate_suite`
label, a unit of seconds the `_seconds` suffix)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource

from ..errors import InputError
from ..otel import conventions as names
from ..otel.publication import COUNTER, GAUGES, Publication, publishing_resource

EXTRA = "prometheus"
"""The extra that installs the exporter: `pip install 'verdictgate[prometheus]'`."""


class PrometheusEndpoint:
    """Shows the latest admission of every (suite, point): each gauge is observed from that
    admission alone when Prometheus scrapes, so a series the latest admission does not carry
    (a route it did not reach) is gone, not left at an older run's value; and a scrape never
    sees half of one admission and half of the next (a qualified run followed by an
    inconclusive one must not read as rejected). `serve` starts the HTTP endpoint (`/metrics`
    on `host:port`; port 0 picks a free one, `self.port`)."""

    def __init__(self) -> None:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import CollectorRegistry
        except ImportError:
            raise RuntimeError(
                f"a Prometheus endpoint needs the exporter: pip install 'verdictgate[{EXTRA}]'"
            ) from None
        self._lock = threading.RLock()
        """Held by a whole scrape, and by an admission replacing another."""
        lock = self._lock

        class WholeScrapes(CollectorRegistry):
            def collect(self):
                with lock:
                    yield from super().collect()

        self._registry = WholeScrapes()  # this endpoint's own, not the process-wide one
        self._provider = MeterProvider(
            metric_readers=[PrometheusMetricReader(registry=self._registry)],
            resource=Resource.create(publishing_resource()),
        )
        self._latest: dict[tuple, Publication] = {}
        """Metric labels of a (suite, point) -> its latest admission."""
        meter = self._provider.get_meter(names.INSTRUMENTATION_SCOPE)
        for name, (unit, description) in GAUGES.items():
            meter.create_observable_gauge(
                name, callbacks=[self._observer(name)], unit=unit, description=description
            )
        unit, description = COUNTER
        self._trials = meter.create_counter(names.METRIC_TRIALS, unit=unit, description=description)
        self._server: WSGIServer | None = None
        self.port = 0

    def serve(self, host: str, port: int) -> None:
        """Start answering scrapes on host:port; an InputError names the address it cannot
        take."""
        from prometheus_client import start_http_server

        try:
            self._server, _ = start_http_server(port, addr=host, registry=self._registry)
        except OSError as error:
            reason = error.strerror or str(error)
            raise InputError(
                f"cannot listen on {host}:{port} ({reason})", field="--prometheus-listen"
            ) from None
        self.port = self._server.server_port

    def emit(self, publication: Publication) -> None:
        """Make an admission the latest of its (suite, point), and count its trials."""
        key = tuple(sorted(publication.metric_base.items()))
        with self._lock:
            self._latest[key] = publication
        for outcome, added in publication.trials_added.items():
            self._trials.add(added, {**publication.metric_base, names.OUTCOME: outcome})

    def _observer(self, name: str) -> Callable[[CallbackOptions], Iterator[Observation]]:
        def observe(options: CallbackOptions) -> Iterator[Observation]:
            with self._lock:  # already held by the scrape: the same admissions for every gauge
                latest = list(self._latest.values())
            for publication in latest:
                for gauge, value, attributes in publication.gauges:
                    if gauge == name:
                        yield Observation(value, attributes)

        return observe

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._provider.shutdown()
