"""The store's tables and indexes, and bringing a store made by an earlier release up to date
when it is opened: its recorded schema version read first, without a lock, and nothing done
when it is current."""

from __future__ import annotations

import logging
import re

import msgspec

from ...otel.framework_traces import TrialMark
from ...span_facts import SpanFacts
from .connection import Cursor, Database

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""The schema this release makes. Raise it whenever SCHEMA, ADDED_COLUMNS or the indexes change:
a store that records this version (or a later one) is opened without any DDL or lock."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL     -- one row per migration that completed; the highest is current
);
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
    lease_until REAL,            -- when its owner's claim lapses unless renewed
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
    "CREATE INDEX IF NOT EXISTS runs_claimable ON runs (lease_until) WHERE status IS NULL",
    "CREATE INDEX IF NOT EXISTS runs_owned ON runs (owner) WHERE status IS NULL",
)
"""Open runs (the tick's cost follows the work in flight, not the store's history), finished
runs by age (retention deletes the oldest without a scan), and every run in listing order
(a page of `/v1/runs` reads that page only), traces by age and trials not yet settled by age
(settling and forgetting read what is due, not everything held), and the runs not yet admitted
by lease and by owner (claiming and renewing read open work only)."""
SHARED_INDEXES = ("CREATE INDEX IF NOT EXISTS trials_by_write ON trials (run_id, batch)",)
"""A shared store's: a replica reads the trials other replicas wrote to its runs since it
last looked (a store of one process never needs to)."""

WAITING, MARKED = 0, 1
"""A trace's state: no trial span yet, a trial span held."""

_FACTS = msgspec.msgpack.Decoder(SpanFacts)
_MARK = msgspec.msgpack.Decoder(TrialMark)


def migrate(database: Database) -> tuple[str, ...]:
    """Bring the store to SCHEMA_VERSION. A store that records it is read and left alone: no
    DDL, no lock. Otherwise, one process at a time (`Database.migrating`): the tables and
    columns it lacks (columns filled in for the rows it holds) in one transaction, which locks
    the tables it alters and says so in a log line first; the indexes it lacks, built on a live
    store without blocking its writers (`Database.build_index`); then the version. What was
    done to an existing store, a line per step."""
    if _current(database):
        return ()
    with database.migrating():
        if _current(database):  # another replica migrated it while this one waited
            return ()
        done, created = _migrate_tables(database)
        with database.locked() as cursor:
            present = database.indexes(cursor)
        built = []
        for table, index, statement in _indexes(database):
            if index not in present and table not in created:
                database.build_index(index, statement)
                built.append(index)
        if built:
            done.append(f"indexes {', '.join(built)} built")
        with database.transaction() as cursor:
            cursor.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
    return tuple(done)


def _current(database: Database) -> bool:
    """Whether the store records SCHEMA_VERSION or a later one (read, without a lock)."""
    with database.locked() as cursor:
        if "schema_version" not in database.tables(cursor):
            return False
        (version,) = cursor.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return version is not None and version >= SCHEMA_VERSION


def _migrate_tables(database: Database) -> tuple[list[str], set[str]]:
    """Create the tables the store lacks, with their indexes, and add the columns it lacks, in
    one transaction; what was done to the tables it had, and the tables created."""
    with database.transaction() as cursor:
        present = database.tables(cursor)
        created = set()
        for statement in re.sub(r"--[^\n]*", "", SCHEMA).split(";"):
            named = re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", statement)
            if named is not None and named.group(1) not in present:
                cursor.execute(statement)
                created.add(named.group(1))
        for table, _, statement in _indexes(database):
            if table in created:  # no other process sees it before this commit
                cursor.execute(statement)
        added = _add_columns(database, cursor, present)
        _migrate_held(cursor, {column for columns in added.values() for column in columns})
        if "finished_at" in added.get("runs", ()):  # runs finished before `finished_at`
            cursor.execute(
                "UPDATE runs SET finished_at = last_seen WHERE final = 1 AND finished_at IS NULL"
            )
    done = [f"{table} gained {', '.join(columns)} (locked)" for table, columns in added.items()]
    if present - {"schema_version"} and created:  # a store made by an earlier release
        done.append(f"{', '.join(sorted(created))} created")
    return done, created


def _add_columns(database: Database, cursor: Cursor, tables: set[str]) -> dict[str, list[str]]:
    """Add the ADDED_COLUMNS the `tables` lack (a log line first: the tables stay locked until
    the migration commits); the columns added, by table."""
    missing = {
        table: [column for column in columns if column not in database.columns(cursor, table)]
        for table, columns in ADDED_COLUMNS.items()
        if table in tables
    }
    missing = {table: columns for table, columns in missing.items() if columns}
    if missing:
        logger.warning(
            "migrating the store: adding columns locks %s until the migration commits (writes "
            "to them wait meanwhile)",
            ", ".join(sorted(missing)),
        )
    for table, columns in missing.items():
        for column in columns:
            cursor.execute(
                f"ALTER TABLE {table} ADD COLUMN {column} {ADDED_COLUMNS[table][column]}"
            )
    return missing


def _indexes(database: Database) -> list[tuple[str, str, str]]:
    """The store's indexes: (table, index, statement)."""
    statements = INDEXES + (SHARED_INDEXES if database.shared else ())
    named = [re.search(r"EXISTS (\w+) ON (\w+)", statement) for statement in statements]
    return [
        (match.group(2), match.group(1), statement)
        for match, statement in zip(named, statements, strict=True)
        if match is not None
    ]


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
