"""`verdictgate serve`: OTLP/gRPC and OTLP/HTTP receivers plus the admission query API."""

from __future__ import annotations

import logging
import ssl
import threading
from concurrent import futures
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

import grpc

from .grpc_api import Admissions, admission_handlers, export_handler, ignored_signals_handlers
from .http_api import http_handler
from .ingest import Ingest, Limits
from .receiver import Receiver

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tls:
    """PEM certificate chain and private key files; both transports then require TLS."""

    cert_path: str
    key_path: str

    def read(self) -> tuple[bytes, bytes]:
        with open(self.key_path, "rb") as key, open(self.cert_path, "rb") as cert:
            return key.read(), cert.read()


class Server:
    """Both transports and the query API over one Receiver, with a ticker for grace periods."""

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
        limits = limits or Limits()
        ingest = self._ingest = Ingest(receiver, limits)
        self._stop = threading.Event()
        self._tick_seconds = tick_seconds
        self.grpc_port = self.http_port = None
        self._grpc = None
        if grpc_listen:
            self._grpc = grpc.server(
                futures.ThreadPoolExecutor(
                    max_workers=limits.max_in_flight + 4 + limits.max_watchers
                ),
                options=[("grpc.max_receive_message_length", limits.max_request_bytes)],
            )
            self._grpc.add_generic_rpc_handlers(
                (export_handler(ingest, token), *ignored_signals_handlers())
            )
            self._grpc.add_generic_rpc_handlers(
                (admission_handlers(Admissions(receiver, token, limits.max_watchers)),)
            )
            if tls is None:
                self.grpc_port = self._grpc.add_insecure_port(grpc_listen)
            else:
                credentials = grpc.ssl_server_credentials([tls.read()])
                self.grpc_port = self._grpc.add_secure_port(grpc_listen, credentials)
        self._http = None
        if http_listen:
            host, _, port = http_listen.rpartition(":")
            self._http = ThreadingHTTPServer((host, int(port)), http_handler(ingest, token))
            self._http.daemon_threads = True
            if tls is not None:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(tls.cert_path, tls.key_path)
                self._http.socket = context.wrap_socket(self._http.socket, server_side=True)
            self.http_port = self._http.server_address[1]
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self.receiver.forwarder is not None:
            self.receiver.forwarder.start()
        if self._grpc is not None:
            self._grpc.start()
        if self._http is not None:
            self._threads.append(threading.Thread(target=self._http.serve_forever, daemon=True))
        self._threads.append(threading.Thread(target=self._tick, daemon=True))
        for thread in self._threads:
            thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(self._tick_seconds):
            try:
                self.receiver.tick()
            except Exception:
                logger.warning("verdictgate: tick failed", exc_info=True)

    def stop(self) -> None:
        """Stop within a few seconds whatever the publish target does; admissions not yet
        delivered stay in the store's outbox for the next start."""
        self._stop.set()
        if self._grpc is not None:
            self._grpc.stop(grace=1).wait()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self._ingest.decoder.close()
        if self.receiver.forwarder is not None:
            self.receiver.forwarder.stop()
