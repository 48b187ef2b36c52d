"""A run's trials in the `trials` table: stored (first record wins, repeated identities counted
as duplicates or conflicts), a framework trial's record replaced, and read back."""

from __future__ import annotations

from .connection import Cursor, SqlRow
from .records import RunVersion
from .statements import IS_DISTINCT_FROM, IS_NOT_DISTINCT_FROM, insert_rows, sql
from .trial_rows import TrialRow, repeats

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
        "relayed": "bigint",
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
_AMEND = sql(
    "UPDATE trials SET decision = ?, expected = ?, error_type = ?, latency_ms = ?, passed = ?,"
    " tiers = ?, batch = ?, relayed = ? WHERE run_id = ? AND case_id = ? AND trial = ?"
)
"""A framework trial derived again from all its spans (one came after it settled)."""
_TRIALS = sql(f"SELECT {TRIAL_COLUMNS} FROM trials WHERE run_id = ? ORDER BY case_id, trial")
_TRIALS_BATCHED = sql(
    f"SELECT {TRIAL_COLUMNS}, batch FROM trials WHERE run_id = ? ORDER BY case_id, trial"
)


def insert_trials(cursor: Cursor, rows: list[TrialRow], batch: int, day: int, relayed: bool) -> int:
    """Store a run's trials (first record wins) under a write's `batch` and its run's `day`,
    `relayed` unless the run's owner writes them; how many were stored. Repeated identities
    count as duplicates or conflicts of the stored ones."""
    cursor.executemany(_INSERT, rows, shared=(batch, day, int(relayed)))
    inserted = cursor.rowcount
    if inserted < len(rows):  # repeated identities: count duplicates and conflicts
        cursor.executemany(_REPEAT, repeats(rows, batch))
    return inserted


def amend_trial(cursor: Cursor, row: TrialRow, batch: int, relayed: bool) -> bool:
    """Replace a framework trial's stored record under a write's `batch`; False when no record
    of it is stored."""
    cursor.execute(_AMEND, (*row[3:], batch, int(relayed), *row[:3]))
    return bool(cursor.rowcount)


def trial_rows(cursor: Cursor, run_id: str, upto: RunVersion | None = None) -> list[SqlRow]:
    """Every kept trial of a run as `evidence_of` reads it, by case and trial; with `upto`,
    those its writes up to that version stored."""
    if upto is None:
        return cursor.execute(_TRIALS, (run_id,)).fetchall()
    rows = cursor.execute(_TRIALS_BATCHED, (run_id,)).fetchall()
    return [row[:-1] for row in rows if upto.holds(row[-1])]
