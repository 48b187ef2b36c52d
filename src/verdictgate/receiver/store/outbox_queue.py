"""The outbox as the forwarder drains it (`Store.outbox`): entries claimed for delivery, and
marked as their signals are sent."""

from __future__ import annotations

from .connection import Database
from .outbox import Outbox


class OutboxQueue:
    """The admissions staged in `database`'s `outbox`, claimed by replicas for delivery. Each
    call is one transaction."""

    def __init__(self, database: Database, outbox: Outbox) -> None:
        self._database, self._outbox = database, outbox

    def claim(
        self, replica: str, now: float, until: float, limit: int, waiting_for: int | None = None
    ) -> list[tuple[int, str, int]]:
        """Claim for `replica`, until `until`, the oldest staged admissions no other replica's
        claim holds at `now` (with `waiting_for`, those not yet sent one of its signals):
        (seq, body, signals already sent), oldest first."""
        with self._database.transaction() as cursor:
            return self._outbox.claim(cursor, replica, now, until, limit, waiting_for)

    def mark_sent(self, seq: int, sent: int, complete: int) -> None:
        """Record the signals of an entry delivered so far; a complete entry leaves the outbox."""
        with self._database.transaction() as cursor:
            self._outbox.mark_sent(cursor, seq, sent, complete)
