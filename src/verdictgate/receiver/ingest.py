"""One export request's path, shared by both transports: admission control, decode, commit, answer.

Admission control (`Gate`) bounds what senders can make the receiver hold at once, requests in
flight and their bytes, and shares both fairly among clients, so one aggressive sender cannot
starve the others. `Limits` gathers every bound a user may tune, the transports' included.
"""

from __future__ import annotations

import hmac
import logging
import sqlite3
import threading
import traceback
from dataclasses import dataclass
from enum import Enum
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from ..otel.otlp_reading import Extract, MalformedRequest
from .decoding import Decoder, DecoderUnavailable
from .receiver import Receiver

logger = logging.getLogger(__name__)

TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
PROTOBUF = "application/x-protobuf"

Client = tuple[str, str]
"""Who sends a request, for fairness: (peer host, user agent)."""
ANONYMOUS: Client = ("", "")


@dataclass(frozen=True)
class Limits:
    """What senders may cost the receiver: per request, at once, and per connection."""

    max_request_bytes: int = 16 << 20
    """A request body, before and after gzip decompression."""
    max_in_flight: int = 16
    """Export requests admitted at once (both transports together)."""
    max_bytes_in_flight: int = 64 << 20
    """Request bytes admitted at once: declared lengths, chunks read and decompressed bytes.
    Never less than `max_request_bytes` in effect, so any allowed request can be admitted."""
    retry_after_seconds: int = 1
    """What a refused sender is told to wait (HTTP `Retry-After`, gRPC `RetryInfo`)."""
    decoders: int = 0
    """Worker processes that decode request bodies (0: decode in the serving threads)."""
    max_watchers: int = 64
    """`status --wait` streams open at once; each holds a thread of its own, beside the ones
    exports use, so watchers never starve ingest."""
    header_timeout_seconds: float = 10.0
    """From a connection's accept (or its first byte after an idle keep-alive) until its request
    head is complete; also the gRPC (TLS and HTTP/2) handshake timeout."""
    body_timeout_seconds: float = 30.0
    """To read a whole request body once admitted; also to write a whole response."""
    idle_timeout_seconds: float = 60.0
    """An HTTP keep-alive connection with no request in progress is closed after this."""
    http_workers: int = 32
    """Threads that serve HTTP requests whose head has arrived (waiting costs no thread)."""
    http_queue: int = 256
    """HTTP requests with a complete head waiting for a worker; beyond, a quick 503."""
    max_connections: int = 1024
    """Open HTTP connections; a connection beyond is answered 503 and closed. Never more than
    half the process's file limit in effect (`RLIMIT_NOFILE`, raised to its hard limit at
    start), so idle sockets cannot take the descriptors gRPC, the store and the decoders need."""
    max_connections_per_host: int = 256
    """Open HTTP connections from one peer address; one beyond is answered 503 and closed, so a
    single host renewing idle sockets cannot lock the others out (hosts behind one NAT or proxy
    share it)."""
    http_backlog: int = 1024
    """The HTTP listen backlog (connections the kernel queues before they are accepted)."""
    grpc_max_concurrent_rpcs: int | None = None
    """gRPC calls at once, each on a thread of its own (gRPC answers RESOURCE_EXHAUSTED
    beyond); None: `max_in_flight + max_watchers + 16`."""
    grpc_keepalive_seconds: float = 60.0
    """The gRPC server pings a connection quiet for this long, to find dead peers."""
    grpc_keepalive_timeout_seconds: float = 20.0
    """A ping unanswered for this long closes its connection."""
    grpc_max_connection_idle_seconds: float = 300.0
    """A gRPC connection without calls for this long is closed (GOAWAY; clients reconnect)."""
    grpc_min_ping_interval_seconds: float = 10.0
    """Clients may ping at most this often; one that pings more is disconnected."""

    def concurrent_rpcs(self) -> int:
        if self.grpc_max_concurrent_rpcs is not None:
            return self.grpc_max_concurrent_rpcs
        return self.max_in_flight + self.max_watchers + 16


class Busy(Exception):
    """Too many requests or bytes in flight, or this client's share is taken: retry later."""


class Gate:
    """Admits at most `slots` requests and `budget` bytes at once, fairly among clients.

    A request is admitted when a slot is free, its bytes fit in the budget, and its client stays
    within its fair share: a client that already holds admitted requests may hold at most
    `max(1, (slots - 1) // n)` of them and `(budget - reserve) // n` bytes, where `n` counts the
    clients holding requests, itself included, and `reserve` is one largest request (at most
    half the budget). Shares always leave a slot and one request's bytes free, so a client that
    holds nothing (a second sender beside an aggressive one) is admitted at once; it is held only
    to the global bounds. A request that grows (`Ticket.reserve`: chunks as they are read,
    decompressed bytes) is held to the same rules: the budget always, and the client's byte
    share unless this is the only request it holds. A refusal (`Busy`) is retryable. Each call
    is O(1) under one lock.
    """

    def __init__(self, slots: int, budget: int, request_bytes: int | None = None) -> None:
        self._slots = slots
        self._budget = budget
        self._reserve = min(request_bytes if request_bytes is not None else budget, budget // 2)
        self._lock = threading.Lock()
        self._used_slots = 0
        self._used_bytes = 0
        self._held: dict[Client, list[int]] = {}
        """client -> [slots, bytes], for clients holding at least one slot."""

    def _byte_share(self) -> int:
        """What one client holding requests may hold in bytes (under the lock)."""
        return max(0, (self._budget - self._reserve) // max(1, len(self._held)))

    def admit(self, client: Client, size: int) -> Ticket:
        """A ticket for one request of `size` bytes (raises Busy); release it when done."""
        with self._lock:
            if self._used_slots >= self._slots:
                raise Busy("receiver busy, retry later")
            if self._used_bytes + size > self._budget:
                raise Busy("receiver busy (bytes in flight), retry later")
            held = self._held.get(client)
            if held is not None:
                clients = len(self._held)
                if (
                    held[0] >= max(1, (self._slots - 1) // clients)
                    or held[1] + size > self._byte_share()
                ):
                    raise Busy("this client's share of the receiver is taken, retry later")
                held[0] += 1
                held[1] += size
            else:
                self._held[client] = [1, size]
            self._used_slots += 1
            self._used_bytes += size
        return Ticket(self, client, size)

    def _grow(self, ticket: Ticket, size: int) -> None:
        with self._lock:
            if self._used_bytes + size > self._budget:
                raise Busy("receiver busy (bytes in flight), retry later")
            held = self._held[ticket.client]
            if held[0] > 1 and held[1] + size > self._byte_share():
                raise Busy("this client's share of the receiver is taken, retry later")
            self._used_bytes += size
            held[1] += size
            ticket.size += size

    def _release(self, ticket: Ticket) -> None:
        with self._lock:
            held = self._held[ticket.client]
            held[0] -= 1
            held[1] -= ticket.size
            if not held[0]:
                del self._held[ticket.client]
            self._used_slots -= 1
            self._used_bytes -= ticket.size

    def in_use(self) -> tuple[int, int, int]:
        """(slots, bytes, clients) held right now."""
        with self._lock:
            return self._used_slots, self._used_bytes, len(self._held)


class Ticket:
    """One admitted request's slot and bytes; more bytes may be reserved as the body grows
    (chunks, decompression). Released once, by `release` or leaving its `with` block."""

    def __init__(self, gate: Gate, client: Client, size: int) -> None:
        self._gate = gate
        self.client = client
        self.size = size
        self._released = False

    def reserve(self, more: int) -> None:
        """Hold `more` bytes too (raises Busy when the budget or, if the client holds other
        requests too, its share cannot take them)."""
        if more > 0:
            self._gate._grow(self, more)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._gate._release(self)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def authorized(header: str | None, token: str | None) -> bool:
    if token is None:
        return True
    expected = f"Bearer {token}".encode()
    return header is not None and hmac.compare_digest(header.encode(), expected)


def partial_success(extract: Extract) -> ExportTraceServiceResponse:
    if not extract.rejected:
        return ExportTraceServiceResponse()
    return ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(
            rejected_spans=extract.rejected, error_message="; ".join(extract.errors)
        )
    )


_reported: set[tuple[str, str, int]] = set()
_reported_lock = threading.Lock()


def report_unexpected(error: BaseException, where: str) -> None:
    """Log an error no answer was planned for, with its traceback, the first time its kind
    (type and the line that raised it) is seen; repeats go to DEBUG, so a sender that keeps
    triggering one bug cannot flood the log."""
    frames = traceback.extract_tb(error.__traceback__)
    last = frames[-1] if frames else None
    kind = (
        type(error).__qualname__,
        last.filename if last else "",
        (last.lineno or 0) if last else 0,
    )
    with _reported_lock:
        first = kind not in _reported
        if first and len(_reported) < 1000:
            _reported.add(kind)
    if first:
        logger.error("verdictgate: unexpected error in %s", where, exc_info=error)
    else:
        logger.debug("verdictgate: unexpected error in %s (again)", where, exc_info=error)


class Failure(str, Enum):
    """What an exception on a request's path means for its sender, whatever the transport."""

    INVALID = "invalid"
    """The request itself is wrong: do not retry it."""
    BUSY = "busy"
    """The receiver is at a limit, or this client over its share: retry later."""
    UNAVAILABLE = "unavailable"
    """A decoder restarting or the store failing: retry later."""
    INTERNAL = "internal"
    """Nothing planned for it (logged once per kind): not retryable."""

    @property
    def retryable(self) -> bool:
        return self in (Failure.BUSY, Failure.UNAVAILABLE)


def failure_of(error: Exception, where: str) -> tuple[Failure, str]:
    """The failure an exception is, with the message the sender gets (an unplanned one is
    logged, and its details kept out of the answer)."""
    if isinstance(error, MalformedRequest):
        return Failure.INVALID, str(error)
    if isinstance(error, Busy):
        return Failure.BUSY, str(error)
    if isinstance(error, DecoderUnavailable):
        return Failure.UNAVAILABLE, "decoder restarting, retry later"
    if isinstance(error, sqlite3.Error):
        logger.error("verdictgate: store error: %s", error)
        return Failure.UNAVAILABLE, "store unavailable, retry later"
    report_unexpected(error, where)
    return Failure.INTERNAL, "internal error"


class Ingest:
    """Shared by both transports: admit, decode, commit, answer."""

    def __init__(self, receiver: Receiver, limits: Limits) -> None:
        self.receiver = receiver
        self.limits = limits
        self.gate = Gate(
            limits.max_in_flight,
            max(limits.max_bytes_in_flight, limits.max_request_bytes),
            limits.max_request_bytes,
        )
        self.decoder = Decoder(limits.decoders)

    def admit(self, client: Client, size: int) -> Ticket:
        """Admit one request of `size` bytes from `client` before its body is read (raises
        Busy); pass the ticket to `export`."""
        return self.gate.admit(client, size)

    def export(
        self,
        body: bytes,
        content_type: str,
        client: Client = ANONYMOUS,
        ticket: Ticket | None = None,
    ) -> ExportTraceServiceResponse:
        """Decode and commit one export request from `client`.

        The request is admitted here unless the caller admitted it already and passes its
        `ticket` (HTTP does, before reading the body; the ticket names the client); the caller
        then releases it. Raises MalformedRequest (client error), Busy, DecoderUnavailable or
        sqlite3.Error (the last three retryable).
        """
        if ticket is not None:
            return self._export(body, content_type)
        with self.gate.admit(client, len(body)):
            return self._export(body, content_type)

    def _export(self, body: bytes, content_type: str) -> ExportTraceServiceResponse:
        extract = self.decoder.decode(body, content_type)
        self.receiver.ingest(extract)
        return partial_success(extract)
