"""The store's tables and indexes, and bringing a store made by an earlier release up to date
when it is opened."""

from __future__ import annotations

import re

import msgspec

from ...otel.framework_traces import TrialMark
from ...span_facts import SpanFacts
from .connection import Cursor, Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    suite TEXT,
    point TEXT,
    declaration TEXT,            -- the run span's attributes, JSON; NULL until it arrives
    planned_trials INTEGER,
    declared_at REAL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    status TEXT,                 -- the latest admission
    final INTEGER NOT NULL DEFAULT 0,
    received INTEGER NOT NULL DEFAULT 0,
    late INTEGER NOT NULL DEFAULT 0,            -- records that arrived after the run was final
    declaration_conflict INTEGER NOT NULL DEFAULT 0, -- a second, different run span arrived
    finished_at REAL,            -- when the run became final
    owner TEXT,                  -- the replica that decides it (claimed with a lease)
    lease_until REAL,            -- before heartbeats (`replicas`): read once, when they came
    version INTEGER NOT NULL DEFAULT 0,  -- writes that touched it: a trial's batch is one
    framework INTEGER NOT NULL DEFAULT 0 -- 1 once a trial of it came from framework spans
);
CREATE TABLE IF NOT EXISTS trials (
    run_id TEXT NOT NULL,
    case_id TEXT NOT NULL,
    trial INTEGER NOT NULL,
    decision TEXT,               -- encoded key; NULL for an error trial
    expected TEXT,
    error_type TEXT,
    duplicates INTEGER NOT NULL DEFAULT 0,
    conflict INTEGER NOT NULL DEFAULT 0,
    batch INTEGER NOT NULL,      -- the write that inserted it
    latency_ms REAL,             -- the decision span's duration
    passed INTEGER,              -- verdictgate.passed: 1, 0, or NULL when no tier judged it
    tiers TEXT,                  -- JSON [failed, warned, skipped, tied, aliases, key_id] when an invariant broke, a tier was skipped, a path was tied or the case has further names
    PRIMARY KEY (run_id, case_id, trial)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS traces (
    trace_id TEXT PRIMARY KEY,   -- a trace holding framework spans or a harness's trial span
    last_seen REAL NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,  -- 0 no trial span yet, 1 a trial span held
    spans INTEGER NOT NULL DEFAULT 0   -- framework spans it holds
);
CREATE TABLE IF NOT EXISTS trace_spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    facts BLOB NOT NULL,         -- SpanFacts, msgpack: names only, never content
    parent_id TEXT,              -- the facts' parent, to find a span's trial without decoding
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trial_marks (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    mark BLOB NOT NULL,          -- TrialMark, msgpack
    run_id TEXT,                 -- the trial's run (the mark's), to find the runs a backlog holds
    amended INTEGER NOT NULL DEFAULT 0,  -- 1 once a span came below it after it settled
    last_seen REAL,              -- when the trial span or the last span below it arrived
    arrived REAL,                -- when the trial span arrived (it settles by arrived + max hold)
    settled INTEGER NOT NULL DEFAULT 0,  -- 1 once its trial is stored
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS settled_spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,       -- a span below a settled trial: its facts are let go
    mark TEXT NOT NULL,          -- that trial's span id, to count a late copy below it
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS replicas (
    name TEXT PRIMARY KEY,       -- a replica of a shared store (`local` for a store of one process)
    alive_until REAL NOT NULL    -- its heartbeat: it owns its runs until then unless renewed
);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    final INTEGER NOT NULL,      -- 0 for a canary window's interim admission
    body TEXT NOT NULL,          -- a AdmissionRecord, JSON
    sent INTEGER NOT NULL DEFAULT 0, -- the signals already delivered (bits)
    claimed_by TEXT,             -- the replica delivering it
    claim_until REAL             -- when that claim lapses
);
"""

ADDED_COLUMNS = {
    "trials": {"latency_ms": "REAL", "passed": "INTEGER", "tiers": "TEXT"},
    "trace_spans": {"parent_id": "TEXT"},
    "trial_marks": {
        "last_seen": "REAL",
        "arrived": "REAL",
        "settled": "INTEGER NOT NULL DEFAULT 0",
        "run_id": "TEXT",
        "amended": "INTEGER NOT NULL DEFAULT 0",
    },
    "traces": {"spans": "INTEGER NOT NULL DEFAULT 0"},
    "runs": {
        "late": "INTEGER NOT NULL DEFAULT 0",
        "declaration_conflict": "INTEGER NOT NULL DEFAULT 0",
        "finished_at": "REAL",
        "owner": "TEXT",
        "lease_until": "REAL",
        "version": "INTEGER NOT NULL DEFAULT 0",
        "framework": "INTEGER NOT NULL DEFAULT 0",
    },
    "outbox": {"claimed_by": "TEXT", "claim_until": "REAL"},
}
"""Columns added after the first release: a store made before them gains them on open."""
INDEXES = (
    "CREATE INDEX IF NOT EXISTS runs_open ON runs (first_seen) WHERE final = 0",
    "CREATE INDEX IF NOT EXISTS runs_finished ON runs (finished_at) WHERE final = 1",
    "CREATE INDEX IF NOT EXISTS runs_listed ON runs (first_seen, run_id)",
    "CREATE INDEX IF NOT EXISTS runs_latest ON runs (suite, point, finished_at) WHERE final = 1",
    "CREATE INDEX IF NOT EXISTS traces_by_age ON traces (last_seen)",
    "CREATE INDEX IF NOT EXISTS traces_holding ON traces (last_seen) WHERE spans > 0",
    "CREATE INDEX IF NOT EXISTS marks_due ON trial_marks (last_seen) WHERE settled = 0",
    "CREATE INDEX IF NOT EXISTS marks_held ON trial_marks (arrived) WHERE settled = 0",
    "CREATE INDEX IF NOT EXISTS traces_unmarked ON traces (last_seen) WHERE state = 0",
    "CREATE INDEX IF NOT EXISTS runs_owned ON runs (owner) WHERE status IS NULL",
)
"""Open runs (the tick's cost follows the work in flight, not the store's history), finished
runs by age (retention deletes the oldest without a scan), and every run in listing order
(a page of `/v1/runs` reads that page only), traces by age and trials not yet settled by age
(settling and forgetting read what is due, not everything held), and the runs not yet admitted
by owner (claiming reads open work only)."""
SHARED_INDEXES = ("CREATE INDEX IF NOT EXISTS trials_by_write ON trials (run_id, batch)",)
"""A shared store's: a replica reads the trials other replicas wrote to its runs since it
last looked (a store of one process never needs to)."""

WAITING, MARKED = 0, 1
"""A trace's state: no trial span yet, a trial span held."""

_FACTS = msgspec.msgpack.Decoder(SpanFacts)
_MARK = msgspec.msgpack.Decoder(TrialMark)


def migrate(database: Database) -> None:
    """Create what is missing: the tables, the columns added since the store was made (filled
    in for the rows it holds), and the indexes (one process at a time)."""
    with database.migrating() as cursor:
        _migrate(database, cursor)


def _migrate(database: Database, cursor: Cursor) -> None:
    beating = bool(database.columns(cursor, "replicas"))
    for statement in re.sub(r"--[^\n]*", "", SCHEMA).split(";"):
        if statement.strip():
            cursor.execute(statement)
    added = _add_columns(database, cursor)
    if not beating:  # a store made before heartbeats: its owners are alive while their leases
        cursor.execute(  # hold, as they were
            "INSERT INTO replicas (name, alive_until) SELECT owner, MAX(COALESCE(lease_until, 0))"
            " FROM runs WHERE status IS NULL AND owner IS NOT NULL GROUP BY owner"
        )
    _migrate_held(cursor, added)
    if "finished_at" in added:  # runs finished by a release before `finished_at`
        cursor.execute(
            "UPDATE runs SET finished_at = last_seen WHERE final = 1 AND finished_at IS NULL"
        )
    for index in INDEXES + (SHARED_INDEXES if database.shared else ()):
        cursor.execute(index)


def _add_columns(database: Database, cursor: Cursor) -> set[str]:
    """Add the ADDED_COLUMNS a table lacks; the columns added."""
    added = set()
    for table, columns in ADDED_COLUMNS.items():
        present = database.columns(cursor, table)
        for column, kind in columns.items():
            if column not in present:
                cursor.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                added.add(column)
    return added


def _migrate_held(cursor: Cursor, added: set[str]) -> None:
    """What a store made before trials were keyed by their trial span held, brought to the new
    keying: marks get their arrival (their trace's last span), traces their span counts and
    spans their parent; a trace that release had settled is one whose trials are all settled
    (it took no spans since)."""
    if "arrived" in added:
        cursor.execute(
            "UPDATE trial_marks SET arrived = (SELECT last_seen FROM traces t WHERE"
            " t.trace_id = trial_marks.trace_id), last_seen = (SELECT last_seen FROM traces t"
            " WHERE t.trace_id = trial_marks.trace_id) WHERE arrived IS NULL"
        )
        cursor.execute("UPDATE traces SET state = ? WHERE state = 2", (MARKED,))
    if "spans" in added:
        cursor.execute(
            "UPDATE traces SET spans = (SELECT COUNT(*) FROM trace_spans s WHERE"
            " s.trace_id = traces.trace_id)"
        )
    if "run_id" in added:  # the trials still to settle: the settled ones need no run
        rows = cursor.execute(
            "SELECT trace_id, span_id, mark FROM trial_marks WHERE settled = 0"
        ).fetchall()
        cursor.executemany(
            "UPDATE trial_marks SET run_id = ? WHERE trace_id = ? AND span_id = ?",
            [(_MARK.decode(mark).run, trace, span) for trace, span, mark in rows],
        )
    if "parent_id" in added:
        rows = cursor.execute("SELECT trace_id, span_id, facts FROM trace_spans").fetchall()
        cursor.executemany(
            "UPDATE trace_spans SET parent_id = ? WHERE trace_id = ? AND span_id = ?",
            [(_FACTS.decode(facts).parent_id, trace, span) for trace, span, facts in rows],
        )
