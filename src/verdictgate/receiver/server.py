"""`verdictgate serve`: OTLP/gRPC and OTLP/HTTP receivers plus the admission query API, each
bounded by `Limits`."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from concurrent import futures
from dataclasses import dataclass

import grpc

from .core import Receiver
from .http import BoundedHttpServer, file_limit
from .ingest.exports import Ingest
from .limits import Limits
from .store import is_store_error
from .transport.bearer import TokenThrottle
from .transport.grpc_api import (
    Admissions,
    admission_handlers,
    export_handler,
    ignored_signals_handlers,
)
from .transport.grpc_guards import CallCap, TokenCheck
from .transport.http_api import http_handler

logger = logging.getLogger(__name__)

PAUSED = 2.0
"""Seconds a tick's wait may end late before the process is taken to have been paused."""
REFUSING_THREADS = 64
"""gRPC threads beyond `grpc_max_concurrent_rpcs` (at least as many again) that only refuse:
a call beyond the cap is answered RESOURCE_EXHAUSTED with RetryInfo on one of them. Only a
burst beyond those too meets gRPC's own refusal (RESOURCE_EXHAUSTED without RetryInfo)."""


@dataclass(frozen=True)
class Tls:
    """PEM certificate chain and private key files; both transports then require TLS."""

    cert_path: str
    key_path: str

    def read(self) -> tuple[bytes, bytes]:
        with open(self.key_path, "rb") as key, open(self.cert_path, "rb") as cert:
            return key.read(), cert.read()


def grpc_options(limits: Limits) -> list[tuple[str, int]]:
    """gRPC server options from `limits`: message size, handshake deadline, keepalive and idle
    connections, and what clients may ping."""

    def ms(seconds: float) -> int:
        return max(1, int(seconds * 1000))

    return [
        ("grpc.max_receive_message_length", limits.max_request_bytes),
        ("grpc.server_handshake_timeout_ms", ms(limits.header_timeout_seconds)),
        ("grpc.keepalive_time_ms", ms(limits.grpc_keepalive_seconds)),
        ("grpc.keepalive_timeout_ms", ms(limits.grpc_keepalive_timeout_seconds)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),  # the server's own keepalive pings
        ("grpc.max_connection_idle_ms", ms(limits.grpc_max_connection_idle_seconds)),
        ("grpc.http2.min_ping_interval_without_data_ms", ms(limits.grpc_min_ping_interval_seconds)),
        ("grpc.http2.max_ping_strikes", 2),
        # streams on one connection are not limited: a limit is refused per stream
        # (REFUSED_STREAM, which clients see as UNAVAILABLE) whenever a client opens streams
        # before it has the server's settings; beyond capacity the one answer is CallCap's
        ("grpc.max_concurrent_streams", 2**31 - 1),
        ("grpc.so_reuseport", 0),  # a second server on the same port is an error, not a sharer
    ]


def raise_file_limit() -> None:
    """Raise the soft limit on open files to the hard limit (idle sockets, gRPC connections,
    the store and the decoders all need descriptors); a failure is ignored."""
    try:
        import resource
    except ImportError:  # not on Unix
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return
    unlimited = resource.RLIM_INFINITY
    # macOS refuses an unlimited soft limit even under an unlimited hard one: try finite ones
    for target in (hard, 1 << 20, 65536, 10240):
        if (
            soft != unlimited
            and (target == unlimited or target > soft)
            and (hard == unlimited or target <= hard)
        ):
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                return
            except (OSError, ValueError):
                continue


class Server:
    """Both transports and the query API over one Receiver, with a ticker for its timers (idle
    periods, windows, settling traces, retention).

    Setting it up raises the process's soft file limit to its hard limit; HTTP connections are
    then held to half of it (see `BoundedHttpServer.max_connections`). With a token, one
    interceptor refuses unauthenticated gRPC calls of every service before their message is
    read (`TokenCheck`), and a host's wrong tokens are counted at every door of both
    transports by one throttle (`TokenThrottle`); calls beyond `grpc_max_concurrent_rpcs` are refused with RetryInfo
    (`CallCap`)."""

    def __init__(
        self,
        receiver: Receiver,
        *,
        grpc_listen: str | None = "127.0.0.1:4317",
        http_listen: str | None = "127.0.0.1:4318",
        token: str | None = None,
        tls: Tls | None = None,
        limits: Limits | None = None,
        tick_seconds: float = 0.5,
    ) -> None:
        self.receiver = receiver
        limits = self._limits = limits or Limits()
        raise_file_limit()
        self.ingest = Ingest(receiver, limits)
        self._stop = threading.Event()
        self._tick_seconds = tick_seconds
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self._grpc = None
        self._throttle = TokenThrottle()
        """Wrong tokens by host, counted at every door of both transports alike."""
        if grpc_listen:
            self._grpc, self.grpc_port = self._grpc_server(grpc_listen, token, tls)
        self.http = None
        if http_listen:
            self.http = self._http_server(http_listen, token, tls)
            self.http_port = self.http.server_address[1]
        self._threads: list[threading.Thread] = []
        self._ticking: list[threading.Thread] = []
        """The tick's thread, and in a shared store the lease renewals'."""

    def _grpc_server(
        self, listen: str, token: str | None, tls: Tls | None
    ) -> tuple[grpc.Server, int]:
        """The gRPC server (export, the ignored signals, the query API) and its bound port."""
        limits = self._limits
        rpcs = limits.concurrent_rpcs()
        threads = rpcs + max(REFUSING_THREADS, rpcs)
        cap = CallCap(rpcs, limits.retry_after_seconds)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="verdictgate-grpc"),
            interceptors=[cap] if token is None else [TokenCheck(token, self._throttle), cap],
            options=grpc_options(limits),
            maximum_concurrent_rpcs=threads,
        )
        server.add_generic_rpc_handlers((export_handler(self.ingest), *ignored_signals_handlers()))
        admissions = Admissions(
            self.receiver,
            limits.max_watchers,
            limits.retry_after_seconds,
            limits.unavailable_retry_after_seconds,
        )
        server.add_generic_rpc_handlers((admission_handlers(admissions),))
        if tls is None:
            return server, server.add_insecure_port(listen)
        credentials = grpc.ssl_server_credentials([tls.read()])
        return server, server.add_secure_port(listen, credentials)

    def _http_server(self, listen: str, token: str | None, tls: Tls | None) -> BoundedHttpServer:
        """The HTTP server (OTLP/HTTP, the JSON API, the pages), listening."""
        host, _, port = listen.rpartition(":")
        context = None
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls.cert_path, tls.key_path)
        handler = http_handler(self.ingest, self.receiver, token, self._throttle)
        return BoundedHttpServer((host.strip("[]"), int(port)), handler, self._limits, context)

    def start(self) -> None:
        if self.receiver.forwarder is not None:
            self.receiver.forwarder.start()
        if self._grpc is not None:
            self._grpc.start()
        if self.http is not None:
            if self.http.max_connections < self._limits.max_connections:
                logger.warning(
                    "verdictgate: serving at most %d HTTP connections, not %d: half the open "
                    "file limit (%s)",
                    self.http.max_connections,
                    self._limits.max_connections,
                    file_limit(),
                )
            self._threads.append(threading.Thread(target=self.http.serve_forever, daemon=True))
        self._ticking = [threading.Thread(target=self._tick, daemon=True)]
        if self.receiver.store.shared:  # renewed on time however long a tick takes
            self._ticking.append(threading.Thread(target=self._renew, daemon=True))
        self._threads += self._ticking
        for thread in self._threads:
            thread.start()

    def _renew(self) -> None:
        """Renew the replica's heartbeat when due, looking every sixth of a lease until stopped
        (a store away is the tick's to log)."""
        while not self._stop.wait(self.receiver.config.lease / 6):
            try:
                self.receiver.renew_leases()
            except Exception as error:
                if not is_store_error(error):
                    logger.warning("verdictgate: renewing leases failed", exc_info=True)

    def _tick(self) -> None:
        """Tick until stopped. A fault of the store is the receiver's outage to log (once
        an outage, `Receiver.outage`), a fault of any other kind is logged at every tick, with
        its traceback. A wait that ended more than PAUSED seconds late found the process paused
        (stopped, or starved): nothing could be taken meanwhile, so the receiver gives every
        open run its full idle period again."""
        asleep = time.monotonic()
        while not self._stop.wait(self._tick_seconds):
            if time.monotonic() - asleep > self._tick_seconds + PAUSED:
                self.receiver.resume()
            try:
                self.receiver.tick()
            except Exception as error:
                if not is_store_error(error):
                    logger.warning("verdictgate: tick failed", exc_info=True)
            asleep = time.monotonic()

    def stop(self) -> None:
        """Stop within a few seconds whatever the publish target does; admissions not yet
        delivered stay in the store's outbox for the next start (or, in a shared store, for the
        other replicas). Nothing that claims runs or entries is left running when the
        receiver's claims are let go: the transports, the tick and the forwarder stop first."""
        self._stop.set()
        if self._grpc is not None:
            self._grpc.stop(grace=1).wait()
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        self.ingest.decoder.close()
        for thread in self._ticking:
            thread.join(10)
        if self.receiver.forwarder is not None:
            self.receiver.forwarder.stop()
        self.receiver.close()
