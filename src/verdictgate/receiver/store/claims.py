"""Runs claimed by replicas: each run not yet admitted has one owner, alive while its heartbeat
holds; the runs of a replica whose heartbeat lapsed (it died, or stalled) are taken over by
another, and the owner reads the trials other replicas wrote to its runs since it last
looked."""

from __future__ import annotations

from .connection import Cursor, SqlRow
from .records import RunVersion, StoredRun, batch_number
from .run_rows import RUN_COLUMNS, folded, stored_run
from .statements import SKIP_LOCKED, sql
from .stored_trials import TRIAL_COLUMNS

LOCAL = "local"
"""The one replica of a store no other process writes (a SQLite file): reopened, it owns again
what it owned; and the owner given to the open runs of a store made before runs had owners."""

_LAPSED = sql("SELECT name FROM replicas WHERE alive_until < ? AND name != ?")
_CLAIM = sql(
    "UPDATE runs SET owner = ? WHERE run_id IN (SELECT run_id FROM runs"
    " WHERE owner = ? AND status IS NULL ORDER BY first_seen LIMIT ?",
    SKIP_LOCKED,
    f") RETURNING {RUN_COLUMNS}",
)
_FORGET = sql(
    "DELETE FROM replicas WHERE name IN (SELECT name FROM replicas WHERE name = ?"
    " AND alive_until < ? AND NOT EXISTS (SELECT 1 FROM runs WHERE owner = ? AND status IS NULL)",
    SKIP_LOCKED,
    ")",
)
"""A lapsed replica that owns nothing any more, forgotten (unless a write of its holds its row:
it is alive again)."""
_OWNED = sql(
    "SELECT run_id, version + CAST(COALESCE((SELECT SUM(writes) FROM run_parts"
    " WHERE run_parts.run_id = runs.run_id), 0) AS BIGINT), final FROM runs"
    " WHERE owner = ? AND status IS NULL"
)
_BEAT = sql(
    "INSERT INTO replicas (name, alive_until) VALUES (?, ?)"
    " ON CONFLICT (name) DO UPDATE SET alive_until = excluded.alive_until"
)
_WRITTEN_SINCE = sql(
    f"SELECT {TRIAL_COLUMNS} FROM trials WHERE run_id = ? AND relayed = 1 AND batch > ?"
    " AND batch <= ? ORDER BY batch, case_id, trial"
)
"""Through the partial index of relayed trials (`trials_relayed`): what the owner wrote itself
is never read back."""


class RunClaims:
    """Who decides each run not yet admitted: the `runs` table's owner column, and the
    `replicas` table's heartbeats. A replica is alive while its heartbeat (one row, renewed
    every third of a lease) holds; a run is its owner's while that owner is alive, so renewing
    costs one row a replica however many runs it decides, and a lapsed heartbeat hands all its
    runs over at once."""

    def claim(
        self, cursor: Cursor, replica: str, now: float, limit: int, mine: bool
    ) -> list[StoredRun]:
        """Claim for `replica` up to `limit` runs not yet admitted whose owner's heartbeat
        lapsed before `now`, and with `mine` those it owns already (a store of one process,
        reopened); the runs claimed, oldest first. Replicas claiming at once claim different
        runs. A lapsed replica whose runs were all taken is forgotten."""
        lapsed = [name for (name,) in cursor.execute(_LAPSED, (now, replica)).fetchall()]
        claimed: list[StoredRun] = []
        for owner in ([replica] if mine else []) + sorted(lapsed):
            rows = cursor.execute(_CLAIM, (replica, owner, limit - len(claimed))).fetchall()
            claimed += [folded(cursor, stored_run(row)) for row in rows]
            if len(claimed) >= limit:
                break
            if owner != replica:  # every run of it taken (or held by a write: taken next time)
                cursor.execute(_FORGET, (owner, now, owner))
        return sorted(claimed, key=lambda run: run.first_seen)

    def owned(self, cursor: Cursor, replica: str) -> dict[str, tuple[int, bool]]:
        """The runs `replica` owns that are not admitted yet, with the writes that touched each
        (`RunVersion.writes`) and whether they are final (through the index of owners of runs
        not admitted)."""
        rows = cursor.execute(_OWNED, (replica,)).fetchall()
        return {run_id: (version, bool(final)) for run_id, version, final in rows}

    def beat(self, cursor: Cursor, replica: str, until: float) -> None:
        """Renew `replica`'s heartbeat: it is alive, and owns its runs, until `until` (one row,
        however many runs it owns)."""
        cursor.execute(_BEAT, (replica, until))

    def release(self, cursor: Cursor, replica: str) -> None:
        """Let `replica`'s heartbeat lapse now (a replica that stops): its runs are taken over at
        the other replicas' next look."""
        self.beat(cursor, replica, 0.0)

    def written_since(
        self, cursor: Cursor, run_id: str, version: RunVersion, upto: RunVersion
    ) -> list[SqlRow]:
        """The trials of a run other replicas than its owner stored (relayed) by their writes
        after `version` up to `upto`, as `evidence_of` reads them: part by part, each in the
        order its writes committed."""
        rows = []
        for part, writes in upto.parts:
            since = version.of(part)
            if writes > since:
                bounds = (batch_number(part, since), batch_number(part, writes))
                rows += cursor.execute(_WRITTEN_SINCE, (run_id, *bounds)).fetchall()
        return rows
