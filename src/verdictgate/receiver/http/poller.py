"""The poller thread: it accepts connections and waits on all of them at once, without
blocking, for what they send (a TLS handshake, a request head, a body, the next request of
an idle keep-alive, the end of a lingering close), each under a deadline."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import time
from collections.abc import Callable

from ..failures import report_unexpected
from ..fair_gate import Gate
from ..limits import Limits
from .bodies import BodyReader
from .connection import (
    AWAIT,
    BODY,
    BUSY,
    CLOSE,
    CLOSED,
    HANDSHAKE,
    HEAD,
    LINGER,
    Connection,
)
from .deadlines import Deadlines
from .framing import head_length
from .handler import peer_host
from .hosts import ConnectionTable
from .refusals import HttpError, timed_out
from .streams import RECV_BYTES
from .workers import Workers

logger = logging.getLogger(__name__)

LINGER_SECONDS = 2.0


def busy_answer(retry_after: int) -> bytes:
    body = b"receiver busy, retry later\n"
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
        b"Retry-After: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (retry_after, len(body), body)
    )


_TOO_LARGE_HEAD = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Poller:
    """Runs the poller thread's loop (`run`) over `listener`'s connections, within `limits`:
    what it admits is held in `table`, a request whose head arrived goes to `workers`, a body
    a worker left pending is read within the fair shares of `bodies`."""

    def __init__(
        self,
        listener: socket.socket,
        tls: ssl.SSLContext | None,
        limits: Limits,
        table: ConnectionTable,
        workers: Workers,
        bodies: Gate,
    ) -> None:
        self._listener = listener
        self._tls = tls
        self._limits = limits
        self._table = table
        self._workers = workers
        self.bodies = BodyReader(bodies, limits.body_timeout_seconds, self)
        self._deadlines = Deadlines(table.open)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, None)
        self._selector.register(workers.wake_end, selectors.EVENT_READ, workers.wake_end)
        self.evicted = 0
        """Connections closed to make room for a new one from the same host at its cap."""
        self._warned_evict = self._warned_accept = self._warned_host = False
        self._accept_paused_until = 0.0

    def run(self) -> None:
        """Serve until `workers` stop; then close every connection no worker holds."""
        try:
            while not self._workers.stopping:
                now = time.monotonic()
                timeout = self._deadlines.wait(now, 5.0)
                if self._accept_paused_until:
                    timeout = min(timeout, max(0.0, self._accept_paused_until - now))
                for key, _ in self._selector.select(timeout):
                    self._guarded(self._event, key.data)
                self._guarded(self._expire)
                self._guarded(self._resume_accepting)
        finally:
            for connection in list(self._table.open):
                if connection.state != BUSY:
                    self.close(connection)

    def _event(self, data: object) -> None:
        """What the selector saw, by what was registered: None the listener, the wake-up
        socket, or a connection."""
        if data is None:
            self._accept()
        elif data is self._workers.wake_end:
            for connection, outcome in self._workers.returned():
                if connection.state == BUSY:
                    self._guarded(self._take_back, connection, outcome)
        else:
            assert isinstance(data, Connection)
            self._ready(data)

    def _guarded(self, step: Callable[..., None], *args: object) -> None:
        """Run one step of the poller: an error in it closes the connection concerned (if
        any) and is logged, never stopping the server."""
        try:
            step(*args)
        except Exception as error:
            report_unexpected(error, "the HTTP poller")
            for connection in args:
                if isinstance(connection, Connection):
                    self.close(connection)

    def _accept(self) -> None:
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
                self._accept_paused_until = time.monotonic() + 0.1
                return
            sock.setblocking(False)
            host = peer_host(address)
            if self._table.full():
                self._refuse(sock)
                continue
            if self._table.at_cap(host):
                victim = self._table.to_evict(host, time.monotonic())
                if victim is None:
                    if not self._warned_host:
                        self._warned_host = True
                        logger.warning(
                            "verdictgate: %s holds %d HTTP connections, all served or making "
                            "progress (max_connections_per_host); more are refused (logged once)",
                            host,
                            self._table.per_host,
                        )
                    self._refuse(sock)
                    continue
                self._evict(victim)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            state = HEAD
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                state = HANDSHAKE
            connection = Connection(sock, address, state, self._limits.body_timeout_seconds)
            self._table.add(connection)
            self.wait(connection, self._limits.header_timeout_seconds)

    def _evict(self, connection: Connection) -> None:
        """Close a waiting connection of a host at its cap (`first_to_evict`), so the host's
        new connection is taken: stalled heads and bodies and idle keep-alives never lock
        out a sender behind the same address. A request still arriving is told 503."""
        self.evicted += 1
        if not self._warned_evict:
            self._warned_evict = True
            logger.warning(
                "verdictgate: %s is at its %d HTTP connections (max_connections_per_host): "
                "an idle or stalled one is closed for each new one (logged once)",
                connection.host,
                self._table.per_host,
            )
        if connection.state in (HEAD, BODY) and not connection.idle:
            self._answer_and_close(connection, busy_answer(self._limits.retry_after_seconds))
        else:
            self.close(connection)

    def _resume_accepting(self) -> None:
        if self._accept_paused_until and time.monotonic() >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, None)

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

    def wait(self, connection: Connection, seconds: float) -> None:
        """The connection waits on the poller from now, for its input, for `seconds`."""
        self._table.wait(connection)
        self._watch(connection, selectors.EVENT_READ)
        self._deadlines.set(connection, time.monotonic() + seconds)

    def _watch(self, connection: Connection, events: int) -> None:
        try:
            self._selector.modify(connection.sock, events, connection)
        except KeyError:
            self._selector.register(connection.sock, events, connection)

    def _unwatch(self, connection: Connection) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(connection.sock)

    def _expire(self) -> None:
        for connection in self._deadlines.due(time.monotonic()):
            if connection.state == BODY:
                self.bodies.serve_again(connection, timed_out())
            else:
                self.close(connection)

    def _ready(self, connection: Connection) -> None:
        if connection.state == HANDSHAKE:
            self._handshake(connection)
        elif connection.state == HEAD:
            before = len(connection.reader.buffer)
            alive = connection.reader.pump()
            if len(connection.reader.buffer) > before:
                connection.progress = time.monotonic()
            self._check_head(connection, alive)
        elif connection.state == BODY:
            self.bodies.read(connection)
        elif connection.state == LINGER:
            self._discard(connection)

    def _handshake(self, connection: Connection) -> None:
        sock = connection.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            return self._watch(connection, selectors.EVENT_READ)
        except ssl.SSLWantWriteError:
            return self._watch(connection, selectors.EVENT_WRITE)
        except (OSError, ValueError) as error:
            logger.debug("http: TLS handshake with %s failed: %s", connection.address, error)
            return self.close(connection)
        connection.state = HEAD
        self._watch(connection, selectors.EVENT_READ)
        self._check_head(connection, connection.reader.pump())

    def _check_head(self, connection: Connection, alive: bool) -> None:
        buffer = connection.reader.buffer
        if buffer:
            if connection.idle:  # the next request began: its head is now due
                connection.idle = False
                self._deadlines.set(
                    connection, time.monotonic() + self._limits.header_timeout_seconds
                )
            try:
                if head_length(buffer, connection.scanned) is not None:
                    return self.dispatch(connection)
            except HttpError:
                return self._answer_and_close(connection, _TOO_LARGE_HEAD)
            connection.scanned = len(buffer)
        if not alive:
            self.close(connection)

    def dispatch(self, connection: Connection) -> None:
        """Hand the connection to a worker (503 at once when none is free and the queue full)."""
        self._unwatch(connection)
        self._table.stop_waiting(connection)
        connection.state = BUSY
        connection.scanned = 0
        if not self._workers.submit(connection):
            self._answer_and_close(connection, busy_answer(self._limits.retry_after_seconds))

    def _answer_and_close(self, connection: Connection, answer: bytes) -> None:
        try:
            connection.sock.setblocking(False)
            connection.sock.send(answer)
        except (OSError, ValueError):
            return self.close(connection)
        self._linger(connection)

    def _linger(self, connection: Connection) -> None:
        """Shut the write side and drop what the client still sends until it closes."""
        self.bodies.drop(connection)
        try:
            connection.sock.setblocking(False)
            connection.sock.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):
            return self.close(connection)
        connection.state = LINGER
        connection.reader.buffer.clear()
        self.wait(connection, LINGER_SECONDS)
        self._discard(connection)

    def _discard(self, connection: Connection) -> None:
        while connection.discarded < self._limits.max_request_bytes:
            try:
                data = connection.sock.recv(RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except (OSError, ValueError):
                break
            if not data:
                break
            connection.discarded += len(data)
        self.close(connection)

    def close(self, connection: Connection) -> None:
        if connection.state == CLOSED:
            return
        connection.state = CLOSED
        self._unwatch(connection)
        self._table.remove(connection)
        self.bodies.drop(connection)
        with contextlib.suppress(OSError):
            connection.sock.close()

    def _take_back(self, connection: Connection, outcome: int) -> None:
        """A connection a worker handed back: close it, read its body, or park it."""
        if self._workers.stopping:
            self.close(connection)
        elif outcome == AWAIT:
            self.bodies.begin(connection)
        elif outcome == CLOSE:
            if connection.handler is not None and connection.handler.responded:
                self._linger(connection)
            else:
                self.close(connection)
        else:
            self._park(connection)

    def _park(self, connection: Connection) -> None:
        """Keep a connection alive between requests, without a thread."""
        try:
            connection.sock.setblocking(False)
        except (OSError, ValueError):
            return self.close(connection)
        connection.state = HEAD
        connection.idle = True
        self.wait(connection, self._limits.idle_timeout_seconds)
        alive = True
        if isinstance(connection.sock, ssl.SSLSocket) and connection.sock.pending():
            alive = connection.reader.pump()  # decrypted bytes the selector cannot see
        self._check_head(connection, alive)

    def close_selector(self) -> None:
        self._selector.close()
