"""The durable trial store (SQLite, WAL): first record wins, conflicts kept, runs resumable. It
composes the aggregates; each public call is one transaction (or one read) under the lock."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from ...evidence import Evidence
from ...otel import conventions as names
from ...otel.framework_traces import FrameworkSpan, TrialMark
from ...span_facts import SpanFacts
from ...trial_model import Trial
from ...wire_types import AttributeValue
from .connection import Database
from .held_spans import HeldSpans, SettledTrials, unpack_trace
from .listing import DEFAULT_PAGE_SIZE, RunListing
from .outbox import DEFAULT_OUTBOX_LIMIT, Outbox
from .records import StoredRun, Written
from .runs import Runs
from .schema import migrate
from .trial_rows import evidence_of, trial_batch


class Store:
    """Trials keyed (run, case, trial) in SQLite. A write returns only after its commit, so an
    acknowledged trial survives a crash of the process; a restart resumes every run."""

    def __init__(
        self, path: str | Path = ":memory:", *, outbox_limit: int = DEFAULT_OUTBOX_LIMIT
    ) -> None:
        self._database = Database(path)
        with self._database.locked() as cursor:
            migrate(cursor)
            self._outbox = Outbox(cursor, outbox_limit)
            self._held = HeldSpans(cursor)
        self._runs = Runs()
        self._listing = RunListing()

    @property
    def outbox_limit(self) -> int:
        """Admissions the outbox holds at most (DEFAULT_OUTBOX_LIMIT)."""
        return self._outbox.limit

    @property
    def spans_let_go(self) -> int:
        """Framework spans let go to stay within the held-span cap, or beyond a trace's cap."""
        return self._held.spans_let_go

    def close(self) -> None:
        """Close the store's connection."""
        self._database.close()

    def write(
        self,
        trials: Iterable[Trial],
        declarations: Iterable[dict[str, AttributeValue]] = (),
        labels: dict[str, tuple[str | None, str | None]] | None = None,
        now: float | None = None,
        max_trials: int | None = None,
        marks: Iterable[TrialMark] = (),
        spans: Iterable[FrameworkSpan] = (),
        settled: SettledTrials = (),
        max_held_spans: int | None = None,
    ) -> Written:
        """Commit trials and run declarations in one transaction; the runs touched, as they
        stand after it, and the trials refused because a run had no room (`max_trials`).
        Harnesses' trial `marks` and framework `spans` are held by trace in the same
        transaction; a span below a trial already settled is counted late for its run, never
        held for it. The `settled` trials ((trace, [(trial span id, the span ids below it)]))
        are marked settled, and the facts of the spans below them let go (their ids kept, to
        count a late copy). Beyond `max_held_spans` framework spans held, the traces with no
        trial span quiet the longest are let go (counted in `spans_let_go`)."""
        now = time.time() if now is None else now
        batch = trial_batch(trials)
        declared = list(declarations)
        touched = set(batch.rows) | {str(d[names.RUN_ID]) for d in declared}
        with self._database.transaction() as cursor:
            self._runs.see(cursor, touched, labels or {}, now)
            for attributes in declared:
                self._runs.declare(cursor, attributes, now)
            intake = self._held.take(cursor, list(marks), list(spans), settled, now, max_held_spans)
            self._runs.count_late(cursor, intake.late)
            refused, accepted = self._runs.take(cursor, batch, max_trials)
            runs = self._runs.runs(cursor, touched)
            self._held.count_in(intake)
        return Written(runs, refused, accepted, intake.late, intake.dropped, intake.heard)

    def evidence(self, run_id: str) -> Evidence:
        """Every kept trial of a run, with its duplicates, conflicts, latency and tier results."""
        with self._database.locked() as cursor:
            rows = self._runs.trial_rows(cursor, run_id)
        return evidence_of(run_id, rows)

    def runs(self) -> list[StoredRun]:
        """Every run, oldest first."""
        with self._database.locked() as cursor:
            return self._listing.runs(cursor)

    def page(self, token: str = "", size: int = DEFAULT_PAGE_SIZE) -> tuple[list[StoredRun], str]:
        """One page of runs, oldest first, and the token of the next page ("" after the last).
        Reads only the page, through the listing index; a token that is not one of ours raises
        ValueError."""
        with self._database.locked() as cursor:
            return self._listing.page(cursor, token, size)

    def newest(
        self, limit: int, suite: str | None = None, status: str | None = None
    ) -> list[StoredRun]:
        """The newest runs first, at most `limit`, of a suite and with a status when given
        (`in_progress` for runs not yet final); read backwards through the listing index."""
        with self._database.locked() as cursor:
            return self._listing.newest(cursor, limit, suite, status)

    def forget_finished(self, before: float, limit: int = 100) -> int:
        """Delete up to `limit` runs finished before `before` (epoch seconds), with their
        trials; how many. Admissions already staged in the outbox are kept."""
        with self._database.transaction() as cursor:
            return self._listing.forget_finished(cursor, before, limit)

    def held_spans(self) -> int:
        """Framework spans held for trials still to settle or to recognise late copies of."""
        return self._held.spans_held

    def quiet_traces(self, before: float, held_before: float, limit: int = 1000) -> list[str]:
        """Traces with a trial due to settle: not settled, and its own spans (the trial span and
        those below it, whatever else shares the trace) quiet since `before`, or its trial span
        held since `held_before` however busy they still are."""
        with self._database.locked() as cursor:
            return self._held.quiet_traces(cursor, before, held_before, limit)

    def trace(
        self, trace_id: str, quiet_since: float, held_since: float
    ) -> tuple[list[TrialMark], list[SpanFacts]]:
        """A trace's trials due to settle (as `quiet_traces` says) and the framework span facts
        it holds."""
        with self._database.locked() as cursor:
            packed = self._held.trace(cursor, trace_id, quiet_since, held_since)
        return unpack_trace(packed)

    def forget_traces(self, before: float, limit: int = 1000) -> int:
        """Delete up to `limit` traces quiet since `before` with no trial left to settle (none
        came, or every one is stored); how many. A settled trial's spans are kept until then,
        so that a late copy of them is known for what it is."""
        with self._database.transaction() as cursor:
            return self._held.forget_traces(cursor, before, limit)

    def open_runs(self) -> list[StoredRun]:
        """The runs not yet final, oldest first (read through an index of open runs only)."""
        with self._database.locked() as cursor:
            return self._listing.open_runs(cursor)

    def latest_finished(self) -> list[tuple[StoredRun, float]]:
        """The run each (suite, point) finished last, with when, the most recent first: what a
        scrape endpoint shows again after a restart (read once, at start, through an index of
        finished runs by suite)."""
        with self._database.locked() as cursor:
            return self._listing.latest_finished(cursor)

    def inconclusive_streak(self, suite: str | None, point: str | None, most: int = 1000) -> int:
        """How many of the suite's latest finished runs in a row were inconclusive (at most
        `most`; read newest first through the index of finished runs by suite)."""
        with self._database.locked() as cursor:
            return self._listing.inconclusive_streak(cursor, suite, point, most)

    def run(self, run_id: str) -> StoredRun | None:
        """One run, or None when unknown."""
        with self._database.locked() as cursor:
            return self._runs.run(cursor, run_id)

    def close_runs(self, run_ids: Iterable[str]) -> None:
        """Make runs final, their admission still to be made (`finish`): from this commit on,
        their records are late. A restart finishes them (`runs_to_admit`)."""
        with self._database.transaction() as cursor:
            self._runs.close(cursor, run_ids)

    def runs_to_admit(self) -> list[StoredRun]:
        """Runs made final whose admission was not made (read at start, through the index of
        finished runs)."""
        with self._database.locked() as cursor:
            return self._runs.to_admit(cursor)

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
        with self._database.transaction() as cursor:
            finished_at = time.time() if now is None else now
            if not self._runs.admit(cursor, run_id, status, finished_at, declaration):
                return False
            if publication is not None:
                self._outbox.stage(cursor, run_id, publication, final=True)
        return True

    def stage(self, run_id: str, publication: str) -> bool:
        """Stage an interim admission (a canary window) of a run not yet admitted; False (and
        nothing staged) once it is."""
        with self._database.transaction() as cursor:
            if not self._runs.awaits_admission(cursor, run_id):
                return False
            self._outbox.stage(cursor, run_id, publication, final=False)
        return True

    def outbox(self, limit: int) -> list[tuple[int, str, int]]:
        """The oldest staged admissions: (seq, body, signals already sent)."""
        with self._database.locked() as cursor:
            return self._outbox.oldest(cursor, limit)

    def mark_sent(self, seq: int, sent: int, complete: int) -> None:
        """Record the signals of an entry delivered so far; a complete entry leaves the outbox."""
        with self._database.transaction() as cursor:
            self._outbox.mark_sent(cursor, seq, sent, complete)

    def outbox_size(self) -> int:
        """Admissions waiting to be published."""
        with self._database.lock:
            return self._outbox.size
