"""The durable trial store (SQLite, WAL): first record wins, conflicts kept, runs resumable."""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec

from ..declaration import RunDeclaration
from ..evidence import Evidence
from ..otel import conventions as names
from ..otel.framework_traces import FrameworkSpan, TrialMark
from ..otel.span_decoding import run_declaration
from ..span_facts import SpanFacts
from ..trial_model import Decision, NoDecision, Trial

SqlRow = tuple[Any, ...]  # a row as sqlite3 returns it: the values its columns hold
_TrialRow = tuple[
    str, str, int, str | None, str | None, str | None, int, float | None, bool | None, str | None
]
"""A trial as `_INSERT` stores it: run, case, trial, decision key, expected, error type, batch,
latency, passed, tiers."""

logger = logging.getLogger(__name__)

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
    finished_at REAL             -- when the run became final
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
    tiers TEXT,                  -- JSON [failed, warned, skipped, tied] when an invariant broke, a tier was skipped or a path was tied
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
    body TEXT NOT NULL,          -- a Publication, JSON
    sent INTEGER NOT NULL DEFAULT 0  -- the signals already delivered (bits)
);
"""

CACHE_KIB = 65536
"""SQLite's page cache (64 MiB, against its 2 MiB default): inserts into a large trials table
then rarely read pages back from disk."""
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
"""Runs in one page of `/v1/runs` and ListRuns: by default, and at most."""
DEFAULT_OUTBOX_LIMIT = 100_000
"""Admissions the outbox holds while the publish target is away; beyond, the oldest interim
ones go first, then the oldest."""

ADDED_COLUMNS = {
    "trials": {"latency_ms": "REAL", "passed": "INTEGER", "tiers": "TEXT"},
    "trace_spans": {"parent_id": "TEXT"},
    "trial_marks": {
        "last_seen": "REAL",
        "arrived": "REAL",
        "settled": "INTEGER NOT NULL DEFAULT 0",
    },
    "traces": {"spans": "INTEGER NOT NULL DEFAULT 0"},
    "runs": {
        "late": "INTEGER NOT NULL DEFAULT 0",
        "declaration_conflict": "INTEGER NOT NULL DEFAULT 0",
        "finished_at": "REAL",
    },
}
"""Columns added after the first release: a store made before them gains them on open."""
INDEXES = (
    "CREATE INDEX IF NOT EXISTS runs_open ON runs (first_seen) WHERE final = 0",
    "CREATE INDEX IF NOT EXISTS runs_finished ON runs (finished_at) WHERE final = 1",
    "CREATE INDEX IF NOT EXISTS runs_listed ON runs (first_seen, run_id)",
    "CREATE INDEX IF NOT EXISTS runs_latest ON runs (suite, point, finished_at) WHERE final = 1",
    "CREATE INDEX IF NOT EXISTS traces_by_age ON traces (last_seen)",
    "CREATE INDEX IF NOT EXISTS marks_due ON trial_marks (last_seen) WHERE settled = 0",
    "CREATE INDEX IF NOT EXISTS marks_held ON trial_marks (arrived) WHERE settled = 0",
    "CREATE INDEX IF NOT EXISTS traces_unmarked ON traces (last_seen) WHERE state = 0",
)
"""Open runs (the tick's cost follows the work in flight, not the store's history), finished
runs by age (retention deletes the oldest without a scan), and every run in listing order
(a page of `/v1/runs` reads that page only), traces by age and trials not yet settled by age
(settling and forgetting read what is due, not everything held)."""
WAITING, MARKED = 0, 1
"""A trace's state: no trial span yet, a trial span held."""
MAX_ANCESTRY = 256
"""Spans walked up from a new span to find its trial: deeper chains are not a framework's."""
MAX_TRACE_SPANS = 50_000
"""Framework spans one trace holds at most; later ones are dropped and counted."""
_RUN_COLUMNS = (
    "run_id, suite, point, declaration, planned_trials, declared_at, first_seen, last_seen,"
    " status, final, received, late, declaration_conflict"
)

_RUN_BY_ID = f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?"

_INSERT = """
INSERT OR IGNORE INTO trials
    (run_id, case_id, trial, decision, expected, error_type, batch, latency_ms, passed, tiers)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_REPEAT = """
UPDATE trials SET
    duplicates = duplicates + (decision IS ?),
    conflict = conflict OR (decision IS NOT ?)
WHERE run_id = ? AND case_id = ? AND trial = ? AND batch != ?
"""
"""A record whose identity an earlier write already holds: a duplicate, or a conflict."""


def encode_decision(decision: Decision | None) -> str | None:
    """A decision key as one comparable text: `l:label`, `t:["a","b"]`, `n:reason`; None for errors."""
    if decision is None:
        return None
    if isinstance(decision, str):
        return "l:" + decision
    if isinstance(decision, NoDecision):
        return "n:" + decision.reason
    return "t:" + json.dumps(list(decision), ensure_ascii=False, separators=(",", ":"))


def decode_decision(text: str | None) -> Decision | None:
    """The inverse of encode_decision."""
    if text is None:
        return None
    kind, body = text[:2], text[2:]
    if kind == "l:":
        return body
    if kind == "n:":
        return NoDecision(body)
    return tuple(json.loads(body))


@dataclass(frozen=True)
class StoredRun:
    """A run as the store knows it."""

    run_id: str
    suite: str | None
    point: str | None
    declaration_json: str | None
    """The run span's declaration attributes as stored; read on demand (`declaration`)."""
    planned_trials: int | None
    declared_at: float | None
    first_seen: float
    last_seen: float
    status: str | None
    final: bool
    received: int
    late: int = 0
    """Records that arrived after the run was final: counted, never stored."""
    declaration_conflict: bool = False
    """A second run span declared the run differently; the first declaration was kept."""

    @functools.cached_property
    def declaration(self) -> dict[str, Any] | None:
        """The run span's declaration attributes (parsed once, when asked for)."""
        return None if self.declaration_json is None else json.loads(self.declaration_json)

    @functools.cached_property
    def declared(self) -> RunDeclaration | None:
        """The declaration read (once) from the stored run-span attributes, if any."""
        return None if self.declaration is None else run_declaration(self.declaration)


@dataclass(frozen=True)
class Written:
    """What one write did: the runs it touched as they stand after it, per run the trials it
    took (stored, or repeats of stored ones; in the order given), and per run the trials
    refused for want of room."""

    runs: list[StoredRun]
    refused: dict[str, int]
    accepted: dict[str, list[Trial]]
    late_spans: dict[str, int] = field(default_factory=dict)
    """Per run, framework spans that came below a trial already settled (counted late)."""
    let_go: int = 0
    """Framework spans let go by this write to stay within the held-span cap or a trace's."""
    heard: frozenset[str] = frozenset()
    """Runs one of whose framework trials, not settled yet, got a span (its trial span or one
    below it): news that keeps the run from going idle while the trial settles."""


class Store:
    """Trials keyed (run, case, trial) in SQLite. A write returns only after its commit, so an
    acknowledged trial survives a crash of the process; a restart resumes every run."""

    def __init__(
        self, path: str | Path = ":memory:", *, outbox_limit: int = DEFAULT_OUTBOX_LIMIT
    ) -> None:
        self.outbox_limit = outbox_limit
        if str(path) != ":memory:" and not Path(path).exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # trial data: owner only
        self._connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes
            self._connection.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            self._connection.executescript(SCHEMA)
            added = set()
            for table, columns in ADDED_COLUMNS.items():
                present = {
                    row[1] for row in self._connection.execute(f"PRAGMA table_info({table})")
                }
                for column, kind in columns.items():
                    if column not in present:
                        self._connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                        added.add(column)
            self._migrate_held(added)
            if "finished_at" in added:  # runs finished by a release before `finished_at`
                self._connection.execute(
                    "UPDATE runs SET finished_at = last_seen WHERE final = 1 AND finished_at IS NULL"
                )
            for index in INDEXES:
                self._connection.execute(index)
            self._outbox_size: int
            (self._outbox_size,) = self._connection.execute(
                "SELECT COUNT(*) FROM outbox"
            ).fetchone()
            self._held_spans: int
            (self._held_spans,) = self._connection.execute(
                "SELECT COUNT(*) FROM trace_spans"
            ).fetchone()
        self.spans_let_go = 0
        """Framework spans let go to stay within the held-span cap, or beyond a trace's cap."""
        self._outbox_full = False

    def _migrate_held(self, added: set[str]) -> None:
        """What a store made before trials were keyed by their trial span held, brought to
        the new keying: marks get their arrival (their trace's last span), traces their span
        counts and spans their parent; a trace that release had settled is one whose trials
        are all settled (it took no spans since)."""
        connection = self._connection
        if "arrived" in added:
            connection.execute(
                "UPDATE trial_marks SET arrived = (SELECT last_seen FROM traces t WHERE"
                " t.trace_id = trial_marks.trace_id), last_seen = (SELECT last_seen FROM traces t"
                " WHERE t.trace_id = trial_marks.trace_id) WHERE arrived IS NULL"
            )
            connection.execute("UPDATE traces SET state = ? WHERE state = 2", (MARKED,))
        if "spans" in added:
            connection.execute(
                "UPDATE traces SET spans = (SELECT COUNT(*) FROM trace_spans s WHERE"
                " s.trace_id = traces.trace_id)"
            )
        if "parent_id" in added:
            rows = connection.execute("SELECT trace_id, span_id, facts FROM trace_spans").fetchall()
            connection.executemany(
                "UPDATE trace_spans SET parent_id = ? WHERE trace_id = ? AND span_id = ?",
                [(_FACTS.decode(facts).parent_id, trace, span) for trace, span, facts in rows],
            )

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def write(
        self,
        trials: Iterable[Trial],
        declarations: Iterable[dict[str, Any]] = (),
        labels: dict[str, tuple[str | None, str | None]] | None = None,
        now: float | None = None,
        max_trials: int | None = None,
        marks: Iterable[TrialMark] = (),
        spans: Iterable[FrameworkSpan] = (),
        settled: Iterable[tuple[str, Sequence[tuple[str, Sequence[str]]]]] = (),
        max_held_spans: int | None = None,
    ) -> Written:
        """Commit trials and run declarations in one transaction; the runs touched, as they
        stand after it, and the trials refused because a run had no room (`max_trials`).
        Harnesses' trial `marks` and framework `spans` are held by trace in the same
        transaction; a span below a trial already settled is counted late for its run, never
        held for it. The `settled` trials ((trace, [(trial span id, the span ids below it)]):
        these trials') are marked settled, and the facts of the spans below them let go (their
        ids kept, to count a late copy). Beyond `max_held_spans` framework spans held, the traces with no trial span
        quiet the longest are let go (counted in `spans_let_go`).

        Each run keeps a count of its stored trials, so no write ever scans a run; the room a
        run has left is read and used in the same transaction.
        """
        now = time.time() if now is None else now
        batch = secrets.randbits(62)
        by_run: dict[str, list[_TrialRow]] = {}
        given: dict[str, list[Trial]] = {}
        for trial in trials:
            decision = trial.decision
            key = "l:" + decision if type(decision) is str else encode_decision(decision)
            rows = by_run.get(trial.run)
            if rows is None:
                rows = by_run[trial.run] = []
                given[trial.run] = []
            given[trial.run].append(trial)
            rows.append(
                (
                    trial.run,
                    trial.case,
                    trial.index,
                    key,
                    trial.expected,
                    trial.error_type,
                    batch,
                    trial.latency_ms,
                    trial.passed,
                    _tiers_column(trial),
                )
            )
        declared = list(declarations)
        touched = set(by_run) | {str(d[names.RUN_ID]) for d in declared}
        labels = labels or {}
        refused: dict[str, int] = {}
        accepted: dict[str, list[Trial]] = {}
        with self._lock, self._transaction() as cursor:
            for run_id in touched:
                suite, point = labels.get(run_id, (None, None))
                cursor.execute(
                    "INSERT INTO runs (run_id, suite, point, first_seen, last_seen) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (run_id) DO UPDATE SET last_seen = excluded.last_seen,"
                    " suite = COALESCE(runs.suite, excluded.suite),"
                    " point = COALESCE(runs.point, excluded.point)",
                    (run_id, suite, point, now, now),
                )
            for attributes in declared:
                _declare(cursor, attributes, now)
            late_spans, held, dropped, heard = _hold(cursor, list(marks), list(spans), now)
            held -= _settle(cursor, settled)
            if max_held_spans is not None and self._held_spans + held > max_held_spans:
                released = _let_go(cursor, self._held_spans + held - max_held_spans)
                held -= released
                dropped += released
            for run_id, rows in by_run.items():
                cursor.execute("SELECT final, received FROM runs WHERE run_id = ?", (run_id,))
                final, received = cursor.fetchone()
                if max_trials is not None and len(rows) > max_trials - received:
                    room = max(0, max_trials - received)
                    refused[run_id] = len(rows) - room
                    rows = rows[:room]
                if final:  # its admission is frozen: count, never store
                    cursor.execute(
                        "UPDATE runs SET late = late + ? WHERE run_id = ?", (len(rows), run_id)
                    )
                    continue
                accepted[run_id] = given[run_id][: len(rows)]
                cursor.executemany(_INSERT, rows)
                inserted = cursor.rowcount
                cursor.execute(
                    "UPDATE runs SET received = received + ? WHERE run_id = ?", (inserted, run_id)
                )
                if inserted < len(rows):  # repeated identities: count duplicates and conflicts
                    cursor.executemany(_REPEAT, _repeats(rows, batch))
            runs = [
                _stored_run(cursor.execute(_RUN_BY_ID, (run_id,)).fetchone()) for run_id in touched
            ]
            self._held_spans += held
            self.spans_let_go += dropped
        return Written(runs, refused, accepted, late_spans, dropped, heard)

    def evidence(self, run_id: str) -> Evidence:
        """Every kept trial of a run, with its duplicates, conflicts, latency and tier results."""
        evidence = Evidence()
        with self._lock:
            rows = self._connection.execute(
                "SELECT case_id, trial, decision, expected, error_type, duplicates, conflict,"
                " latency_ms, passed, tiers FROM trials WHERE run_id = ? ORDER BY case_id, trial",
                (run_id,),
            ).fetchall()
        evidence.add_all(_trial(run_id, row) for row in rows)  # sparse cases laid out later
        evidence.note_repeats(
            sum(row[5] for row in rows), ((run_id, row[0], row[1]) for row in rows if row[6])
        )
        return evidence

    def _runs(self, clauses: str, parameters: tuple[object, ...] = ()) -> list[StoredRun]:
        """The runs a `WHERE ... ORDER BY ... LIMIT` text selects."""
        with self._lock:
            rows = self._connection.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs {clauses}", parameters
            ).fetchall()
        return [_stored_run(row) for row in rows]

    def runs(self) -> list[StoredRun]:
        """Every run, oldest first."""
        return self._runs("ORDER BY first_seen, run_id")

    def page(self, token: str = "", size: int = DEFAULT_PAGE_SIZE) -> tuple[list[StoredRun], str]:
        """One page of runs, oldest first, and the token of the next page ("" after the last).
        Reads only the page, through the listing index; a token that is not one of ours raises
        ValueError."""
        size = min(max(size, 1), MAX_PAGE_SIZE) if size else DEFAULT_PAGE_SIZE
        parameters: tuple[float, str] | tuple[()] = _cursor(token) if token else ()
        where = "WHERE (first_seen, run_id) > (?, ?)" if token else ""
        runs = self._runs(f"{where} ORDER BY first_seen, run_id LIMIT ?", (*parameters, size + 1))
        if len(runs) <= size:
            return runs, ""
        last = runs[size - 1]
        return runs[:size], _token((last.first_seen, last.run_id))

    def newest(
        self, limit: int, suite: str | None = None, status: str | None = None
    ) -> list[StoredRun]:
        """The newest runs first, at most `limit`, of a suite and with a status when given
        (`in_progress` for runs not yet final); read backwards through the listing index."""
        clauses, parameters = [], []
        if suite is not None:
            clauses.append("suite = ?")
            parameters.append(suite)
        if status == "in_progress":
            clauses.append("final = 0")
        elif status is not None:
            clauses.append("final = 1 AND status = ?")
            parameters.append(status)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._runs(
            f"{where} ORDER BY first_seen DESC, run_id DESC LIMIT ?", (*parameters, limit)
        )

    def forget_finished(self, before: float, limit: int = 100) -> int:
        """Delete up to `limit` runs finished before `before` (epoch seconds), with their
        trials; how many. Admissions already staged in the outbox are kept."""
        with self._lock, self._transaction() as cursor:
            cursor.execute(
                "SELECT run_id FROM runs WHERE final = 1 AND finished_at < ?"
                " ORDER BY finished_at LIMIT ?",
                (before, limit),
            )
            doomed = [(run_id,) for (run_id,) in cursor.fetchall()]
            cursor.executemany("DELETE FROM trials WHERE run_id = ?", doomed)
            cursor.executemany("DELETE FROM runs WHERE run_id = ?", doomed)
        return len(doomed)

    def held_spans(self) -> int:
        """Framework spans held for trials still to settle or to recognise late copies of."""
        return self._held_spans

    def quiet_traces(self, before: float, held_before: float, limit: int = 1000) -> list[str]:
        """Traces with a trial due to settle: not settled, and its own spans (the trial span and
        those below it, whatever else shares the trace) quiet since `before`, or its trial span
        held since `held_before` however busy they still are."""
        with self._lock:
            rows = self._connection.execute(
                "SELECT trace_id FROM (SELECT trace_id, last_seen AS due FROM trial_marks"
                " WHERE settled = 0 AND last_seen < ? UNION ALL SELECT trace_id, arrived FROM"
                " trial_marks WHERE settled = 0 AND arrived < ?)"
                " GROUP BY trace_id ORDER BY MIN(due) LIMIT ?",
                (before, held_before, limit),
            ).fetchall()
        return [trace_id for (trace_id,) in rows]

    def trace(
        self, trace_id: str, quiet_since: float, held_since: float
    ) -> tuple[list[TrialMark], list[SpanFacts]]:
        """A trace's trials due to settle (as `quiet_traces` says) and the framework span facts
        it holds."""
        with self._lock:
            marks = self._connection.execute(
                "SELECT mark FROM trial_marks WHERE trace_id = ? AND settled = 0"
                " AND (last_seen < ? OR arrived < ?)",
                (trace_id, quiet_since, held_since),
            ).fetchall()
            spans = self._connection.execute(
                "SELECT facts FROM trace_spans WHERE trace_id = ?", (trace_id,)
            ).fetchall()
        return (
            [_MARK.decode(mark) for (mark,) in marks],
            [_FACTS.decode(facts) for (facts,) in spans],
        )

    def forget_traces(self, before: float, limit: int = 1000) -> int:
        """Delete up to `limit` traces quiet since `before` with no trial left to settle (none
        came, or every one is stored); how many. A settled trial's spans are kept until then,
        so that a late copy of them is known for what it is."""
        with self._lock, self._transaction() as cursor:
            cursor.execute(
                "SELECT trace_id FROM traces WHERE last_seen < ? AND NOT EXISTS (SELECT 1 FROM"
                " trial_marks m WHERE m.trace_id = traces.trace_id AND m.settled = 0)"
                " ORDER BY last_seen LIMIT ?",
                (before, limit),
            )
            doomed = [(trace_id,) for (trace_id,) in cursor.fetchall()]
            cursor.executemany("DELETE FROM trace_spans WHERE trace_id = ?", doomed)
            released = max(cursor.rowcount, 0)
            for table in ("settled_spans", "trial_marks", "traces"):
                cursor.executemany(f"DELETE FROM {table} WHERE trace_id = ?", doomed)
            self._held_spans -= released
        return len(doomed)

    def open_runs(self) -> list[StoredRun]:
        """The runs not yet final, oldest first (read through an index of open runs only)."""
        return self._runs("WHERE final = 0 ORDER BY first_seen")

    def latest_finished(self) -> list[tuple[StoredRun, float]]:
        """The run each (suite, point) finished last, with when, the most recent first: what a
        scrape endpoint shows again after a restart (read once, at start, through an index of
        finished runs by suite)."""
        with self._lock:
            rows = self._connection.execute(
                f"SELECT {_RUN_COLUMNS}, MAX(finished_at) AS latest FROM runs WHERE final = 1"
                " GROUP BY suite, point"  # SQLite takes the other columns from the MAX row
                " ORDER BY latest DESC"
            ).fetchall()
        return [(_stored_run(row[:-1]), row[-1]) for row in rows]

    def inconclusive_streak(self, suite: str | None, point: str | None, most: int = 1000) -> int:
        """How many of the suite's latest finished runs in a row were inconclusive (at most
        `most`; read newest first through the index of finished runs by suite)."""
        with self._lock:
            rows = self._connection.execute(
                "SELECT status FROM runs WHERE final = 1 AND suite IS ? AND point IS ?"
                " ORDER BY finished_at DESC LIMIT ?",
                (suite, point, most),
            ).fetchall()
        return next((n for n, (status,) in enumerate(rows) if status != "inconclusive"), len(rows))

    def run(self, run_id: str) -> StoredRun | None:
        """One run, or None when unknown."""
        with self._lock:
            row = self._connection.execute(_RUN_BY_ID, (run_id,)).fetchone()
        return None if row is None else _stored_run(row)

    def close_runs(self, run_ids: Iterable[str]) -> None:
        """Make runs final, their admission still to be made (`finish`): from this commit on,
        their records are late. A restart finishes them (`runs_to_admit`)."""
        with self._lock, self._transaction() as cursor:
            cursor.executemany(
                "UPDATE runs SET final = 1 WHERE run_id = ? AND final = 0",
                [(run_id,) for run_id in run_ids],
            )

    def runs_to_admit(self) -> list[StoredRun]:
        """Runs made final whose admission was not made (read at start, through the index of
        finished runs)."""
        return self._runs("WHERE final = 1 AND finished_at IS NULL AND status IS NULL")

    def finish(
        self,
        run_id: str,
        status: str,
        publication: str | None,
        now: float | None = None,
        *,
        declaration: str | None = None,
    ) -> bool:
        """Give a run its admission, final, and stage that admission for publishing, in one
        transaction; False (and nothing written) when it has one already. A run without a run
        span keeps `declaration` as what it was judged by."""
        with self._lock, self._transaction() as cursor:
            cursor.execute(
                "UPDATE runs SET status = ?, final = 1, finished_at = ?,"
                " declaration = COALESCE(declaration, ?)"
                " WHERE run_id = ? AND status IS NULL",
                (status, time.time() if now is None else now, declaration, run_id),
            )
            if cursor.rowcount != 1:
                return False
            if publication is not None:
                self._stage(cursor, run_id, publication, final=True)
        return True

    def stage(self, run_id: str, publication: str) -> bool:
        """Stage an interim admission (a canary window) of a run not yet admitted; False (and
        nothing staged) once it is."""
        with self._lock, self._transaction() as cursor:
            cursor.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,))
            row = cursor.fetchone()
            if row is None or row[0] is not None:
                return False
            self._stage(cursor, run_id, publication, final=False)
        return True

    def _stage(self, cursor: sqlite3.Cursor, run_id: str, body: str, final: bool) -> None:
        """Append to the outbox; beyond its limit the oldest interim admission is dropped (the
        oldest admission when there is none), with one warning while it stays full."""
        cursor.execute(
            "INSERT INTO outbox (run_id, final, body) VALUES (?, ?, ?)", (run_id, int(final), body)
        )
        self._outbox_size += 1
        if self._outbox_size <= self.outbox_limit:
            self._outbox_full = False
            return
        cursor.execute(
            "DELETE FROM outbox WHERE seq = COALESCE("
            "(SELECT MIN(seq) FROM outbox WHERE final = 0), (SELECT MIN(seq) FROM outbox))"
        )
        self._outbox_size -= cursor.rowcount
        if not self._outbox_full:
            self._outbox_full = True
            logger.warning(
                "verdictgate: the outbox holds %d admissions, its limit: the oldest are dropped "
                "until the publish target takes them",
                self.outbox_limit,
            )

    def outbox(self, limit: int) -> list[tuple[int, str, int]]:
        """The oldest staged admissions: (seq, body, signals already sent)."""
        with self._lock:
            return self._connection.execute(
                "SELECT seq, body, sent FROM outbox ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()

    def mark_sent(self, seq: int, sent: int, complete: int) -> None:
        """Record the signals of an entry delivered so far; a complete entry leaves the outbox."""
        with self._lock, self._transaction() as cursor:
            if (sent & complete) == complete:
                cursor.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
                self._outbox_size -= cursor.rowcount
            else:
                cursor.execute("UPDATE outbox SET sent = ? WHERE seq = ?", (sent, seq))

    def outbox_size(self) -> int:
        """Admissions waiting to be published."""
        with self._lock:
            return self._outbox_size

    def _transaction(self) -> _Transaction:
        return _Transaction(self._connection)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def __enter__(self) -> sqlite3.Cursor:
        self._cursor = self._connection.cursor()
        self._cursor.execute("BEGIN IMMEDIATE")
        return self._cursor

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._cursor.execute("ROLLBACK" if kind else "COMMIT")


def _tiers_column(trial: Trial) -> str | None:
    """What the tiers found and whether the path's order was tied, as compact JSON `[failed,
    warned, skipped, tied]` (rows from before `tied` have three); None when nothing."""
    if not (
        trial.invariants_failed
        or trial.invariants_warned
        or trial.evaluation_skipped
        or trial.tied_steps
    ):
        return None
    tiers = [
        list(trial.invariants_failed),
        list(trial.invariants_warned),
        trial.evaluation_skipped,
        [list(pair) for pair in trial.tied_steps],
    ]
    return json.dumps(tiers, separators=(",", ":"))


def _token(cursor: tuple[float, str]) -> str:
    """A page token: the listing position (first_seen, run_id) of a page's last run."""
    return base64.urlsafe_b64encode(json.dumps(cursor).encode()).decode()


def _cursor(token: str) -> tuple[float, str]:
    try:
        first_seen, run_id = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError, UnicodeError):
        raise ValueError("page_token is not one this receiver gave") from None
    if not isinstance(first_seen, (int, float)) or not isinstance(run_id, str):
        raise ValueError("page_token is not one this receiver gave")
    return float(first_seen), run_id


def _trial(run_id: str, row: SqlRow) -> Trial:
    """A stored row as the trial it records."""
    case, index, decision, expected, error_type, _, _, latency, passed, tiers = row
    failed, warned, skipped, *tied = json.loads(tiers) if tiers else ((), (), False)
    return Trial(
        case,
        index,
        decode_decision(decision),
        run_id,
        expected,
        error_type,
        passed=None if passed is None else bool(passed),
        invariants_failed=tuple(failed),
        invariants_warned=tuple(warned),
        latency_ms=latency,
        evaluation_skipped=bool(skipped),
        tied_steps=tuple(tuple(pair) for pair in tied[0]) if tied else (),
    )


def _repeats(
    rows: list[_TrialRow], batch: int
) -> list[tuple[str | None, str | None, str, str, int, int]]:
    """REPEAT parameters: a first occurrence in this write is compared with rows of earlier
    writes; a later occurrence with the row its first occurrence stored (any batch)."""
    seen: set[tuple[str, str, int]] = set()
    parameters = []
    for run, case, index, key, *_ in rows:
        identity = (run, case, index)
        parameters.append((key, key, run, case, index, -1 if identity in seen else batch))
        seen.add(identity)
    return parameters


_MARK = msgspec.msgpack.Decoder(TrialMark)
_FACTS = msgspec.msgpack.Decoder(SpanFacts)
_PACK = msgspec.msgpack.Encoder()


def _hold(
    cursor: sqlite3.Cursor, marks: list[TrialMark], spans: list[FrameworkSpan], now: float
) -> tuple[dict[str, int], int, int, frozenset[str]]:
    """Keep trial marks and framework span facts by trace (first copy wins: a span sent twice
    is held once); returns (late spans per run, spans newly held, spans dropped, the runs
    whose unsettled trials got a span). A new span
    below a trial not yet settled keeps that trial from settling for now; one below a settled
    trial is late: counted for its run, not held for it. A trace holds MAX_TRACE_SPANS at most:
    spans beyond are dropped."""
    traces = {span.trace_id for span in spans} | {mark.trace_id for mark in marks}
    if not traces:
        return {}, 0, 0, frozenset()
    room = {}
    for trace_id in traces:
        cursor.execute(
            "INSERT INTO traces (trace_id, last_seen) VALUES (?, ?)"
            " ON CONFLICT (trace_id) DO UPDATE SET last_seen = excluded.last_seen RETURNING spans",
            (trace_id, now),
        )
        room[trace_id] = MAX_TRACE_SPANS - cursor.fetchone()[0]
    heard: set[str] = set()
    for mark in marks:
        cursor.execute(
            "INSERT OR IGNORE INTO trial_marks (trace_id, span_id, mark, last_seen, arrived)"
            " VALUES (?, ?, ?, ?, ?)",
            (mark.trace_id, mark.span_id, _PACK.encode(mark), now, now),
        )
        if cursor.rowcount:  # a new trial, not an exporter's retry of one
            heard.add(mark.run)
    cursor.executemany(
        "UPDATE traces SET state = ? WHERE trace_id = ?",
        [(MARKED, trace_id) for trace_id in {mark.trace_id for mark in marks}],
    )
    new, dropped = [], 0
    for span in spans:
        if room[span.trace_id] <= 0:
            dropped += 1
            continue
        cursor.execute(
            "INSERT OR IGNORE INTO trace_spans (trace_id, span_id, facts, parent_id)"
            " VALUES (?, ?, ?, ?)",
            (span.trace_id, span.facts.span_id, _PACK.encode(span.facts), span.facts.parent_id),
        )
        if cursor.rowcount:
            new.append(span)
            room[span.trace_id] -= 1
    late: dict[str, int] = {}
    active: set[tuple[str, str]] = set()
    added = {trace_id: 0 for trace_id in traces}
    known: dict[tuple[str, str], tuple[str, bool, str] | None] = {}
    for span in new:
        trial = _trial_above(cursor, span.trace_id, span.facts.parent_id, known)
        if trial is not None and trial[1]:  # below a settled trial: late
            late[trial[2]] = late.get(trial[2], 0) + 1
            cursor.execute(
                "DELETE FROM trace_spans WHERE trace_id = ? AND span_id = ?",
                (span.trace_id, span.facts.span_id),
            )
            cursor.execute(  # so that a span below it, in any order, is late too
                "INSERT OR IGNORE INTO settled_spans (trace_id, span_id, mark) VALUES (?, ?, ?)",
                (span.trace_id, span.facts.span_id, trial[0]),
            )
            continue
        added[span.trace_id] += 1
        if trial is not None:
            active.add((span.trace_id, trial[0]))
            heard.add(trial[2])
    cursor.executemany(
        "UPDATE traces SET spans = spans + ? WHERE trace_id = ?",
        [(n, trace_id) for trace_id, n in added.items() if n],
    )
    cursor.executemany(
        "UPDATE trial_marks SET last_seen = ? WHERE trace_id = ? AND span_id = ?",
        [(now, trace_id, span_id) for trace_id, span_id in active],
    )
    cursor.executemany(
        "UPDATE runs SET late = late + ? WHERE run_id = ?", [(n, run) for run, n in late.items()]
    )
    return late, sum(added.values()), dropped, frozenset(heard)


def _let_go(cursor: sqlite3.Cursor, excess: int) -> int:
    """Delete held spans until at least `excess` are gone (or nothing is left to let go); how
    many went. First the spans of traces whose trials are all settled (no trial needs them),
    then traces with no trial span at all, quiet the longest first (under a flood, the newest,
    which may be an honest trial's spans waiting for its trial span, go last)."""
    gone = 0
    for query, state in (
        (
            "SELECT trace_id, spans FROM traces WHERE state = ? AND spans > 0 AND NOT EXISTS"
            " (SELECT 1 FROM trial_marks m WHERE m.trace_id = traces.trace_id AND m.settled = 0)"
            " ORDER BY last_seen LIMIT 256",
            MARKED,
        ),
        (
            "SELECT trace_id, spans FROM traces WHERE state = ? ORDER BY last_seen LIMIT 256",
            WAITING,
        ),
    ):
        while gone < excess:
            rows = cursor.execute(query, (state,)).fetchall()
            if not rows:
                break
            doomed = []
            for trace_id, spans in rows:
                doomed.append((trace_id,))
                gone += spans
                if gone >= excess:
                    break
            cursor.executemany("DELETE FROM trace_spans WHERE trace_id = ?", doomed)
            cursor.executemany("UPDATE traces SET spans = 0 WHERE trace_id = ?", doomed)
            cursor.executemany(
                "DELETE FROM traces WHERE trace_id = ? AND state = ?",
                [(trace_id, WAITING) for (trace_id,) in doomed],
            )
    return gone


def _settle(
    cursor: sqlite3.Cursor, settled: Iterable[tuple[str, Sequence[tuple[str, Sequence[str]]]]]
) -> int:
    """Mark trials settled and let go of the facts below them, keeping their ids; how many
    spans were let go."""
    released = 0
    for trace_id, trials in settled:
        for mark, below in trials:
            cursor.execute(
                "UPDATE trial_marks SET settled = 1 WHERE trace_id = ? AND span_id = ?",
                (trace_id, mark),
            )
            cursor.executemany(
                "INSERT OR IGNORE INTO settled_spans (trace_id, span_id, mark) VALUES (?, ?, ?)",
                [(trace_id, span_id, mark) for span_id in below],
            )
            cursor.executemany(
                "DELETE FROM trace_spans WHERE trace_id = ? AND span_id = ?",
                [(trace_id, span_id) for span_id in below],
            )
            gone = max(cursor.rowcount, 0)
            cursor.execute(
                "UPDATE traces SET spans = MAX(spans - ?, 0) WHERE trace_id = ?", (gone, trace_id)
            )
            released += gone
    return released


def _trial_above(
    cursor: sqlite3.Cursor,
    trace_id: str,
    parent_id: str | None,
    known: dict[tuple[str, str], tuple[str, bool, str] | None],
) -> tuple[str, bool, str] | None:
    """The trial a span belongs to, walking up from its parent through the spans held (at most
    MAX_ANCESTRY): (its trial span's id, whether settled, its run); None when no trial span
    is known above it yet. `known` remembers the answer for every span walked through, so one
    request's spans walk each chain once."""
    walked: list[tuple[str, str]] = []
    found: tuple[str, bool, str] | None = None
    for _ in range(MAX_ANCESTRY):
        if parent_id is None:
            break
        key = (trace_id, parent_id)
        if key in known:
            found = known[key]
            break
        walked.append(key)
        row = cursor.execute(
            "SELECT settled, mark FROM trial_marks WHERE trace_id = ? AND span_id = ?", key
        ).fetchone()
        if row is not None:
            found = parent_id, bool(row[0]), _MARK.decode(row[1]).run
            break
        row = cursor.execute(
            "SELECT parent_id FROM trace_spans WHERE trace_id = ? AND span_id = ?", key
        ).fetchone()
        if row is None:
            settled = cursor.execute(
                "SELECT s.mark, m.mark FROM settled_spans s JOIN trial_marks m ON"
                " m.trace_id = s.trace_id AND m.span_id = s.mark"
                " WHERE s.trace_id = ? AND s.span_id = ?",
                key,
            ).fetchone()
            if settled is not None:
                found = settled[0], True, _MARK.decode(settled[1]).run
            break
        parent_id = row[0]
    for key in walked:
        known[key] = found
    return found


def _declare(cursor: sqlite3.Cursor, attributes: dict[str, Any], now: float) -> None:
    """The first run span of a run declares it; a later, different one is an integrity
    conflict (the first stays), an identical one a harmless repeat. A run that is final is
    frozen: a different run span then is only counted as late."""
    run_id, text = attributes[names.RUN_ID], json.dumps(attributes, sort_keys=True)
    cursor.execute(
        "UPDATE runs SET late = late + 1 WHERE run_id = ? AND final = 1 AND declaration IS NOT ?",
        (run_id, text),
    )
    if cursor.rowcount:
        return
    cursor.execute(
        "UPDATE runs SET declaration = ?, planned_trials = ?, declared_at = ?,"
        " suite = COALESCE(?, suite), point = COALESCE(?, point)"
        " WHERE run_id = ? AND declaration IS NULL AND final = 0",
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
        cursor.execute(
            "UPDATE runs SET declaration_conflict = 1"
            " WHERE run_id = ? AND final = 0 AND declaration != ?",
            (run_id, text),
        )


def _stored_run(row: SqlRow) -> StoredRun:
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
    )
