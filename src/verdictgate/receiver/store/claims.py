"""Runs claimed by replicas: each run not yet admitted has one owner, whose lease it renews;
a run whose lease lapsed (its owner died, or stalled) is taken over by another, and the owner
reads the trials other replicas wrote to its runs since it last looked."""

from __future__ import annotations

from .connection import Cursor, SqlRow
from .records import StoredRun
from .runs import RUN_COLUMNS, TRIAL_COLUMNS, stored_run
from .statements import SKIP_LOCKED, sql

_CLAIM = sql(
    "UPDATE runs SET owner = ?, lease_until = ? WHERE run_id IN (SELECT run_id FROM runs"
    " WHERE status IS NULL AND (lease_until IS NULL OR lease_until < ? OR owner = ?)"
    " ORDER BY first_seen LIMIT ?",
    SKIP_LOCKED,
    f") RETURNING {RUN_COLUMNS}",
)
_OWNED = sql("SELECT run_id, version, final FROM runs WHERE owner = ? AND status IS NULL")
_RENEW = sql(
    "UPDATE runs SET lease_until = ? WHERE run_id IN (SELECT run_id FROM runs"
    " WHERE owner = ? AND status IS NULL",
    SKIP_LOCKED,
    ")",
)
_WRITTEN_SINCE = sql(
    f"SELECT {TRIAL_COLUMNS} FROM trials WHERE run_id = ? AND batch > ? AND batch <= ?"
    " ORDER BY batch, case_id, trial"
)


class RunClaims:
    """The `runs` table's owner and lease columns, and the trials by the write that stored them."""

    def claim(
        self, cursor: Cursor, replica: str, now: float, until: float, limit: int, mine: bool
    ) -> list[StoredRun]:
        """Claim for `replica`, until `until`, up to `limit` runs not yet admitted whose lease
        lapsed before `now` (or that no replica owns), and with `mine` those it owns already
        (a store of one process, reopened); the runs claimed, oldest first. Replicas claiming
        at once claim different runs."""
        rows = cursor.execute(
            _CLAIM, (replica, until, now, replica if mine else None, limit)
        ).fetchall()
        return sorted((stored_run(row) for row in rows), key=lambda run: run.first_seen)

    def owned(self, cursor: Cursor, replica: str) -> dict[str, tuple[int, bool]]:
        """The runs `replica` owns that are not admitted yet, with their versions and whether
        they are final (through the index of owners of runs not admitted)."""
        rows = cursor.execute(_OWNED, (replica,)).fetchall()
        return {run_id: (version, bool(final)) for run_id, version, final in rows}

    def renew(self, cursor: Cursor, replica: str, until: float) -> None:
        """Extend `replica`'s lease on the runs it owns that are not admitted yet. A run a write
        holds is left for the next renewal (a third of a lease later): a renewal never waits,
        so it never deadlocks with a write, and a row a stalled replica holds costs no other."""
        cursor.execute(_RENEW, (until, replica))

    def release(self, cursor: Cursor, replica: str) -> None:
        """Let `replica`'s leases lapse now (a replica that stops)."""
        self.renew(cursor, replica, 0.0)

    def written_since(self, cursor: Cursor, run_id: str, version: int, upto: int) -> list[SqlRow]:
        """The trials of a run stored by its writes after `version` up to `upto`, as
        `evidence_of` reads them."""
        return cursor.execute(_WRITTEN_SINCE, (run_id, version, upto)).fetchall()
