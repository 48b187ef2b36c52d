"""Runs and their trials: runs seen and declared, trials stored while their run has room (first
record wins, repeats counted), late records counted, and runs closed and admitted."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ...otel import conventions as names
from ...trial_model import Trial
from ...wire_types import AttributeValue
from .connection import Cursor, SqlRow
from .records import StoredRun
from .statements import IS_DISTINCT_FROM, IS_NOT_DISTINCT_FROM, Statement, insert_rows, sql
from .trial_days import day_of
from .trial_rows import TrialBatch, TrialRow, repeats

RUN_COLUMNS = (
    "run_id, suite, point, declaration, planned_trials, declared_at, first_seen, last_seen,"
    " status, final, received, late, declaration_conflict, owner, version, framework"
)
"""The columns `stored_run` reads, in its order."""

Claim = tuple[str, float]
"""A replica's claim on the runs a write opens: its name, and until when its heartbeat holds."""

_RUN_BY_ID = sql(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?")
_UNCLAIMED = (
    "runs.final = 0 AND NOT EXISTS (SELECT 1 FROM replicas WHERE replicas.name = runs.owner"
    " AND replicas.alive_until >= excluded.first_seen)"
)
_SEEN = sql(
    "INSERT INTO runs (run_id, suite, point, first_seen, last_seen, owner, day, version)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, 1)"
    " ON CONFLICT (run_id) DO UPDATE SET last_seen = excluded.last_seen,"
    " suite = COALESCE(runs.suite, excluded.suite),"
    " point = COALESCE(runs.point, excluded.point),"
    " version = runs.version + 1,"
    f" owner = CASE WHEN {_UNCLAIMED} THEN excluded.owner ELSE runs.owner END"
    " RETURNING version"
)
"""A run seen by a write: made if new, its version (the write's number for it) counted up, and
claimed by the writing replica when its owner is not alive (its heartbeat lapsed); a new run's
day (`day_of`) is the one its trials are stored under."""
_INSERT = insert_rows(
    "trials",
    {
        "run_id": "text",
        "case_id": "text",
        "trial": "bigint",
        "decision": "text",
        "expected": "text",
        "error_type": "text",
        "latency_ms": "double precision",
        "passed": "bigint",
        "tiers": "text",
        "batch": "bigint",
        "day": "bigint",
    },
    " ON CONFLICT DO NOTHING",
)
_REPEAT = sql(
    "UPDATE trials SET duplicates = duplicates + CASE WHEN decision",
    IS_NOT_DISTINCT_FROM,
    "? THEN 1 ELSE 0 END, conflict = CASE WHEN decision",
    IS_DISTINCT_FROM,
    "? THEN 1 ELSE conflict END WHERE run_id = ? AND case_id = ? AND trial = ? AND batch != ?",
)
"""A record whose identity an earlier write already holds: a duplicate, or a conflict."""
TRIAL_COLUMNS = (
    "case_id, trial, decision, expected, error_type, duplicates, conflict, latency_ms, passed,"
    " tiers"
)
"""A stored trial's columns as `evidence_of` reads them."""
_LATE = sql("UPDATE runs SET late = late + ? WHERE run_id = ?")
_HEARD = sql(
    "UPDATE runs SET last_seen = ?, version = version + 1 WHERE run_id = ? AND final = 0"
    " RETURNING version"
)
"""News of an open run that is not a trial (a span of a trial still settling)."""
_FRAMEWORK = sql("UPDATE runs SET framework = 1 WHERE run_id = ? AND framework = 0")
_AMEND = sql(
    "UPDATE trials SET decision = ?, expected = ?, error_type = ?, latency_ms = ?, passed = ?,"
    " tiers = ?, batch = ? WHERE run_id = ? AND case_id = ? AND trial = ?"
)
"""A framework trial derived again from all its spans (one came after it settled)."""
_LATE_DECLARATION = sql(
    "UPDATE runs SET late = late + 1 WHERE run_id = ? AND final = 1 AND declaration",
    IS_DISTINCT_FROM,
    "?",
)
_DECLARE = sql(
    "UPDATE runs SET declaration = ?, planned_trials = ?, declared_at = ?,"
    " suite = COALESCE(?, suite), point = COALESCE(?, point)"
    " WHERE run_id = ? AND declaration IS NULL AND final = 0"
)
_DECLARATION_CONFLICT = sql(
    "UPDATE runs SET declaration_conflict = 1 WHERE run_id = ? AND final = 0 AND declaration != ?"
)
_ROOM = sql("SELECT final, received, day FROM runs WHERE run_id = ?")
_FINAL = sql("SELECT final FROM runs WHERE run_id = ?")
_TRIALS = sql(f"SELECT {TRIAL_COLUMNS} FROM trials WHERE run_id = ? ORDER BY case_id, trial")
_TRIALS_UPTO = sql(
    f"SELECT {TRIAL_COLUMNS} FROM trials WHERE run_id = ? AND batch <= ? ORDER BY case_id, trial"
)
_CLOSE = sql("UPDATE runs SET final = 1 WHERE run_id = ? AND final = 0 AND owner = ?")
_ADMIT = sql(
    "UPDATE runs SET status = ?, final = 1, finished_at = ?,"
    " declaration = COALESCE(declaration, ?) WHERE run_id = ? AND status IS NULL"
)
_STATUS = sql("SELECT status FROM runs WHERE run_id = ?")
_RECEIVED = sql("UPDATE runs SET received = received + ? WHERE run_id = ?")


class Runs:
    """The `runs` and `trials` tables, on the cursor of the caller's transaction or read."""

    def see(
        self,
        cursor: Cursor,
        touched: Iterable[str],
        heard: Iterable[str],
        late: dict[str, int],
        labels: dict[str, tuple[str | None, str | None]],
        now: float,
        claim: Claim,
    ) -> dict[str, int]:
        """Lock and record every run a write changes, in one pass in one order (so that writers
        never deadlock): the runs its trials or run spans `touched`, seen `now` (a new one
        labelled with its (suite, point) when given, and claimed by `claim` when its owner is
        not alive; a known run keeps its labels); the open runs of trials still settling that got
        spans (`heard`: seen too); and the runs with records `late` (counted). Each touched or
        heard run's version after this write."""
        touched, heard = set(touched), set(heard)
        versions = {}
        for run_id in sorted(touched | heard | set(late)):
            if run_id in touched:
                suite, point = labels.get(run_id, (None, None))
                cursor.execute(_SEEN, (run_id, suite, point, now, now, claim[0], day_of(now)))
                versions[run_id] = cursor.fetchone()[0]
            elif run_id in heard:
                cursor.execute(_HEARD, (now, run_id))
                if (row := cursor.fetchone()) is not None:
                    versions[run_id] = row[0]
            if late.get(run_id):
                cursor.execute(_LATE, (late[run_id], run_id))
        return versions

    def mark_framework(self, cursor: Cursor, run_ids: Iterable[str]) -> None:
        """Note runs whose trials come from framework spans (a late span may amend them), among
        those a write locked already."""
        cursor.executemany(_FRAMEWORK, [(run_id,) for run_id in sorted(run_ids)])

    def declare(self, cursor: Cursor, attributes: dict[str, AttributeValue], now: float) -> None:
        """The first run span of a run declares it; a later, different one is an integrity
        conflict (the first stays), an identical one a harmless repeat. A run that is final is
        frozen: a different run span then is only counted as late."""
        run_id, text = attributes[names.RUN_ID], json.dumps(attributes, sort_keys=True)
        cursor.execute(_LATE_DECLARATION, (run_id, text))
        if cursor.rowcount:
            return
        cursor.execute(
            _DECLARE,
            (
                text,
                attributes.get(names.PLAN_TRIALS),
                now,
                attributes.get(names.SUITE),
                attributes.get(names.POINT),
                run_id,
            ),
        )
        if cursor.rowcount == 0:
            cursor.execute(_DECLARATION_CONFLICT, (run_id, text))

    def take(
        self,
        cursor: Cursor,
        batch: TrialBatch,
        max_trials: int | None,
        versions: dict[str, int],
    ) -> tuple[dict[str, int], dict[str, list[Trial]]]:
        """Store each run's trials as far as it has room (`max_trials`; a final run's are only
        counted late) under the run's `versions` number; per run, the trials refused and the
        trials taken. Each run keeps a count of its stored trials, so no write scans a run; its
        room is read and used here."""
        refused: dict[str, int] = {}
        accepted: dict[str, list[Trial]] = {}
        for run_id, rows in batch.rows.items():
            cursor.execute(_ROOM, (run_id,))
            final, received, day = cursor.fetchone()
            if max_trials is not None and len(rows) > max_trials - received:
                room = max(0, max_trials - received)
                refused[run_id] = len(rows) - room
                rows = rows[:room]
            if final:  # its admission is frozen: count, never store
                cursor.execute(_LATE, (len(rows), run_id))
                continue
            accepted[run_id] = batch.given[run_id][: len(rows)]
            _insert(cursor, run_id, rows, versions[run_id], day)
        return refused, accepted

    def amend(
        self, cursor: Cursor, batch: TrialBatch, versions: dict[str, int]
    ) -> tuple[dict[str, list[Trial]], list[Trial]]:
        """Replace the stored records of framework trials derived again (a span came after they
        settled) while their run is open, under the run's `versions` number; per run the trials
        replaced, and the trials with no record to replace (to store as new ones)."""
        amended: dict[str, list[Trial]] = {}
        new: list[Trial] = []
        for run_id, rows in batch.rows.items():
            cursor.execute(_FINAL, (run_id,))
            if cursor.fetchone()[0]:
                cursor.execute(_LATE, (len(rows), run_id))
                continue
            for row, trial in zip(rows, batch.given[run_id], strict=True):
                cursor.execute(_AMEND, (*row[3:], versions[run_id], *row[:3]))
                if cursor.rowcount:
                    amended.setdefault(run_id, []).append(trial)
                else:
                    new.append(trial)
        return amended, new

    def run(self, cursor: Cursor, run_id: str) -> StoredRun | None:
        """One run, or None when unknown."""
        row = cursor.execute(_RUN_BY_ID, (run_id,)).fetchone()
        return None if row is None else stored_run(row)

    def runs(self, cursor: Cursor, run_ids: Iterable[str]) -> list[StoredRun]:
        """Known runs, as they stand, in the order given."""
        return [stored_run(cursor.execute(_RUN_BY_ID, (run_id,)).fetchone()) for run_id in run_ids]

    def trial_rows(self, cursor: Cursor, run_id: str, upto: int | None = None) -> list[SqlRow]:
        """Every kept trial of a run as `evidence_of` reads it, by case and trial; with `upto`,
        those its writes up to that version stored."""
        if upto is None:
            return cursor.execute(_TRIALS, (run_id,)).fetchall()
        return cursor.execute(_TRIALS_UPTO, (run_id, upto)).fetchall()

    def close(self, cursor: Cursor, run_ids: Iterable[str], owner: str) -> list[str]:
        """Make final the runs `owner` holds, their admission still to be made; those made so
        (a run another replica took over is not)."""
        closed = []
        for run_id in sorted(run_ids):  # in the order every writer locks runs
            cursor.execute(_CLOSE, (run_id, owner))
            if cursor.rowcount:
                closed.append(run_id)
        return closed

    def admit(
        self,
        cursor: Cursor,
        run_id: str,
        status: str,
        finished_at: float,
        declaration: str | None,
    ) -> bool:
        """Give a run its admission, final; False (nothing written) when it has one already. A
        run without a run span keeps `declaration` as what it was judged by."""
        cursor.execute(_ADMIT, (status, finished_at, declaration, run_id))
        return cursor.rowcount == 1

    def awaits_admission(self, cursor: Cursor, run_id: str) -> bool:
        """Whether a run is known and not admitted yet."""
        cursor.execute(_STATUS, (run_id,))
        row = cursor.fetchone()
        return row is not None and row[0] is None


def runs_where(clauses: str) -> Statement:
    """The statement that selects the runs a `WHERE ... ORDER BY ... LIMIT` text says, as
    `select_runs` reads them."""
    return sql(f"SELECT {RUN_COLUMNS} FROM runs {clauses}")


def select_runs(
    cursor: Cursor, statement: Statement, parameters: tuple[object, ...] = ()
) -> list[StoredRun]:
    """The runs a statement of `runs_where` selects."""
    return [stored_run(row) for row in cursor.execute(statement, parameters).fetchall()]


def stored_run(row: SqlRow) -> StoredRun:
    """A row of RUN_COLUMNS as the run it records."""
    return StoredRun(
        run_id=row[0],
        suite=row[1],
        point=row[2],
        declaration_json=row[3] or None,
        planned_trials=row[4],
        declared_at=row[5],
        first_seen=row[6],
        last_seen=row[7],
        status=row[8],
        final=bool(row[9]),
        received=row[10],
        late=row[11],
        declaration_conflict=bool(row[12]),
        owner=row[13],
        version=row[14],
        framework=bool(row[15]),
    )


def _insert(cursor: Cursor, run_id: str, rows: list[TrialRow], batch: int, day: int) -> None:
    """Store a run's trials (first record wins) under its day and count them received; repeated
    identities count as duplicates or conflicts of the stored ones."""
    cursor.executemany(_INSERT, [(*row, batch, day) for row in rows])
    inserted = cursor.rowcount
    cursor.execute(_RECEIVED, (inserted, run_id))
    if inserted < len(rows):  # repeated identities: count duplicates and conflicts
        cursor.executemany(_REPEAT, repeats(rows, batch))
