"""A connection's input as the poller collects it, and its output as a worker writes it."""

from __future__ import annotations

import socket
import ssl

from ..ingest.fair_gate import Ticket
from .framing import MAX_HEAD_BYTES
from .refusals import ClientGone

RECV_BYTES = 64 << 10


class Reader:
    """The connection's input, as the poller collected it: the request head in `buffer`
    (and whatever followed it), and once read, the request's `body` (decoded when chunked) or
    the `refusal` its reading met. Handlers only ever read what has arrived."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.body: bytes | None = None
        self.refusal: Exception | None = None
        self.held: Ticket | None = None
        """The arriving-bodies share the body still holds: kept until its handler is done with
        it (and has taken its bytes into its own admission), so a whole body waiting for a
        worker stays counted."""

    def let_go(self) -> None:
        """Forget the body read, and what it held of the arriving-bodies budget."""
        self.body = self.refusal = None
        if self.held is not None:
            self.held.release()
            self.held = None

    def take(self, size: int) -> bytes:
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def readline(self, limit: int = -1) -> bytes:
        """A line with its newline, at most `limit` bytes; what is left when none is whole."""
        end = self.buffer.find(b"\n")
        if end >= 0 and (limit < 0 or end < limit):
            return self.take(end + 1)
        return self.take(len(self.buffer) if limit < 0 else limit)

    def pump(self) -> bool:
        """Take what has arrived without blocking (the socket is non-blocking); False at the
        end of the stream or on an error."""
        while len(self.buffer) <= MAX_HEAD_BYTES:
            try:
                data = self.sock.recv(RECV_BYTES)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return True
            except (OSError, ValueError):
                return False
            if not data:
                return False
            self.buffer += data
        return True


class Writer:
    """The connection's output: writes are gathered and sent on `flush` (one send for a
    response's head and body), within `timeout` seconds in all."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self._sock = sock
        self._timeout = timeout
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._pending.append(bytes(data))
        return len(data)

    def discard(self) -> None:
        """Forget what was written and not sent (a failed answer, replaced by another)."""
        self._pending.clear()

    def flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        try:
            self._sock.settimeout(self._timeout)
            self._sock.sendall(data)  # the timeout bounds the whole call
        except (OSError, ValueError):
            raise ClientGone() from None
