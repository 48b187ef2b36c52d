"""Request bodies read by the poller, holding no thread, within a fair share of the bytes in
flight."""

from __future__ import annotations

import itertools
import ssl
import time
from typing import Protocol

from ..ingest.fair_gate import Busy, Gate
from .connection import BODY, BodyWait, Connection
from .framing import HEAD_END
from .refusals import HttpError
from .streams import RECV_BYTES


class Waiting(Protocol):
    """What the body reader asks of the poller."""

    def wait(self, connection: Connection, seconds: float) -> None:
        """Watch the connection for input, for at most `seconds`."""

    def dispatch(self, connection: Connection) -> None:
        """Hand the connection to a worker."""

    def close(self, connection: Connection) -> None: ...


class BodyReader:
    """Reads the body of a request a worker found incomplete, its bytes counted as they
    arrive in the client's fair share of `gate`, within `timeout` seconds; the request then
    goes back to a worker, its body whole or with what refused it."""

    def __init__(self, gate: Gate, timeout: float, poller: Waiting) -> None:
        self._gate = gate
        self._timeout = timeout
        self._poller = poller

    def in_use(self) -> tuple[int, int]:
        """(requests, bytes): the bodies being read, and their bytes received so far."""
        requests, received, _ = self._gate.in_use()
        return requests, received

    def begin(self, connection: Connection) -> None:
        """Start reading the body of the request the connection's handler left pending."""
        handler = connection.handler
        assert handler is not None and handler.pending is not None
        pending, handler.pending = handler.pending, None
        try:
            ticket = self._gate.admit(pending.client, 0)
        except Busy as busy:
            return self.serve_again(connection, busy)
        try:
            connection.sock.setblocking(False)  # the worker's writes left it blocking
        except (OSError, ValueError):
            ticket.release()
            return self._poller.close(connection)
        connection.wait = BodyWait(pending, ticket)
        connection.state = BODY
        connection.progress = time.monotonic()
        self._poller.wait(connection, self._timeout)
        buffer = connection.reader.buffer
        head = HEAD_END.search(buffer)
        start = head.end() if head is not None else len(buffer)
        arrived = bytes(buffer[start:])
        del buffer[start:]
        if arrived and not self._take(connection, arrived):
            return
        self.read(connection)

    def read(self, connection: Connection) -> None:
        """Take what arrived of the body (a few reads, then other connections' turn)."""
        wait = connection.wait
        for turn in itertools.count():
            if wait is None or connection.state != BODY:
                return
            if turn >= 16 and not (
                isinstance(connection.sock, ssl.SSLSocket) and connection.sock.pending()
            ):
                return  # other connections get their turn (the selector wakes this again)
            try:
                data = connection.sock.recv(wait.framing.wanted(RECV_BYTES))
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except (OSError, ValueError):
                return self._poller.close(connection)
            if not data:
                return self._poller.close(connection)
            if not self._take(connection, data):
                return

    def _take(self, connection: Connection, data: bytes) -> bool:
        """Add bytes received to the body; False once the request went back to a worker,
        whole or refused."""
        wait = connection.wait
        assert wait is not None
        connection.progress = time.monotonic()
        try:
            added, after = wait.framing.feed(data)
            wait.ticket.reserve(added)
        except (Busy, HttpError) as refusal:
            self.serve_again(connection, refusal)
            return False
        if after is None:
            return True
        connection.reader.buffer += after  # the next request's
        connection.reader.body = wait.framing.body()
        self.serve_again(connection, None)
        return False

    def drop(self, connection: Connection) -> None:
        """Let go of a body being read or read (and its share of the budget): the connection
        is closing. Never while a worker holds it: workers' connections are not closed here."""
        if connection.wait is not None:
            connection.wait.ticket.release()
            connection.wait = None
        connection.reader.let_go()

    def serve_again(self, connection: Connection, refusal: Exception | None) -> None:
        """Hand the request back to a worker, served again from its head: with its body in
        the reader, or with what refused it (which the handler answers in its own format)."""
        if connection.wait is not None:
            connection.reader.held = connection.wait.ticket
            connection.wait = None
        connection.reader.refusal = refusal
        self._poller.dispatch(connection)
