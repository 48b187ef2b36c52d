"""The durable trial store (a SQLite file, WAL, or a PostgreSQL database shared by replicas):
first record wins, conflicts kept, runs resumable and claimed. It composes the aggregates; each
public call is one transaction (or one read), but `write` and `held_trace` inside `together`,
which are part of its group's."""

from __future__ import annotations

import functools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from ...errors import StoreError
from ...evidence import Evidence
from .batch import NO_CAPS, Batch, DueTrace, WriteCaps
from .claims import LOCAL, RunClaims
from .connection import DEFAULT_LEASE, CopyRepeated, Cursor, open_database
from .faults import first_line, is_connection_lost, is_driver_error
from .held_spans import DueTrials, HeldSpans, unpack_trace
from .held_traces import HeldTraces
from .listing import DEFAULT_PAGE_SIZE, RunListing
from .locations import redacted
from .outbox import DEFAULT_OUTBOX_LIMIT, Outbox
from .outbox_queue import OutboxQueue
from .probe import StoreProbe, round_trip_to
from .records import RunVersion, StoredRun, Written
from .replica_claims import ReplicaClaims
from .run_declarations import declare
from .runs import Lease, Runs, Visit
from .schema import migrate
from .statements import SKIP_LOCKED, sql
from .stored_trials import trial_rows
from .trial_days import TrialDays
from .trial_rows import evidence_of, trial_batch

_HOLD_TRACE = sql("SELECT trace_id FROM traces WHERE trace_id = ?", SKIP_LOCKED)
_T = TypeVar("_T")


class Store:
    """Trials keyed (run, case, trial), in a SQLite file (`:memory:` by default) or a
    PostgreSQL database (`postgresql://...`). A write returns only after its commit, so an
    acknowledged trial survives a crash of the process; a restart resumes every run, and in a
    shared store another replica takes over a dead one's runs. `lease`: seconds a replica's
    claims hold unless renewed, by which a shared store bounds each transaction (a replica
    stalled inside one loses its runs within two leases)."""

    def __init__(
        self,
        location: str | Path = ":memory:",
        *,
        outbox_limit: int = DEFAULT_OUTBOX_LIMIT,
        lease: float = DEFAULT_LEASE,
    ) -> None:
        self.location = redacted(location)
        """Where the store is, fit for a log line (a URL's password is not in it)."""
        self._database = database = open_database(location, lease)
        try:
            self.migrated = migrate(database)
            """What opening it changed in an existing store's schema, a line per step (empty
            when it was current)."""
        except Exception as error:
            if not is_driver_error(error):  # a role without CREATE is as clear a refusal
                raise
            database.close()
            raise StoreError(
                f"cannot open the store {self.location}: {first_line(error)}"
            ) from None
        with database.locked() as cursor:
            self._outbox = Outbox(cursor, outbox_limit, shared=database.shared)
            self._held = HeldSpans(cursor, shared=database.shared)
        self._runs = Runs()
        self._listing = RunListing()
        self._claims = RunClaims()
        self._days = TrialDays(database) if database.shared else None
        """A shared store's trials are partitioned by day (a SQLite store's are one table)."""
        self._alive: dict[str, float] = {}
        """Until when each replica writing through this store renewed its heartbeat here."""
        self._group = threading.local()
        """In a thread doing writes `together`: their transaction's cursor (`cursor`), and what
        to do once it is committed (`committed`)."""
        self._probe = StoreProbe(round_trip_to(location))
        self.traces = HeldTraces(database, self._held)
        """The framework spans held by trace, as the tick settles and forgets them."""
        self.claims = ReplicaClaims(database, self._claims, self._outbox, self._alive)
        """Which replica decides which run: claims, heartbeats, what others wrote."""
        self.outbox = OutboxQueue(database, self._outbox)
        """The admissions staged for publishing, as the forwarder drains them."""

    @property
    def shared(self) -> bool:
        """Whether other replicas write this store too (a PostgreSQL one)."""
        return self._database.shared

    def recount(self) -> None:
        """Count again what this process keeps counts of (framework spans held, admissions
        staged): in a shared store other replicas change them too."""
        if self.shared:
            with self._database.locked() as cursor:
                self._held.spans_held = self._held.count(cursor)
                self._outbox.size = self._outbox.count(cursor)

    def reachable(self) -> bool:
        """Whether the store (a shared store's server, or the file) answered a round trip
        within half a second, on a connection of its own, asked at most once a second
        (`StoreProbe`): never waits behind the store's connection, whatever it is busy with,
        nor longer than that half second, whatever the server does."""
        return self._probe.answers()

    def now(self) -> float:
        """The store's time (epoch seconds): a shared store's server clock, the one its
        replicas compare leases and deadlines on (`DatabaseClock` reads it); this process's
        wall clock for a file."""
        return self._database.now()

    def close(self) -> None:
        """Close the store's connection."""
        self._database.close()

    def write(
        self,
        batch: Batch,
        now: float | None = None,
        claim: Lease | None = None,
        caps: WriteCaps = NO_CAPS,
        amend_since: float = -math.inf,
    ) -> Written:
        """Commit a request's contents (`batch`) in one transaction; the runs touched, as they
        stand after it, and the trials refused because a run had no room (`caps.max_trials`).
        Harnesses' trial marks and framework spans are held by trace in the same transaction; a
        span below a trial already settled is counted late for its run, never held for it,
        unless its trial span arrived since `amend_since` and its run is open: then it amends
        that trial, which settles again from all its spans (its stored record replaced,
        `Written.amended`). A due trace's trials (derived from what `held_trace` read, in the
        same transaction) are stored with `batch.settled`, which marks them settled (their
        spans' facts kept for amendments until `release_settled`, their ids for good, to count
        a late copy). Beyond `caps.max_held_spans` framework spans held, the traces with
        no trial span quiet the longest are let go (counted in `spans_let_go`). A new run, or
        one whose owner is not alive, is claimed by `claim` (the local replica's, alive for a
        whole hour, by default), whose heartbeat the write renews when it lapsed. Inside
        `together`, part of its transaction; outside, a group of one."""
        now = time.time() if now is None else now
        claim = claim or (LOCAL, now + 3600.0)
        if self._days is not None:  # in a transaction of its own: a day made stays made
            self._days.cover(now)  # (before a lone write's: never two connections at once)
        cursor: Cursor | None = getattr(self._group, "cursor", None)
        if cursor is None:  # a write of its own: a group of one
            (outcome,) = self._together(
                [functools.partial(self.write, batch, now, claim, caps, amend_since)]
            )
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        given, again, labels = list(batch.trials), list(batch.again), dict(batch.labels)
        settled = tuple(batch.settled)
        committed = self._group.committed
        if self._alive.get(claim[0], -math.inf) < now:  # a claim needs its heartbeat
            self._claims.beat(cursor, *claim)
        declared = list(batch.declarations)
        needs = Counter(trial.run for trial in (*given, *again))
        declared_runs = {d.declaration.run_id for d in declared}
        intake = self._held.take(
            cursor,
            list(batch.marks),
            list(batch.spans),
            settled,
            now,
            caps.max_held_spans,
            amend_since,
        )
        # a settling write's trials are all framework ones
        framework = (set(needs) if settled else set()) | intake.heard
        visit = Visit(
            dict(needs),
            frozenset(declared_runs),
            frozenset(framework),
            intake.late,
            caps.max_trials,
        )
        accesses = self._runs.see(
            cursor, set(needs) | declared_runs, intake.heard, visit, labels, now, claim
        )
        for run_span in declared:
            declare(cursor, run_span.attributes, now)
        if framework:
            self._runs.mark_framework(cursor, framework & set(accesses))
        amended, unknown = self._runs.amend(cursor, trial_batch(again), accesses)
        rows = trial_batch([*given, *unknown])
        refused, accepted, stored = self._runs.take(cursor, rows, accesses)
        runs = self._runs.written(cursor, accesses, stored)
        committed.append(lambda: self._held.count_in(intake))
        committed.append(lambda: self._renewed(*claim))
        claimed = frozenset(run_id for run_id, access in accesses.items() if access.claimed)
        return Written(
            runs,
            refused,
            accepted,
            intake.late,
            intake.dropped,
            intake.heard,
            labels,
            amended,
            claimed,
        )

    def together(self, writes: Sequence[Callable[[], _T]]) -> list[_T | Exception]:
        """Do `writes` (each a function that calls `write`) in one transaction, in order, and
        commit them once: what each returned. Many rows are copied in; when one repeats a row
        held (a sender's retry), the transaction is done again inserting them as written. When
        the transaction fails for anything but the store being away (what one write holds, a
        lock another replica held, a bug), each write is done again as a group of its own (a
        settling write holds its trace again: `held_trace`), so that the one that fails fails
        alone (its error in its place) and the others are committed; the store being away is
        every write's error."""
        return self._together(writes)

    def _together(self, writes: Sequence[Callable[[], _T]]) -> list[_T | Exception]:
        """`together`, for the writes of a group and a write of its own alike."""
        if not writes:
            return []
        committed: list[Callable[[], None]] = []
        try:
            try:
                done = self._in_one_transaction(writes, committed, copying=True)
            except CopyRepeated:
                committed.clear()
                done = self._in_one_transaction(writes, committed, copying=False)
        except Exception as failed:
            if len(writes) == 1 or is_connection_lost(failed):
                return [failed] * len(writes)
            return [self._together([write])[0] for write in writes]  # each a group of one
        for then in committed:
            then()
        return done

    def _in_one_transaction(
        self,
        writes: Sequence[Callable[[], _T]],
        committed: list[Callable[[], None]],
        copying: bool,
    ) -> list[_T | Exception]:
        """Do `writes` in one transaction; what each returned (what to do once it is committed
        added to `committed`)."""
        if getattr(self._group, "cursor", None) is not None:
            raise RuntimeError("a group of writes inside another would split it in two")
        self._group.committed = committed
        try:
            with self._database.transaction(copying) as cursor:
                self._group.cursor = cursor
                return [write() for write in writes]
        finally:
            self._group.cursor = None  # a write done again runs in a transaction of its own

    def _renewed(self, replica: str, until: float) -> None:
        """Note that a committed write renewed `replica`'s heartbeat until `until`."""
        self._alive[replica] = max(self._alive.get(replica, -math.inf), until)

    def held_trace(self, due: DueTrace) -> DueTrials | None:
        """Inside `together`: hold a due trace (a trace, quiet since, held since) until the
        group commits, so that no span lands before its trials are stored and no other replica
        settles them too, and read what they are derived from; None when another transaction
        holds it (another replica settles it, or its spans are arriving: replicas never queue
        behind one another to settle it)."""
        cursor: Cursor | None = getattr(self._group, "cursor", None)
        if cursor is None:
            raise RuntimeError("a trace is held for a write of a group (Store.together)")
        trace_id, quiet_since, held_since = due
        if cursor.execute(_HOLD_TRACE, (trace_id,)).fetchone() is None and self.shared:
            return None
        return DueTrials(
            trace_id, *unpack_trace(self._held.trace(cursor, trace_id, quiet_since, held_since))
        )

    def evidence(self, run_id: str, upto: RunVersion | None = None) -> Evidence:
        """Every kept trial of a run, with its duplicates, conflicts, latency and tier results;
        with `upto`, those its writes up to that version stored."""
        with self._database.locked() as cursor:
            rows = trial_rows(cursor, run_id, upto)
        return evidence_of(run_id, rows)

    def runs(self) -> list[StoredRun]:
        """Every run, oldest first."""
        with self._database.snapshot() as cursor:
            return self._listing.runs(cursor)

    def page(self, token: str = "", size: int = DEFAULT_PAGE_SIZE) -> tuple[list[StoredRun], str]:
        """One page of runs, oldest first, and the token of the next page ("" after the last).
        Reads only the page, through the listing index; a token that is not one of ours raises
        ValueError."""
        with self._database.snapshot() as cursor:
            return self._listing.page(cursor, token, size)

    def newest(
        self, limit: int, suite: str | None = None, status: str | None = None
    ) -> list[StoredRun]:
        """The newest runs first, at most `limit`, of a suite and with a status when given
        (`in_progress` for runs not yet final); read backwards through the listing index."""
        with self._database.snapshot() as cursor:
            return self._listing.newest(cursor, limit, suite, status)

    def forget_finished(self, before: float, limit: int = 100) -> int:
        """Delete runs finished before `before` (epoch seconds), with their trials; how many.
        A SQLite store deletes up to `limit` rows of runs and their trials' rows; a PostgreSQL
        store drops every whole day whose runs were all admitted before `before`, with them
        (`TrialDays.forget_finished`: one replica at a time; a run still open keeps its day).
        Admissions already staged in the outbox are kept."""
        if self._days is not None:
            return self._days.forget_finished(before)
        with self._database.transaction() as cursor:
            return self._listing.forget_finished(cursor, before, limit)

    def latest_finished(self) -> list[tuple[StoredRun, float]]:
        """The run each (suite, point) finished last, with when, the most recent first: what a
        scrape endpoint shows again after a restart (read once, at start, through an index of
        finished runs by suite)."""
        with self._database.snapshot() as cursor:
            return self._listing.latest_finished(cursor)

    def finished_since(
        self, after: float, after_run: str = "", limit: int = 1000
    ) -> list[tuple[StoredRun, float]]:
        """The runs admitted after the position (`after`, epoch seconds; `after_run`, the run
        id at that time), with when, the oldest first, a page of at most `limit`."""
        with self._database.snapshot() as cursor:
            return self._listing.finished_since(cursor, after, after_run, limit)

    def inconclusive_streak(self, suite: str | None, point: str | None, most: int = 1000) -> int:
        """How many of the suite's latest finished runs in a row were inconclusive (at most
        `most`; read newest first through the index of finished runs by suite)."""
        with self._database.locked() as cursor:
            return self._listing.inconclusive_streak(cursor, suite, point, most)

    def run(self, run_id: str) -> StoredRun | None:
        """One run, or None when unknown."""
        with self._database.snapshot() as cursor:
            return self._runs.run(cursor, run_id)

    def close_runs(self, run_ids: Iterable[str], owner: str = LOCAL) -> list[str]:
        """Make final the runs `owner` holds, their admission still to be made (`finish`): from
        this commit on, their records are late. Those made final (a run another replica took
        over is not); its owner, or whoever takes it over, admits it."""
        with self._database.transaction() as cursor:
            return self._runs.close(cursor, run_ids, owner)

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

    def outbox_size(self) -> int:
        """Admissions waiting to be published (counted, in a shared store)."""
        if self.shared:
            with self._database.locked() as cursor:
                return self._outbox.count(cursor)
        return self._outbox.size
