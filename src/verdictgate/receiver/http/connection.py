"""A connection as the poller holds it: its state, its deadline, the body it waits for, and
which of a host's connections gives way to a newcomer."""

from __future__ import annotations

import socket
import time

from ..fair_gate import Ticket
from .chunked import ChunkedBody
from .handler import BodyPending, RequestHandler, peer_host
from .streams import Reader, Writer

HANDSHAKE, HEAD, BODY, BUSY, LINGER, CLOSED = range(6)
WAITING = (HANDSHAKE, HEAD, BODY, LINGER)
"""The states in which a connection waits on the poller, under a deadline."""
CLOSE, KEEP, AWAIT = range(3)
"""What a worker hands a connection back for: closing, its next request, or its body."""


class BodyWait:
    """A request body the poller is reading: its bytes held in a share of the budget."""

    __slots__ = ("chunks", "length", "raw", "received", "ticket")

    def __init__(self, pending: BodyPending, ticket: Ticket) -> None:
        self.length = pending.length
        self.chunks = ChunkedBody(pending.limit) if pending.length is None else None
        self.ticket = ticket
        self.received = bytearray()
        """A `Content-Length` body's bytes so far."""
        self.raw = 0
        """Bytes received for a chunked body, framing included."""


class Connection:
    __slots__ = (
        "address",
        "deadline",
        "discarded",
        "handler",
        "host",
        "idle",
        "progress",
        "reader",
        "scanned",
        "sock",
        "state",
        "wait",
        "writer",
    )

    def __init__(
        self,
        sock: socket.socket,
        address: tuple[str, int],
        state: int,
        deadline: float,
        write_timeout: float,
    ) -> None:
        self.sock = sock
        self.address = address
        self.host = peer_host(address)
        self.state = state
        self.deadline = deadline
        self.reader = Reader(sock)
        self.writer = Writer(sock, write_timeout)
        self.handler: RequestHandler | None = None
        self.idle = False
        """Kept alive and waiting for the first byte of its next request."""
        self.scanned = 0
        self.discarded = 0
        self.wait: BodyWait | None = None
        self.progress = time.monotonic()
        """When its head or body last brought bytes (or it began to wait for them)."""


STALLED_SECONDS = 1.0
"""A head or body that brought no byte for this long is stalled, and may be evicted."""


def first_to_evict(waiting: dict[Connection, None], now: float) -> Connection | None:
    """Of a host's waiting connections (the longest waiting first), the one to close for a new
    one: an idle keep-alive or a lingering close if there is one (closing it costs its client
    nothing), else the longest waiting of those whose head or body is stalled; None when every
    one is making progress (the newcomer is then refused: no upload is cut for it)."""
    stalled = None
    for connection in waiting:
        if connection.idle or connection.state == LINGER:
            return connection
        if stalled is None and now - connection.progress >= STALLED_SECONDS:
            stalled = connection
    return stalled
