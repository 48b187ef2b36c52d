"""The connections open, counted per host: who is let in, and which waiting one gives way."""

from __future__ import annotations

from .connection import LINGER, Connection

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


class ConnectionTable:
    """The connections open (at most `max_connections`, `per_host` from one host) and, per
    host, those waiting on the poller in the order they began to wait."""

    def __init__(self, max_connections: int, per_host: int) -> None:
        self.max_connections = max_connections
        self.per_host = per_host
        self.open: set[Connection] = set()
        self._counts: dict[str, int] = {}
        self._waiting: dict[str, dict[Connection, None]] = {}

    def full(self) -> bool:
        return len(self.open) >= self.max_connections

    def at_cap(self, host: str) -> bool:
        return self._counts.get(host, 0) >= self.per_host

    def to_evict(self, host: str, now: float) -> Connection | None:
        """The connection of `host` to close for its new one (`first_to_evict`), if any."""
        waiting = self._waiting.get(host)
        return first_to_evict(waiting, now) if waiting else None

    def add(self, connection: Connection) -> None:
        self.open.add(connection)
        self._counts[connection.host] = self._counts.get(connection.host, 0) + 1

    def remove(self, connection: Connection) -> None:
        self.stop_waiting(connection)
        if connection in self.open:
            self.open.discard(connection)
            left = self._counts.get(connection.host, 1) - 1
            if left > 0:
                self._counts[connection.host] = left
            else:
                self._counts.pop(connection.host, None)

    def wait(self, connection: Connection) -> None:
        """The connection waits on the poller from now (the last of its host's to evict)."""
        waiting = self._waiting.setdefault(connection.host, {})
        waiting.pop(connection, None)
        waiting[connection] = None

    def stop_waiting(self, connection: Connection) -> None:
        waiting = self._waiting.get(connection.host)
        if waiting is not None:
            waiting.pop(connection, None)
            if not waiting:
                del self._waiting[connection.host]

    def waiting(self) -> int:
        """Connections waiting on the poller (read from any thread: a snapshot)."""
        return sum(len(waiting) for waiting in list(self._waiting.values()))
