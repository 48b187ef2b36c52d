"""The server: a poller thread that accepts and reads without blocking, a fixed pool of
workers that serve whole requests, and every bound of the package docstring."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading

from ..ingest.fair_gate import Gate
from ..limits import Limits
from .connection import BUSY, Connection
from .handler import RequestHandler
from .hosts import ConnectionTable
from .poller import Poller
from .workers import Workers


def file_limit() -> int | None:
    """The process's soft limit on open files, None when unknown or unlimited."""
    try:
        import resource
    except ImportError:  # not on Unix
        return None
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else soft


def connection_cap(configured: int) -> int:
    """The HTTP connections allowed open at once: `configured`, but never more than half the
    process's file limit, so idle sockets leave descriptors for gRPC, the store, the decoders."""
    limit = file_limit()
    return configured if limit is None else max(1, min(configured, limit // 2))


class BoundedHttpServer:
    """Serves `handler_class` requests with a poller thread (`serve_forever`) and a fixed pool
    of worker threads, within `limits` (see the module docstring). Listening on `::` is
    dual-stack where the system allows it (IPv4 clients too, as gRPC's `[::]` is)."""

    def __init__(
        self,
        address: tuple[str, int],
        handler_class: type[RequestHandler],
        limits: Limits,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.limits = limits
        self.max_connections = connection_cap(limits.max_connections)
        """`max_connections` in effect (see `connection_cap`)."""
        self._handler_class = handler_class
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.create_server(
            address,
            family=family,
            backlog=max(1, limits.http_backlog),
            dualstack_ipv6=address[0] == "::" and socket.has_dualstack_ipv6(),
        )
        self._listener.setblocking(False)
        self.server_address = self._listener.getsockname()
        self._table = ConnectionTable(self.max_connections, limits.max_connections_per_host)
        self._workers = Workers(
            limits.http_workers, limits.http_queue, self._handler, limits.header_timeout_seconds
        )
        bodies = Gate(
            self.max_connections,
            max(limits.max_bytes_in_flight, limits.max_request_bytes),
            limits.max_request_bytes,
        )
        """The bytes of bodies still arriving, shared fairly among clients."""
        self._poller = Poller(self._listener, tls, limits, self._table, self._workers, bodies)
        self._serving = False
        self._stopped = threading.Event()

    def _handler(self, connection: Connection) -> RequestHandler:
        return self._handler_class(
            connection.sock, connection.address, self, connection.reader, connection.writer
        )

    def open_connections(self) -> int:
        """Connections open now (as the poller last left them)."""
        return len(self._table.open)

    def queued(self) -> int:
        """Requests whose head is complete, waiting for a worker."""
        return self._workers.queued()

    def waiting_connections(self) -> int:
        """Connections waiting on the poller (a handshake, a head or body arriving, an idle
        keep-alive, a lingering close), as the poller last left them."""
        return self._table.waiting()

    def awaiting_bodies(self) -> tuple[int, int]:
        """(requests, bytes): requests whose body the poller is reading, and the bytes of
        those bodies received so far."""
        return self._poller.bodies.in_use()

    def evicted_connections(self) -> int:
        """Connections closed to make room for a new one from the same host at its cap."""
        return self._poller.acceptor.evicted

    def serve_forever(self) -> None:
        """Run the poller on this thread until `shutdown`."""
        self._serving = True
        try:
            self._poller.run()
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serving: waiting connections are closed, requests being served are cut off."""
        self._workers.stopping = True
        self._workers.wake()
        if self._serving:
            self._stopped.wait(10)
        for connection in list(self._table.open):
            if connection.state == BUSY:
                with contextlib.suppress(OSError, ValueError):
                    connection.sock.shutdown(socket.SHUT_RDWR)
        self._workers.stop()

    def server_close(self) -> None:
        for connection in list(self._table.open):
            connection.sock.close()
        self._table.open.clear()
        self._listener.close()
        self._workers.close()
        self._poller.close_selector()
