"""A store outage as the log tells it: one line when the store starts failing exports or ticks,
one when it takes work again, with how long it failed and how many exports it refused; never
a line per request or per tick."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .store.faults import first_line

logger = logging.getLogger(__name__)

QUIET = 2.0
"""Seconds the store must take work without failing any before an outage is over, so that a
store failing now and then (a lock not had in time beside writes that commit) is one outage,
not two lines per failure."""


class StoreOutage:
    """The outages of one receiver's store, on `clock` (seconds): `failed` for each export
    refused and each tick (or admission) failed because of the store, `worked` for each export
    taken and tick done. The first failure of an outage is logged as a warning (what is refused, and the
    `retry_after` seconds senders are told to wait); its end, the first work done once nothing
    failed for QUIET seconds, with how long the store failed (from the first failure to the
    first work done after the last) and the exports refused meanwhile. Thread-safe."""

    def __init__(self, retry_after: int, *, clock: Callable[[], float]) -> None:
        self.retry_after = retry_after
        self._clock = clock
        self._lock = threading.Lock()
        self._began: float | None = None
        """When the outage under way began (None: the store works)."""
        self._last_failure = 0.0
        self._back_at: float | None = None
        """The first work done since the last failure."""
        self.refused = 0
        """Exports refused during the outage under way (0 when there is none)."""

    @property
    def away(self) -> bool:
        """Whether an outage is under way."""
        with self._lock:
            return self._began is not None

    def failed(self, error: BaseException, export: bool) -> None:
        """The store failed an export (refused: its sender retries it), or other work (a tick,
        an admission)."""
        with self._lock:
            now = self._clock()
            began = self._began is None
            if began:
                self._began, self.refused = now, 0
            self._last_failure, self._back_at = now, None
            self.refused += export
        if began:
            logger.warning(
                "verdictgate: the store is unavailable (%s): exports are refused, their senders "
                "told to retry in %d s, and runs wait; logged again when it answers",
                first_line(error),
                self.retry_after,
            )

    def worked(self) -> None:
        """The store took an export, or a tick was done."""
        with self._lock:
            if self._began is None:
                return
            now = self._clock()
            if self._back_at is None:
                self._back_at = now
            if now - self._last_failure < QUIET:
                return
            lasted, refused = self._back_at - self._began, self.refused
            self._began, self._back_at, self.refused = None, None, 0
        logger.warning(
            "verdictgate: the store answers again after %.1f s unavailable; %d exports were "
            "refused meanwhile (their senders retry them)",
            lasted,
            refused,
        )
