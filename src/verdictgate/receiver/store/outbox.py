"""The outbox: admissions staged for publishing, kept within a limit, until every signal of one
is delivered."""

from __future__ import annotations

import logging
import sqlite3

logger = logging.getLogger(__name__)

DEFAULT_OUTBOX_LIMIT = 100_000
"""Admissions the outbox holds while the publish target is away; beyond, the oldest interim
ones go first, then the oldest."""


class Outbox:
    """The `outbox` table, with the count of the admissions it holds (kept here, so that
    staging never counts them)."""

    def __init__(self, cursor: sqlite3.Cursor, limit: int = DEFAULT_OUTBOX_LIMIT) -> None:
        self.limit = limit
        self.size: int
        (self.size,) = cursor.execute("SELECT COUNT(*) FROM outbox").fetchone()
        self._full = False

    def stage(self, cursor: sqlite3.Cursor, run_id: str, body: str, final: bool) -> None:
        """Append an admission; beyond the limit the oldest interim admission is dropped (the
        oldest admission when there is none), with one warning while the outbox stays full."""
        cursor.execute(
            "INSERT INTO outbox (run_id, final, body) VALUES (?, ?, ?)", (run_id, int(final), body)
        )
        self.size += 1
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

    def oldest(self, cursor: sqlite3.Cursor, limit: int) -> list[tuple[int, str, int]]:
        """The oldest staged admissions: (seq, body, signals already sent)."""
        return cursor.execute(
            "SELECT seq, body, sent FROM outbox ORDER BY seq LIMIT ?", (limit,)
        ).fetchall()

    def mark_sent(self, cursor: sqlite3.Cursor, seq: int, sent: int, complete: int) -> None:
        """Record the signals of an entry delivered so far; a complete entry leaves the outbox."""
        if (sent & complete) == complete:
            cursor.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
            self.size -= cursor.rowcount
        else:
            cursor.execute("UPDATE outbox SET sent = ? WHERE seq = ?", (sent, seq))
