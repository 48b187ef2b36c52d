"""The outbox: admissions staged for publishing, kept within a limit, until every signal of one
is delivered."""

from __future__ import annotations

import logging

from .connection import Cursor

logger = logging.getLogger(__name__)

DEFAULT_OUTBOX_LIMIT = 100_000
"""Admissions the outbox holds while the publish target is away; beyond, the oldest interim
ones go first, then the oldest."""


class Outbox:
    """The `outbox` table, with the count of the admissions it holds (kept here, so that
    staging never counts them; in a `shared` store, where other replicas stage and deliver
    too, an estimate: counted again when it says the outbox is full, and at each of the
    receiver's lease renewals, `Store.recount`)."""

    def __init__(
        self,
        cursor: Cursor,
        limit: int = DEFAULT_OUTBOX_LIMIT,
        *,
        shared: bool = False,
        for_update_skip_locked: str = "",
    ) -> None:
        self.limit = limit
        self.size = self.count(cursor)
        self._full = False
        self._shared = shared
        self._skip_locked = for_update_skip_locked

    def count(self, cursor: Cursor) -> int:
        """The admissions the outbox holds, counted."""
        (size,) = cursor.execute("SELECT COUNT(*) FROM outbox").fetchone()
        return int(size)

    def stage(self, cursor: Cursor, run_id: str, body: str, final: bool) -> None:
        """Append an admission; beyond the limit the oldest interim admission is dropped (the
        oldest admission when there is none), with one warning while the outbox stays full."""
        cursor.execute(
            "INSERT INTO outbox (run_id, final, body) VALUES (?, ?, ?)", (run_id, int(final), body)
        )
        self.size += 1
        if self.size > self.limit and self._shared:
            self.size = self.count(cursor)
        if self.size <= self.limit:
            self._full = False
            return
        cursor.execute(
            "DELETE FROM outbox WHERE seq = COALESCE("
            "(SELECT MIN(seq) FROM outbox WHERE final = 0), (SELECT MIN(seq) FROM outbox))"
        )
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
        waiting = "" if waiting_for is None else " AND (sent & ?) <> ?"
        signals = () if waiting_for is None else (waiting_for, waiting_for)
        rows = cursor.execute(
            "UPDATE outbox SET claimed_by = ?, claim_until = ? WHERE seq IN (SELECT seq FROM"
            f" outbox WHERE (claim_until IS NULL OR claim_until < ? OR claimed_by = ?){waiting}"
            f" ORDER BY seq LIMIT ?{self._skip_locked}) RETURNING seq, body, sent",
            (replica, until, now, replica, *signals, limit),
        ).fetchall()
        return sorted((int(seq), str(body), int(sent)) for seq, body, sent in rows)

    def release(self, cursor: Cursor, replica: str) -> None:
        """Let `replica`'s claims on entries lapse now."""
        cursor.execute("UPDATE outbox SET claim_until = 0 WHERE claimed_by = ?", (replica,))

    def mark_sent(self, cursor: Cursor, seq: int, sent: int, complete: int) -> None:
        """Record the signals of an entry delivered so far; a complete entry leaves the outbox."""
        if (sent & complete) == complete:
            cursor.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
            self.size = max(self.size - cursor.rowcount, 0)
        else:
            cursor.execute("UPDATE outbox SET sent = sent | ? WHERE seq = ?", (sent, seq))
