"""The outbox: admissions staged for publishing, kept within a limit, until every signal of one
is delivered."""

from __future__ import annotations

import logging

from .connection import Cursor
from .statements import SKIP_LOCKED, sql

logger = logging.getLogger(__name__)

DEFAULT_OUTBOX_LIMIT = 100_000
"""Admissions the outbox holds while the publish target is away; beyond, the oldest interim
ones go first, then the oldest."""

_COUNT = sql("SELECT COUNT(*) FROM outbox")
_STAGE = sql("INSERT INTO outbox (run_id, final, body) VALUES (?, ?, ?)")
_DROP_OLDEST = sql(
    "DELETE FROM outbox WHERE seq = COALESCE("
    "(SELECT MIN(seq) FROM outbox WHERE final = 0), (SELECT MIN(seq) FROM outbox))"
)
_CLAIMABLE = (
    "UPDATE outbox SET claimed_by = ?, claim_until = ? WHERE seq IN (SELECT seq FROM"
    " outbox WHERE (claim_until IS NULL OR claim_until < ? OR claimed_by = ?)"
)
_CLAIMED = (" ORDER BY seq LIMIT ?", SKIP_LOCKED, ") RETURNING seq, body, sent")
_CLAIM = sql(_CLAIMABLE, *_CLAIMED)
_CLAIM_WAITING = sql(_CLAIMABLE, " AND (sent & ?) <> ?", *_CLAIMED)
"""Entries claimed, of those not yet sent a signal."""
_RELEASE = sql("UPDATE outbox SET claim_until = 0 WHERE claimed_by = ?")
_DELIVERED = sql("DELETE FROM outbox WHERE seq = ?")
_SENT = sql("UPDATE outbox SET sent = sent | ? WHERE seq = ?")


class Outbox:
    """The `outbox` table, with the count of the admissions it holds (kept here, so that
    staging never counts them; in a `shared` store, where other replicas stage and deliver
    too, an estimate: counted again when it says the outbox is full, and by the receiver
    every 30 s, `Store.recount`)."""

    def __init__(
        self,
        cursor: Cursor,
        limit: int = DEFAULT_OUTBOX_LIMIT,
        *,
        shared: bool = False,
    ) -> None:
        self.limit = limit
        self.size = self.count(cursor)
        self._full = False
        self._shared = shared

    def count(self, cursor: Cursor) -> int:
        """The admissions the outbox holds, counted."""
        (size,) = cursor.execute(_COUNT).fetchone()
        return int(size)

    def stage(self, cursor: Cursor, run_id: str, body: str, final: bool) -> None:
        """Append an admission; beyond the limit the oldest interim admission is dropped (the
        oldest admission when there is none), with one warning while the outbox stays full."""
        cursor.execute(_STAGE, (run_id, int(final), body))
        self.size += 1
        if self.size > self.limit and self._shared:
            self.size = self.count(cursor)
        if self.size <= self.limit:
            self._full = False
            return
        cursor.execute(_DROP_OLDEST)
        self.size -= cursor.rowcount
        if not self._full:
            self._full = True
            logger.warning(
                "verdictgate: the outbox holds %d admissions, its limit: the oldest are dropped "
                "until the publish target takes them",
                self.limit,
            )

    def claim(
        self,
        cursor: Cursor,
        replica: str,
        now: float,
        until: float,
        limit: int,
        waiting_for: int | None = None,
    ) -> list[tuple[int, str, int]]:
        """Claim for `replica`, until `until`, the oldest staged admissions no other replica's
        claim holds at `now` (with `waiting_for`, those of them not yet sent one of its
        signals): (seq, body, signals already sent), oldest first. Replicas claiming at once
        claim different entries."""
        if waiting_for is None:
            rows = cursor.execute(_CLAIM, (replica, until, now, replica, limit)).fetchall()
        else:
            parameters = (replica, until, now, replica, waiting_for, waiting_for, limit)
            rows = cursor.execute(_CLAIM_WAITING, parameters).fetchall()
        return sorted((int(seq), str(body), int(sent)) for seq, body, sent in rows)

    def release(self, cursor: Cursor, replica: str) -> None:
        """Let `replica`'s claims on entries lapse now."""
        cursor.execute(_RELEASE, (replica,))

    def mark_sent(self, cursor: Cursor, seq: int, sent: int, complete: int) -> None:
        """Record the signals of an entry delivered so far; a complete entry leaves the outbox."""
        if (sent & complete) == complete:
            cursor.execute(_DELIVERED, (seq,))
            self.size = max(self.size - cursor.rowcount, 0)
        else:
            cursor.execute(_SENT, (sent, seq))
