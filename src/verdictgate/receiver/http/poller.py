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

from ..ingest.fair_gate import Gate
from ..limits import Limits
from ..transport.failures import report_unexpected
from .accepting import Acceptor, busy_answer
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
from .hosts import ConnectionTable
from .refusals import HttpError, timed_out
from .streams import RECV_BYTES
from .workers import Workers

logger = logging.getLogger(__name__)

LINGER_SECONDS = 2.0


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
        self._limits = limits
        self._table = table
        self._workers = workers
        self.bodies = BodyReader(bodies, limits.body_timeout_seconds, self)
        """The bodies being read (see `BodyReader`)."""
        self._deadlines = Deadlines(table.open)
        self._selector = selectors.DefaultSelector()
        self.acceptor = Acceptor(listener, self._selector, tls, limits, table)
        """The new connections taken (see `Acceptor`)."""
        self._selector.register(workers.wake_end, selectors.EVENT_READ, workers.wake_end)

    def run(self) -> None:
        """Serve until `workers` stop; then close every connection no worker holds."""
        try:
            while not self._workers.stopping:
                now = time.monotonic()
                timeout = self._deadlines.wait(now, 5.0)
                if self.acceptor.paused_until:
                    timeout = min(timeout, max(0.0, self.acceptor.paused_until - now))
                for key, _ in self._selector.select(timeout):
                    self._guarded(self._event, key.data)
                self._guarded(self._expire)
                self._guarded(self.acceptor.resume)
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
        for connection in self.acceptor.accept(self._evict):
            self.wait(connection, self._limits.header_timeout_seconds)

    def _evict(self, connection: Connection) -> None:
        """Close a waiting connection of a host at its cap (`first_to_evict`), so the host's
        new connection is taken: stalled heads and bodies and idle keep-alives never lock
        out a sender behind the same address. A request still arriving is told 503."""
        if connection.state in (HEAD, BODY) and not connection.idle:
            self._answer_and_close(connection, busy_answer(self._limits.retry_after_seconds))
        else:
            self.close(connection)

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
