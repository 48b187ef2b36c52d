"""What senders may cost a receiver: every bound a user may tune, both transports' included
(`verdictgate serve`'s flags set them)."""

from __future__ import annotations

from dataclasses import dataclass


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
    """What a sender refused for want of room is told to wait (HTTP `Retry-After`, gRPC
    `RetryInfo`)."""
    unavailable_retry_after_seconds: int = 5
    """What a sender refused because the store is away is told to wait: exporters honour it
    between their few tries (the Python SDK's six), so that together they span an outage of
    half a minute (a failover, a restart) rather than a few seconds."""
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
