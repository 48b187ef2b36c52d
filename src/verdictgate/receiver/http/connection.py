"""A connection as the poller holds it: its state, its deadline, the body it waits for."""

from __future__ import annotations

import socket
import time

from ..ingest.fair_gate import Ticket
from .framing import BodyFraming
from .handler import BodyPending, RequestHandler, peer_host
from .streams import Reader, Writer

HANDSHAKE, HEAD, BODY, BUSY, LINGER, CLOSED = range(6)
WAITING = (HANDSHAKE, HEAD, BODY, LINGER)
"""The states in which a connection waits on the poller, under a deadline."""
CLOSE, KEEP, AWAIT = range(3)
"""What a worker hands a connection back for: closing, its next request, or its body."""


class BodyWait:
    """A request body the poller is reading: its bytes held in a share of the budget."""

    __slots__ = ("framing", "ticket")

    def __init__(self, pending: BodyPending, ticket: Ticket) -> None:
        self.framing = BodyFraming(pending.length, pending.limit)
        self.ticket = ticket


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
        write_timeout: float,
    ) -> None:
        self.sock = sock
        self.address = address
        self.host = peer_host(address)
        self.state = state
        self.deadline = 0.0
        """When its wait on the poller ends (see `Deadlines`)."""
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
