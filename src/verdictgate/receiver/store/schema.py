"""The store's tables and indexes, and bringing a store made by an earlier release up to date
when it is opened: its recorded schema version read first, without a lock, and nothing done
when it is current. The tables' statements stand in both dialects side by side (their column
types differ); the rest is SQL both take."""

from __future__ import annotations

import logging

import msgspec

from ...otel.framework_traces import TrialMark
from ...span_facts import SpanFacts
from .claims import LOCAL
from .connection import Cursor, Database
from .statements import Each, Index, index, sql
from .trial_days import partition_existing, partition_new

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 3
"""The schema this release makes. Raise it whenever TABLES, ADDED_COLUMNS or the indexes change:
a store that records this version (or a later one) is opened without any DDL or lock."""

TABLES = {
    "schema_version": sql(
        "CREATE TABLE IF NOT EXISTS schema_version (",
        Each("version INTEGER NOT NULL", "version BIGINT NOT NULL"),
        ")  -- one row per migration that completed; the highest is current",
    ),
    "runs": sql(
        Each(
            sqlite="""CREATE TABLE IF NOT EXISTS runs (
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
    framework INTEGER NOT NULL DEFAULT 0, -- 1 once a trial of it came from framework spans
    day INTEGER NOT NULL DEFAULT 0 -- the day it was first seen, its trials' (0: before days)
)""",
            postgres="""CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    suite TEXT,
    point TEXT,
    declaration TEXT,
    planned_trials BIGINT,
    declared_at DOUBLE PRECISION,
    first_seen DOUBLE PRECISION NOT NULL,
    last_seen DOUBLE PRECISION NOT NULL,
    status TEXT,
    final BIGINT NOT NULL DEFAULT 0,
    received BIGINT NOT NULL DEFAULT 0,
    late BIGINT NOT NULL DEFAULT 0,
    declaration_conflict BIGINT NOT NULL DEFAULT 0,
    finished_at DOUBLE PRECISION,
    owner TEXT,
    lease_until DOUBLE PRECISION,
    version BIGINT NOT NULL DEFAULT 0,
    framework BIGINT NOT NULL DEFAULT 0,
    day BIGINT NOT NULL DEFAULT 0
)""",
        )
    ),
    "trials": sql(
        Each(
            sqlite="""CREATE TABLE IF NOT EXISTS trials (
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
    day INTEGER NOT NULL DEFAULT 0, -- its run's: PostgreSQL's partition (SQLite's one table)
    PRIMARY KEY (run_id, case_id, trial)
) WITHOUT ROWID""",
            postgres="""CREATE TABLE IF NOT EXISTS trials (
    run_id TEXT NOT NULL,
    case_id TEXT NOT NULL,
    trial BIGINT NOT NULL,
    decision TEXT,
    expected TEXT,
    error_type TEXT,
    duplicates BIGINT NOT NULL DEFAULT 0,
    conflict BIGINT NOT NULL DEFAULT 0,
    batch BIGINT NOT NULL,
    latency_ms DOUBLE PRECISION,
    passed BIGINT,
    tiers TEXT,
    day BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, case_id, trial, day)
) PARTITION BY RANGE (day)""",
        )
    ),
    "traces": sql(
        Each(
            sqlite="""CREATE TABLE IF NOT EXISTS traces (
    trace_id TEXT PRIMARY KEY,   -- a trace holding framework spans or a harness's trial span
    last_seen REAL NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,  -- 0 no trial span yet, 1 a trial span held
    spans INTEGER NOT NULL DEFAULT 0   -- framework spans it holds
)""",
            postgres="""CREATE TABLE IF NOT EXISTS traces (
    trace_id TEXT PRIMARY KEY,
    last_seen DOUBLE PRECISION NOT NULL,
    state BIGINT NOT NULL DEFAULT 0,
    spans BIGINT NOT NULL DEFAULT 0
)""",
        )
    ),
    "trace_spans": sql(
        Each(
            sqlite="""CREATE TABLE IF NOT EXISTS trace_spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    facts BLOB NOT NULL,         -- SpanFacts, msgpack: names only, never content
    parent_id TEXT,              -- the facts' parent, to find a span's trial without decoding
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID""",
            postgres="""CREATE TABLE IF NOT EXISTS trace_spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    facts BYTEA NOT NULL,
    parent_id TEXT,
    PRIMARY KEY (trace_id, span_id)
)""",
        )
    ),
    "trial_marks": sql(
        Each(
            sqlite="""CREATE TABLE IF NOT EXISTS trial_marks (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    mark BLOB NOT NULL,          -- TrialMark, msgpack
    run_id TEXT,                 -- the trial's run (the mark's), to find the runs a backlog holds
    amended INTEGER NOT NULL DEFAULT 0,  -- 1 once a span came below it after it settled
    last_seen REAL,              -- when the trial span or the last span below it arrived
    arrived REAL,                -- when the trial span arrived (it settles by arrived + max hold)
    settled INTEGER NOT NULL DEFAULT 0,  -- 1 once its trial is stored
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID""",
            postgres="""CREATE TABLE IF NOT EXISTS trial_marks (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    mark BYTEA NOT NULL,
    run_id TEXT,
    amended BIGINT NOT NULL DEFAULT 0,
    last_seen DOUBLE PRECISION,
    arrived DOUBLE PRECISION,
    settled BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (trace_id, span_id)
)""",
        )
    ),
    "settled_spans": sql(
        Each(
            sqlite="""CREATE TABLE IF NOT EXISTS settled_spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,       -- a span below a settled trial: its facts are let go
    mark TEXT NOT NULL,          -- that trial's span id, to count a late copy below it
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID""",
            postgres="""CREATE TABLE IF NOT EXISTS settled_spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    mark TEXT NOT NULL,
    PRIMARY KEY (trace_id, span_id)
)""",
        )
    ),
    "replicas": sql(
        """CREATE TABLE IF NOT EXISTS replicas (
    name TEXT PRIMARY KEY,       -- a replica of a shared store (`local` for a store of one process)
    alive_until """,
        Each("REAL", "DOUBLE PRECISION"),
        """ NOT NULL  -- its heartbeat: it owns its runs until then unless renewed
)""",
    ),
    "outbox": sql(
        Each(
            sqlite="""CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    final INTEGER NOT NULL,      -- 0 for a canary window's interim admission
    body TEXT NOT NULL,          -- a AdmissionRecord, JSON
    sent INTEGER NOT NULL DEFAULT 0, -- the signals already delivered (bits)
    claimed_by TEXT,             -- the replica delivering it
    claim_until REAL             -- when that claim lapses
)""",
            postgres="""CREATE TABLE IF NOT EXISTS outbox (
    seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    run_id TEXT NOT NULL,
    final BIGINT NOT NULL,
    body TEXT NOT NULL,
    sent BIGINT NOT NULL DEFAULT 0,
    claimed_by TEXT,
    claim_until DOUBLE PRECISION
)""",
        )
    ),
}
"""The tables, by name: SQLite's text says what each column holds."""

_INTEGER = Each("INTEGER", "BIGINT")
_REAL = Each("REAL", "DOUBLE PRECISION")  # PostgreSQL's REAL is 4 bytes
_FLAG = Each("INTEGER NOT NULL DEFAULT 0", "BIGINT NOT NULL DEFAULT 0")
"""The types of the columns added, in each dialect."""
_ADDED: dict[str, dict[str, str | Each]] = {
    "trials": {"latency_ms": _REAL, "passed": _INTEGER, "tiers": "TEXT", "day": _FLAG},
    "trace_spans": {"parent_id": "TEXT"},
    "trial_marks": {
        "last_seen": _REAL,
        "arrived": _REAL,
        "settled": _FLAG,
        "run_id": "TEXT",
        "amended": _FLAG,
    },
    "traces": {"spans": _FLAG},
    "runs": {
        "late": _FLAG,
        "declaration_conflict": _FLAG,
        "finished_at": _REAL,
        "owner": "TEXT",
        "lease_until": _REAL,
        "version": _FLAG,
        "framework": _FLAG,
        "day": _FLAG,
    },
    "outbox": {"claimed_by": "TEXT", "claim_until": _REAL},
}
ADDED_COLUMNS = {
    table: {
        column: sql(f"ALTER TABLE {table} ADD COLUMN {column} ", kind)
        for column, kind in columns.items()
    }
    for table, columns in _ADDED.items()
}
"""Columns added after the first release, by table, each with its `ALTER TABLE`: a store made
before them gains them on open."""
INDEXES = (
    index("runs_open", "runs", "(first_seen) WHERE final = 0"),
    index("runs_finished", "runs", "(finished_at) WHERE final = 1"),
    index("runs_listed", "runs", "(first_seen, run_id)"),
    index("runs_latest", "runs", "(suite, point, finished_at) WHERE final = 1"),
    index("traces_by_age", "traces", "(last_seen)"),
    index("traces_holding", "traces", "(last_seen) WHERE spans > 0"),
    index("marks_due", "trial_marks", "(last_seen) WHERE settled = 0"),
    index("marks_held", "trial_marks", "(arrived) WHERE settled = 0"),
    index("traces_unmarked", "traces", "(last_seen) WHERE state = 0"),
    index("runs_owned", "runs", "(owner) WHERE status IS NULL"),
)
"""Open runs (the tick's cost follows the work in flight, not the store's history), finished
runs by age (retention deletes the oldest without a scan), and every run in listing order
(a page of `/v1/runs` reads that page only), traces by age and trials not yet settled by age
(settling and forgetting read what is due, not everything held), and the runs not yet admitted
by owner (claiming reads open work only)."""
SHARED_INDEXES = (
    index("trials_by_write", "trials", "(run_id, batch)"),
    index("runs_by_day", "runs", "(day)"),
)
"""A shared store's: a replica reads the trials other replicas wrote to its runs since it
last looked (a store of one process never needs to), and retention finds a day's runs (its
trials' partition is dropped whole)."""

WAITING, MARKED = 0, 1
"""A trace's state: no trial span yet, a trial span held."""

_FACTS = msgspec.msgpack.Decoder(SpanFacts)
_MARK = msgspec.msgpack.Decoder(TrialMark)

_VERSION = sql("SELECT MAX(version) FROM schema_version")
_RECORD_VERSION = sql("INSERT INTO schema_version (version) VALUES (?)")
_OWNERLESS = sql("UPDATE runs SET owner = ? WHERE owner IS NULL AND status IS NULL")
"""The open runs of a store made before runs had owners: given one whose heartbeat lapsed at
once, they are claimed by the first replica to look."""
_LEASES_TO_HEARTBEATS = sql(
    "INSERT INTO replicas (name, alive_until) SELECT owner, MAX(COALESCE(lease_until, 0))"
    " FROM runs WHERE status IS NULL AND owner IS NOT NULL GROUP BY owner"
)
_FINISHED_AT = sql(
    "UPDATE runs SET finished_at = last_seen WHERE final = 1 AND finished_at IS NULL"
)
_MARKS_ARRIVED = sql(
    "UPDATE trial_marks SET arrived = (SELECT last_seen FROM traces t WHERE"
    " t.trace_id = trial_marks.trace_id), last_seen = (SELECT last_seen FROM traces t"
    " WHERE t.trace_id = trial_marks.trace_id) WHERE arrived IS NULL"
)
_TRACES_MARKED = sql("UPDATE traces SET state = ? WHERE state = 2")
_TRACES_SPANS = sql(
    "UPDATE traces SET spans = (SELECT COUNT(*) FROM trace_spans s WHERE"
    " s.trace_id = traces.trace_id)"
)
_MARKS_UNSETTLED = sql("SELECT trace_id, span_id, mark FROM trial_marks WHERE settled = 0")
_MARK_RUN = sql("UPDATE trial_marks SET run_id = ? WHERE trace_id = ? AND span_id = ?")
_SPANS = sql("SELECT trace_id, span_id, facts FROM trace_spans")
_SPAN_PARENT = sql("UPDATE trace_spans SET parent_id = ? WHERE trace_id = ? AND span_id = ?")


def migrate(database: Database) -> tuple[str, ...]:
    """Bring the store to SCHEMA_VERSION. A store that records it is read and left alone: no
    DDL, no lock. Otherwise, one process at a time (`Database.migrating`): the tables and
    columns it lacks (columns filled in for the rows it holds) in one transaction, which locks
    the tables it alters and says so in a log line first; the indexes it lacks, built on a live
    store without blocking its writers (`Database.build_index`); a PostgreSQL store's trials
    partitioned by day (`trial_days.partition_existing`, version 3); then the version. What was
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
        for missing in _indexes(database):
            if missing.name not in present and missing.table not in created:
                database.build_index(missing)
                built.append(missing.name)
        if built:
            done.append(f"indexes {', '.join(built)} built")
        if database.shared and "trials" not in created:
            trials = tuple(made for made in _indexes(database) if made.table == "trials")
            if (partitioned := partition_existing(database, TABLES["trials"], trials)) is not None:
                done.append(partitioned)
        with database.transaction() as cursor:
            cursor.execute(_RECORD_VERSION, (SCHEMA_VERSION,))
    return tuple(done)


def _current(database: Database) -> bool:
    """Whether the store records SCHEMA_VERSION or a later one (read, without a lock)."""
    with database.locked() as cursor:
        if "schema_version" not in database.tables(cursor):
            return False
        (version,) = cursor.execute(_VERSION).fetchone()
    return version is not None and version >= SCHEMA_VERSION


def _migrate_tables(database: Database) -> tuple[list[str], set[str]]:
    """Create the tables the store lacks, with their indexes, and add the columns it lacks, in
    one transaction; what was done to the tables it had, and the tables created. A store made
    before heartbeats keeps its runs' owners alive while their leases hold (runs without an
    owner get one already lapsed)."""
    with database.transaction() as cursor:
        present = database.tables(cursor)
        created = {table for table in TABLES if table not in present}
        for table in created:
            cursor.execute(TABLES[table])
        if database.shared and "trials" in created:
            partition_new(cursor)
        for made in _indexes(database):
            if made.table in created:  # no other process sees it before this commit
                cursor.execute(made.create)
        added = _add_columns(database, cursor, present)
        _migrate_held(cursor, {column for columns in added.values() for column in columns})
        if "finished_at" in added.get("runs", ()):  # runs finished before `finished_at`
            cursor.execute(_FINISHED_AT)
        if "replicas" in created and "runs" in present:
            cursor.execute(_OWNERLESS, (LOCAL,))
            cursor.execute(_LEASES_TO_HEARTBEATS)
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
            cursor.execute(ADDED_COLUMNS[table][column])
    return missing


def _indexes(database: Database) -> tuple[Index, ...]:
    """The store's indexes (a shared store's, with those only replicas need)."""
    return INDEXES + (SHARED_INDEXES if database.shared else ())


def _migrate_held(cursor: Cursor, added: set[str]) -> None:
    """What a store made before trials were keyed by their trial span held, brought to the new
    keying: marks get their arrival (their trace's last span), traces their span counts and
    spans their parent; a trace that release had settled is one whose trials are all settled
    (it took no spans since)."""
    if "arrived" in added:
        cursor.execute(_MARKS_ARRIVED)
        cursor.execute(_TRACES_MARKED, (MARKED,))
    if "spans" in added:
        cursor.execute(_TRACES_SPANS)
    if "run_id" in added:  # the trials still to settle: the settled ones need no run
        rows = cursor.execute(_MARKS_UNSETTLED).fetchall()
        cursor.executemany(
            _MARK_RUN, [(_MARK.decode(mark).run, trace, span) for trace, span, mark in rows]
        )
    if "parent_id" in added:
        rows = cursor.execute(_SPANS).fetchall()
        cursor.executemany(
            _SPAN_PARENT,
            [(_FACTS.decode(facts).parent_id, trace, span) for trace, span, facts in rows],
        )
