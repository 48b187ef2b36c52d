"""Taking new connections from the listener, within the server's caps."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import time
from collections.abc import Callable, Iterator

from ..limits import Limits
from .connection import HANDSHAKE, HEAD, Connection
from .handler import peer_host
from .hosts import ConnectionTable
from .streams import RECV_BYTES

logger = logging.getLogger(__name__)

ACCEPT_PAUSE = 0.1
"""How long accepting pauses after the system refused one (out of descriptors or memory)."""


def busy_answer(retry_after: int) -> bytes:
    """A plain 503 with `Retry-After`, and the connection closes."""
    body = b"receiver busy, retry later\n"
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
        b"Retry-After: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (retry_after, len(body), body)
    )


class Acceptor:
    """Takes `listener`'s new connections into `table`: one past `max_connections` is
    answered 503 and closed; one past its host's cap takes the place of the host's waiting
    connection `to_evict`, or is refused like it when there is none. The listener is watched
    through `selector` (its data None), and left alone for a moment when accepting fails."""

    def __init__(
        self,
        listener: socket.socket,
        selector: selectors.BaseSelector,
        tls: ssl.SSLContext | None,
        limits: Limits,
        table: ConnectionTable,
    ) -> None:
        self._listener = listener
        self._selector = selector
        self._tls = tls
        self._limits = limits
        self._table = table
        self.evicted = 0
        """Connections closed to make room for a new one from the same host at its cap."""
        self.paused_until = 0.0
        """When accepting resumes after a failure (0: it is not paused)."""
        self._warned_accept = self._warned_host = self._warned_evict = False
        selector.register(listener, selectors.EVENT_READ, None)

    def accept(self, evict: Callable[[Connection], None]) -> Iterator[Connection]:
        """The connections taken now, each counted in the table; `evict` closes a host's
        connection to make room for its new one."""
        for _ in range(64):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of file descriptors or memory: try again shortly
                if not self._warned_accept:
                    self._warned_accept = True
                    logger.warning("verdictgate: http accept failed: %s", error)
                self._selector.unregister(self._listener)
                self.paused_until = time.monotonic() + ACCEPT_PAUSE
                return
            sock.setblocking(False)
            host = peer_host(address)
            if self._table.full():
                self._refuse(sock)
                continue
            if self._table.at_cap(host):
                victim = self._table.to_evict(host, time.monotonic())
                if victim is None:
                    self._refuse_host(sock, host)
                    continue
                self._evicting(victim)
                evict(victim)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            state = HEAD
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                state = HANDSHAKE
            connection = Connection(sock, address, state, self._limits.body_timeout_seconds)
            self._table.add(connection)
            yield connection

    def resume(self) -> None:
        """Watch the listener again once a pause after a failure is over."""
        if self.paused_until and time.monotonic() >= self.paused_until:
            self.paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, None)

    def _evicting(self, connection: Connection) -> None:
        self.evicted += 1
        if not self._warned_evict:
            self._warned_evict = True
            logger.warning(
                "verdictgate: %s is at its %d HTTP connections (max_connections_per_host): "
                "an idle or stalled one is closed for each new one (logged once)",
                connection.host,
                self._table.per_host,
            )

    def _refuse_host(self, sock: socket.socket, host: str) -> None:
        if not self._warned_host:
            self._warned_host = True
            logger.warning(
                "verdictgate: %s holds %d HTTP connections, all served or making "
                "progress (max_connections_per_host); more are refused (logged once)",
                host,
                self._table.per_host,
            )
        self._refuse(sock)

    def _refuse(self, sock: socket.socket) -> None:
        """One connection too many: a quick 503 (not over TLS: no handshake yet), then close."""
        try:
            if self._tls is None:
                sock.send(busy_answer(self._limits.retry_after_seconds))
                sock.shutdown(socket.SHUT_WR)
                sock.recv(RECV_BYTES)  # what already arrived, so closing does not reset
        except OSError:
            pass
        sock.close()
