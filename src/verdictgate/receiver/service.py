"""A receiver assembled whole from its configuration: store, finisher, forwarder, both
transports and the scrape endpoint, started and stopped together."""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import ReceiverConfig
from .core import Receiver
from .limits import Limits
from .publishing.forwarder import Forwarder
from .publishing.otlp_target import OtlpTarget
from .publishing.prometheus_endpoint import PrometheusEndpoint
from .replication.database_clock import store_clock
from .server import Server, Tls
from .store import Store
from .store_outage import StoreOutage


@dataclass(frozen=True)
class ServeConfig:
    """Everything `verdictgate serve` is told, parsed: where the store is, where to listen
    (None: that transport is off), how the receiver decides, what a request may cost, who may
    send (`token`, `tls`), where admissions go (`publish_endpoint`, over OTLP/gRPC) and where
    Prometheus scrapes them (`prometheus`: host and port)."""

    store_path: str
    grpc_listen: str | None = "127.0.0.1:4317"
    http_listen: str | None = "127.0.0.1:4318"
    receiver: ReceiverConfig = field(default_factory=ReceiverConfig)
    limits: Limits = field(default_factory=Limits)
    token: str | None = None
    tls: Tls | None = None
    publish_endpoint: str | None = None
    prometheus: tuple[str, int] | None = None


class Service:
    """The parts of one receiver, made from a `ServeConfig` (raises OSError or a VerdictgateError
    when a port cannot be had or a file read); `start` and `stop` them together."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.store = Store(config.store_path, lease=config.receiver.lease)
        clock = store_clock(self.store)  # one clock for the receiver and its forwarder
        target = OtlpTarget(config.publish_endpoint) if config.publish_endpoint else None
        self.scrape = PrometheusEndpoint() if config.prometheus is not None else None
        self.receiver = Receiver(
            self.store,
            Forwarder(self.store, target, clock=clock) if target else None,
            config.receiver,
            clock=clock,
            scrape=self.scrape,
            outage=StoreOutage(config.limits.unavailable_retry_after_seconds, clock=clock),
        )
        if self.scrape is not None and config.prometheus is not None:
            self.scrape.serve(*config.prometheus)  # once the latest admissions are shown again
        self.server = Server(
            self.receiver,
            grpc_listen=config.grpc_listen,
            http_listen=config.http_listen,
            token=config.token,
            tls=config.tls,
            limits=config.limits,
        )

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        """Stop within a few seconds; what was not delivered stays in the store's outbox."""
        self.server.stop()
        if self.scrape is not None:
            self.scrape.close()
