"""A run read back from its rows: the `runs` row (RUN_COLUMNS) and, until it is admitted, the
counts of its parts folded in."""

from __future__ import annotations

from dataclasses import replace

from .connection import Cursor, SqlRow
from .records import RunVersion, StoredRun
from .statements import Statement, sql

RUN_COLUMNS = (
    "run_id, suite, point, declaration, planned_trials, declared_at, first_seen, last_seen,"
    " status, final, received, late, declaration_conflict, owner, version, framework"
)
"""The columns `stored_run` reads, in its order (a run not yet admitted has its parts' counts
folded in by `folded`)."""
PART_COLUMNS = "part, writer, writes, received, room, last_seen"
"""The columns of a run's part `fold` reads, in its order."""
PARTS = sql(f"SELECT {PART_COLUMNS} FROM run_parts WHERE run_id = ? ORDER BY part")


def runs_where(clauses: str) -> Statement:
    """The statement that selects the runs a `WHERE ... ORDER BY ... LIMIT` text says, as
    `select_runs` reads them."""
    return sql(f"SELECT {RUN_COLUMNS} FROM runs {clauses}")


def select_runs(
    cursor: Cursor, statement: Statement, parameters: tuple[object, ...] = ()
) -> list[StoredRun]:
    """The runs a statement of `runs_where` selects, with their parts folded in."""
    rows = cursor.execute(statement, parameters).fetchall()
    return [folded(cursor, stored_run(row)) for row in rows]


def folded(cursor: Cursor, run: StoredRun) -> StoredRun:
    """A run as its row and its parts make it: the trials they stored, their latest news, and
    the writes of each part (its version). An admitted run's row holds them already."""
    if run.status is not None:
        return run
    return fold(run, cursor.execute(PARTS, (run.run_id,)).fetchall())


def fold(run: StoredRun, parts: list[SqlRow]) -> StoredRun:
    """A run's row with its parts' counts folded in (`PART_COLUMNS` each)."""
    if not parts:
        return run
    return replace(
        run,
        received=run.received + sum(row[3] for row in parts),
        last_seen=max(run.last_seen, *(row[5] for row in parts)),
        version=RunVersion(run.version.parts + tuple((row[0], row[2]) for row in parts)),
    )


def stored_run(row: SqlRow) -> StoredRun:
    """A row of RUN_COLUMNS as the run it records (its parts not folded in)."""
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
        version=RunVersion(((0, row[14]),)),
        framework=bool(row[15]),
    )
