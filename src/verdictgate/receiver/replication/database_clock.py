"""The one clock replicas compare: the shared store's, read on each replica without a round trip
per reading, whatever that replica's wall clock says."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import Store

logger = logging.getLogger(__name__)

SKEW_WARNING = 1.0
"""Seconds between this replica's wall clock and the database's past which it is logged."""
TRUSTED_ROUND_TRIP = 0.25
"""Seconds a measuring round trip may take for its reading to move the offset (a slow reply
says little about when the database read its clock)."""
BEST_OF = 30.0
"""Seconds a reading's round trip is the one to beat: a slower reading moves the offset only
once the best is older than that."""


class DatabaseClock:
    """The database's time (epoch seconds), read here as this process's monotonic clock plus
    its offset to the database, measured at start and again at each `measure` (the receiver
    does at each tick). Every lease, last news, idle deadline and outbox claim a replica writes
    to a shared store, and every one it compares, is on this clock: a replica whose wall clock
    is minutes off reads the same time as the others, to within half a round trip. A wall
    clock more than SKEW_WARNING seconds off the database's is logged once (again after it
    came back in step). `read` is the database's clock (`Store.now`); `monotonic` and `wall`
    are this process's."""

    def __init__(
        self,
        read: Callable[[], float],
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._read, self._monotonic, self._wall = read, monotonic, wall
        self._lock = threading.Lock()
        self._offset = 0.0
        self._measured = False
        self._best_round_trip, self._best_at = math.inf, -math.inf
        self._warned = False
        self.measure()

    def __call__(self) -> float:
        with self._lock:
            return self._monotonic() + self._offset

    @property
    def skew(self) -> float:
        """Seconds this process's wall clock is ahead of the database's (behind: negative), as
        last measured."""
        return self._wall() - self()

    def measure(self) -> float:
        """Read the database's clock once and move the offset to it when the round trip was
        the shortest of the last BEST_OF seconds (a quicker reply tells better when the clock
        was read; the first reading, whatever its round trip, and none slower than
        TRUSTED_ROUND_TRIP); this wall clock's skew. The store's error when it does not answer
        (the offset stays)."""
        before = self._monotonic()
        database = self._read()
        after = self._monotonic()
        round_trip = after - before
        with self._lock:
            best_expired = after - self._best_at > BEST_OF
            if not self._measured or (
                round_trip <= TRUSTED_ROUND_TRIP
                and (round_trip <= self._best_round_trip or best_expired)
            ):
                self._offset = database - (before + after) / 2
                self._measured = True
                self._best_round_trip, self._best_at = round_trip, after
        skew = self.skew
        if abs(skew) > SKEW_WARNING and not self._warned:
            self._warned = True
            logger.warning(
                "verdictgate: this replica's wall clock is %.1f s %s the database's; leases, "
                "idle periods and settling are read on the database's clock, but check its time "
                "service (NTP)",
                abs(skew),
                "ahead of" if skew > 0 else "behind",
            )
        elif abs(skew) <= SKEW_WARNING / 2:
            self._warned = False
        return skew


def store_clock(store: Store) -> Callable[[], float]:
    """The clock a receiver and its forwarder time a store's work by: the database's for a
    shared store, this process's wall clock for a store no other process writes."""
    return DatabaseClock(store.now) if store.shared else time.time
