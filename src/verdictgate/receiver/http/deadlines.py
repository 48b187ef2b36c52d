"""The poller's deadlines: when each waiting connection's wait ends."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Iterator

from .connection import WAITING, Connection


class Deadlines:
    """A heap of (deadline, connection) over the connections `open`: a connection's latest
    deadline is the one that counts, the others are skipped (and dropped when they pile up)."""

    def __init__(self, open: Collection[Connection]) -> None:
        self._open = open
        self._heap: list[tuple[float, int, Connection]] = []
        self._sequence = itertools.count()

    def set(self, connection: Connection, deadline: float) -> None:
        connection.deadline = deadline
        heapq.heappush(self._heap, (deadline, next(self._sequence), connection))
        if len(self._heap) > 4 * len(self._open) + 64:  # drop stale entries
            self._heap = [
                (c.deadline, next(self._sequence), c) for c in self._open if c.state in WAITING
            ]
            heapq.heapify(self._heap)

    def wait(self, now: float, longest: float) -> float:
        """Seconds from `now` to the next deadline, at most `longest`."""
        return min(longest, max(0.0, self._heap[0][0] - now)) if self._heap else longest

    def due(self, now: float) -> Iterator[Connection]:
        """The waiting connections whose deadline is past, each taken off the heap."""
        while self._heap and self._heap[0][0] <= now:
            deadline, _, connection = heapq.heappop(self._heap)
            if connection.deadline == deadline and connection.state in WAITING:
                yield connection
