"""The receiver: spans committed to the store, the run lifecycle driven, admissions published."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from ..assessment import Assessment, Isolation
from ..declaration import RunDeclaration
from ..engine import assess_declared, decided_round
from ..evidence import Evidence
from ..lifecycle import Decision, Final, Interim, Lifecycle, Look, Reason, Timing
from ..otel.admission_record import (
    OVERFLOW,
    AdmissionRecord,
    MetricLabels,
    TrialTally,
    streak_after,
)
from ..otel.otlp_reading import ExportContents
from ..otel.span_decoding import run_declaration
from ..otel.spans import run_attributes
from ..wire_types import AttributeValue
from .assessment_cache import AssessmentCache, CachedAssessment
from .commit_groups import CommitGroups
from .config import ReceiverConfig
from .database_clock import DatabaseClock, store_clock
from .fair_gate import Busy
from .finisher import Finisher
from .forwarder import Forwarder
from .limits import Limits
from .run_signals import RunSignals
from .store import LOCAL, RunVersion, Store, StoredRun, Written, is_store_error
from .store.batch import Batch, DueTrace, WriteCaps
from .store.faults import first_line, is_connection_lost, is_driver_error
from .store_outage import StoreOutage

if TYPE_CHECKING:
    from .prometheus_endpoint import PrometheusEndpoint

logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_Write = tuple[ExportContents, DueTrace | None]
"""What one write commits: a request's contents, or a due trace's trials to settle."""

TRACE_TTL = 600.0
"""Seconds a trace without a trial span is held (then dropped), and a settled trace remembered
(so that a late copy of its spans decides nothing again)."""
CLAIM_BATCH = 1000
"""Runs one claim takes at most (a takeover of more claims again)."""
SHOWN_PAGE = 1000
"""Other replicas' admissions read at once (a tick reads page after page)."""
SHOWN_MARGIN = 60.0
"""Seconds of other replicas' admissions read again at each tick, for commits that come late."""
FORGET_BATCHES = 20
"""Transactions of forgetting a tick makes at most: 20,000 traces a tick, ahead of any flood of
trial-less traces a receiver takes, and a bounded slice of the tick."""

RECOUNT_EVERY = 30.0
"""Seconds between two counts of what a shared store holds for its caps (framework spans held,
admissions staged): between them, each replica keeps its own estimate, counted again whenever
it says a cap is passed."""
RETENTION_EVERY = 60.0
"""Seconds between two retention passes."""
RETENTION_BATCH = 100
"""Runs one retention transaction deletes from a SQLite store (`Store.forget_finished`); a
PostgreSQL store drops whole days instead, whatever the batch."""


class Receiver:
    """Trials in, admissions out, by the one run lifecycle (`verdictgate.lifecycle`).

    A run is final when its declared plan is complete, when `idle` seconds pass without news
    after its run span, or, for a run judged by the sequential rule (its run span or its canary
    suite says so), at the first complete round of every case it declares that the rule
    decides; its answer is then that of the first round the rule decides, however the trials
    were batched. A run without a run span (a canary) is final after `idle` idle seconds, and
    with `window` it is also assessed every `window` seconds while it collects.

    Replicas may share one store (PostgreSQL): any takes any request, and each run is decided by
    one of them, its owner, that claimed it and follows what the others write to it. A replica
    owns its runs while its heartbeat holds (one row, renewed every third of `config.lease`);
    the runs of a replica whose heartbeat lapsed are taken over, and an admission is made once.

    A request is acknowledged after its commit. The open runs' evidence is kept in memory as
    the trials are committed, so a finish on a store of one process never reads a run back:
    the store is the durable log (read at start, to recover the open runs and the runs that
    were final but not yet admitted, and each tick for the runs this replica owns) and the
    outbox; in a shared store a finish reads the run, which other replicas may have written.
    Deciding that a run is final is committed with the request that completed it; assessing,
    staging and publishing its admission happen on the finisher's threads (each run's decisions
    in order, runs side by side), so a slow finish holds no ingest slot, no lock a request
    needs, and no other run's finish. With a `forwarder`, each admission is staged in the
    store's outbox in the same transaction that makes the run admitted, and delivered by the
    forwarder's own thread. A run holds at most `max_trials_per_run` trials; spans beyond that
    are rejected (partial success).

    A canary whose decision spans name a suite of the config's `canary_suites` is judged by
    that suite (its contract, cases and policy) instead of the default policy. `clock` (epoch
    seconds) times everything: the tick and the tests drive it. `outage` logs the store's
    outages, once when exports or ticks start failing for it and once when it answers again
    (by default on `clock`, telling `Limits`' default retry hint).
    """

    def __init__(
        self,
        store: Store,
        forwarder: Forwarder | None = None,
        config: ReceiverConfig | None = None,
        *,
        clock: Callable[[], float] | None = None,
        scrape: PrometheusEndpoint | None = None,
        outage: StoreOutage | None = None,
    ) -> None:
        config = self.config = config or ReceiverConfig()
        self.store = store
        self.forwarder = forwarder
        self.scrape = scrape
        """Where admissions' metrics are also shown for Prometheus to scrape."""
        self._tally = TrialTally()
        self._labels = MetricLabels(config.metric_suites, config.max_metric_suites)
        self._clock = clock = clock or store_clock(store)
        self.outage = outage or StoreOutage(Limits().unavailable_retry_after_seconds, clock=clock)
        """The store's outages, logged once each (exports and ticks tell it how they fared)."""
        self._signals = RunSignals()
        self._cache = AssessmentCache(
            self.assessment_of, interval=config.assess_interval, clock=clock
        )
        self._max_trials = config.max_trials_per_run
        self._caps = WriteCaps(config.max_trials_per_run, config.max_held_spans)
        self._next_retention = 0.0
        self._canary_suites = config.canary_suites
        self._lock = threading.Lock()
        """Orders commits and the lifecycle's events alike (and guards the lifecycle)."""
        self.commits: CommitGroups[_Write, Written] = CommitGroups(self._lock, self._commit)
        """Where writes wait to be committed: those that arrive while a group commits are
        committed together, by the next (`_commit`)."""
        self._admitting = threading.Lock()
        """Held while an admission made by a finisher thread is published and committed (never
        while a run is assessed)."""
        self.replica = config.replica or (_replica_name() if store.shared else LOCAL)
        """This receiver's name among the replicas of its store (the owner of the runs it
        decides, and the outbox entries its forwarder delivers)."""
        if forwarder is not None:
            forwarder.claim_as(self.replica, config.lease)
        self._known: dict[str, RunVersion] = {}
        """The open runs this replica decides, each with the version of it the lifecycle holds."""
        self._finals: dict[str, RunVersion] = {}
        """Runs this replica made final, each with the version its final evidence holds: a run
        the store holds at that version is admitted on that evidence, never read back."""
        self._set_aside: set[str] = set()
        self._shown: dict[str, float] = {}
        """Runs admitted lately that the scrape endpoint shows (their admission's time)."""
        self._shown_until = clock()
        """The latest admission time the scrape endpoint has shown (from start on)."""
        self._next_claim = 0.0
        self._heartbeat = threading.Lock()
        self._renewed_at = -math.inf
        """When this replica's heartbeat was last renewed (by the tick or its own thread)."""
        self._next_recount = 0.0
        self._store_was_away = False
        """The last tick's store failed it: the next one renews its heartbeat, and takes over a
        lease later."""
        self._away = False
        """A tick failed for the store being away (exports refused meanwhile): the first that
        works again gives every open run a full idle period, and every trace a full settle."""
        self._amended: set[str] = set()
        """Runs this replica decides whose trials were amended (derived again) since the tick
        last read them."""
        self._lifecycle = Lifecycle(
            Timing(idle=config.idle, window=config.window, run_span_ends_run=False),
            self._canary_declaration,
        )
        self._finisher = Finisher(self._do)
        self._late_logged: set[str] = set()
        self._let_go_logged = False
        """Runs whose late framework spans were logged (once a run)."""
        if scrape is not None:
            self._show_latest(scrape)
        self._recover()

    def _recover(self) -> None:
        """Take up the store's open runs again (their evidence read once), and finish the runs
        that were final but not yet admitted when the process stopped; in a shared store, those
        whose owner's heartbeat lapsed."""
        with self._lock:
            now = self._clock()
            self._renew(now)  # alive before it claims anything
            # a store no other process writes: whoever owned its runs is gone
            self._take_over(now, mine=True, lapsed_before=None if self.store.shared else math.inf)
            self._lifecycle.resumed(now)  # nothing was taken while the process was down
            self._advance(now)  # a run whose plan was complete when it stopped

    def _take_over(
        self, now: float, mine: bool = False, lapsed_before: float | None = None
    ) -> None:
        """Claim the runs whose owner's heartbeat lapsed before `lapsed_before` (by default
        `now`), and with
        `mine` this replica's own (a store reopened): an open one into the lifecycle, a final
        one still to admit to the finisher (the lock is held). Claims run out in batches, so
        that a takeover of many runs is taken in full."""
        lapsed = now if lapsed_before is None else lapsed_before
        while claimed := self.store.claim_runs(self.replica, lapsed, CLAIM_BATCH, mine=mine):
            for run in claimed:
                self._take_up(run)
            mine = False  # the runs claimed are this replica's now: claim what is left
            if len(claimed) < CLAIM_BATCH:
                return

    def _take_up(self, run: StoredRun) -> None:
        """A run this replica owns and does not hold (claimed, or left behind by a fault): an
        open one into the lifecycle, a final one still to admit to the finisher (the lock is
        held). A run whose stored declaration cannot be read is set aside; a store fault leaves
        it for the next tick to take up."""
        work = self._admit_recovered if run.final else self._restore
        if _isolated(run.run_id, functools.partial(work, run)) is False:
            self._lifecycle.set_aside(run.run_id)
            self._set_aside.add(run.run_id)

    def _restore(self, run: StoredRun) -> None:
        """An open run into the lifecycle, as the store holds it at `run.version` (in a shared
        store what later writes stored is caught up with at the next tick), with a full idle
        period from now: exports its last owner refused (dead, stalled, or restarting) are
        still being retried."""
        upto = run.version if self.store.shared else None
        evidence = self.store.evidence(run.run_id, upto=upto)
        self._known[run.run_id] = run.version
        if run.framework:
            self._lifecycle.amendable(run.run_id)
        self._lifecycle.restore(
            run.run_id,
            evidence,
            self._declaration(run),
            declared=run.declared is not None,
            opened=run.first_seen,
            last_news=max(run.last_seen, run.declared_at or 0.0, self._clock()),
        )

    def _admit_recovered(self, run: StoredRun) -> None:
        """A run made final before a restart (or by a replica that died since), to the
        finisher."""
        evidence, declaration = self.store.evidence(run.run_id), self._declaration(run)
        self._finisher.put(
            Final(run.run_id, Reason.RECOVERED, evidence, declaration, run.declared is not None)
        )

    def _show_latest(self, scrape: PrometheusEndpoint) -> None:
        """Show again the latest admission of every (suite, point) metrics may name, as it
        stood when it was made, so that a restart does not resolve an alert on a rejected run
        (its trials were counted before)."""
        for run, finished_at in self.store.latest_finished():
            self._show(scrape, run, finished_at)
            self._shown_until = max(self._shown_until, finished_at)

    def _show(self, scrape: PrometheusEndpoint, run: StoredRun, finished_at: float) -> bool:
        """Show an admission made before (at start, or by another replica) as it stood when it
        was made, its trials counted where it was made; nothing for a run beyond the label
        limit (nothing of it was shown as its own). False when it could not be shown now."""
        if OVERFLOW in self._labels.base(run.suite or "", run.point or ""):
            return True

        def show() -> None:
            publication = AdmissionRecord.of(
                self.assessment_of(run),
                self._declaration(run).metric_routes,
                TrialTally(),
                now_ns=int(finished_at * 1e9),
                labels=self._labels,
                inconclusive_streak=self.store.inconclusive_streak(run.suite, run.point),
            )
            scrape.emit(replace(publication, trials_added={}))

        return _isolated(run.run_id, show) is True

    def _show_others(self) -> None:
        """In a shared store, show what the other replicas admitted since the last tick, so
        that every replica's scrape endpoint shows the latest admission of each suite, whoever
        made it (read through the index of finished runs: the admissions since, a margin of
        SHOWN_MARGIN seconds kept for commits that come late or clocks a little apart)."""
        if self.scrape is None or not self.store.shared:
            return
        newest: dict[tuple[str | None, str | None], tuple[StoredRun, float]] = {}
        position = (self._shown_until - SHOWN_MARGIN, "")
        while page := self.store.finished_since(*position, SHOWN_PAGE):
            with self._admitting:  # the finisher marks this replica's own as shown
                for run, finished_at in page:
                    self._shown_until = max(self._shown_until, finished_at)
                    if run.run_id in self._shown:
                        continue
                    key = (run.suite, run.point)
                    if key in newest and newest[key][1] > finished_at:
                        self._shown[run.run_id] = finished_at  # superseded: never shown
                        continue
                    if key in newest:
                        self._shown[newest[key][0].run_id] = newest[key][1]
                    newest[key] = (run, finished_at)
            position = (page[-1][1], page[-1][0].run_id)
            if len(page) < SHOWN_PAGE:
                break
        for run, finished_at in newest.values():  # one a suite; one that fails is tried again
            if self._show(self.scrape, run, finished_at):  # at the next tick
                with self._admitting:
                    self._shown[run.run_id] = finished_at
        with self._admitting:
            horizon = self._shown_until - SHOWN_MARGIN
            for run_id in [run_id for run_id, at in self._shown.items() if at < horizon]:
                del self._shown[run_id]

    # Events in

    def ingest(self, extract: ExportContents) -> None:
        """Commit what a request holds (returns after the commit, with the runs it completed
        made final). Harnesses' trial spans and framework spans are held by trace until it
        settles."""
        if not (extract.trials or extract.declarations or extract.marks or extract.framework_spans):
            return
        try:
            self._write(extract)
        except Exception as error:
            if is_store_error(error):
                self.outage.failed(error, export=True)
            raise
        self.outage.worked()

    def _refusal(self, contents: ExportContents, opening: set[str]) -> Busy | None:
        """Busy (its sender retries) for a request that would open runs past `max_open_runs`,
        each of which holds its evidence in memory here, counting those the requests before it
        in its group may open (`opening`, to which it adds its own). Only at the cap is a run id
        the replica does not hold looked up: one that exists already (another replica decides
        it, or it is final) costs nothing here."""
        new = {run for run in contents.run_ids() if run not in self._known}
        held = len(self._known) + len(opening)
        if held >= self.config.max_open_runs and any(
            run not in opening and self.store.run(run) is None for run in new
        ):
            return Busy(
                f"this replica decides {held:,} open runs, its --max-open-runs: a new run is "
                "taken once some are final (retry later)"
            )
        opening |= new
        return None

    def tick(self) -> None:
        """Settle the traces whose trials are due; hand the runs whose idle period is over (but
        those with a trial due by now still to settle), the canary windows that are due and new
        sequential rounds to the finisher; with `retain`, forget runs finished longer ago than
        that (at most once a minute: a SQLite store deletes them through an index of finished
        runs by age, a PostgreSQL store drops the days whose runs all finished before, so the
        cost follows what is forgotten, not the history). On a shared store, measure the offset to the
        database's clock first (`DatabaseClock`)."""
        try:
            self._tick()
        except Exception as error:
            if is_connection_lost(error):  # away: exports are refused meanwhile
                self._away = self._store_was_away = True
            if is_store_error(error):
                self.outage.failed(error, export=False)
            raise
        self.outage.worked()

    def _tick(self) -> None:
        if isinstance(self._clock, DatabaseClock):
            self._clock.measure()
        now = self._clock()
        with self._lock:
            self._follow(now)
            self._came_back(now)
        self._show_others()
        waiting: frozenset[str] | None = frozenset()  # None: which runs wait is not known
        try:
            waiting = self._settle_traces(now)
        except Exception as error:  # a settling the store failed holds every timer back: a
            waiting = None if is_store_error(error) else frozenset()  # trial due may yet settle
            raise
        finally:
            with self._lock:  # a run is never idle while a trial of it due by `now` waits
                self._read_amended()
                self._advance(now, timers=waiting is not None, waiting=waiting or frozenset())
        retain = self.config.retain
        if retain is not None and now >= self._next_retention:
            self._next_retention = now + RETENTION_EVERY
            while self.store.forget_finished(now - retain, RETENTION_BATCH) == RETENTION_BATCH:
                pass

    def resume(self) -> None:
        """No export could be taken until now (the process was paused, or its transports were
        away): every open run has a full idle period, and every trace a full settle, from now
        (the server's ticker calls this when it woke far later than it asked)."""
        with self._lock:
            self._lifecycle.resumed(self._clock())

    def _refused(self, contents: ExportContents, now: float) -> None:
        """A write the store failed (the lock is held): its sender retries it, so each open run
        it brought news of has a full idle period from now (other runs wait for nothing)."""
        for run_id in contents.run_ids():
            self._lifecycle.heard(run_id, now)

    def _read_amended(self) -> None:
        """Read again, once, the runs this replica decides whose trials were amended since the
        last look (the lock is held): each as the store holds it now."""
        for run_id in sorted(self._amended):
            if run_id in self._known:
                self._or_set_aside(run_id, functools.partial(self._read_again, run_id))
            self._amended.discard(run_id)

    def _read_again(self, run_id: str) -> None:
        """Give the lifecycle a run's trials as the store holds them (the lock is held)."""
        upto = self._known[run_id] if self.store.shared else None
        self._lifecycle.amend(run_id, self.store.evidence(run_id, upto=upto))

    def _came_back(self, now: float) -> None:
        """A tick the store took (the lock is held): after it was away, every open run and trace
        has its full time from now, so that the exporters' retries land in it."""
        if self._away:
            self._away = False
            self._lifecycle.resumed(now)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every run handed to the finisher is admitted (and every window staged);
        False if `timeout` seconds passed first."""
        return self._finisher.flush(timeout)

    def close(self) -> None:
        """Stop the finisher after what it holds (runs made final but not admitted stay in the
        store, and are finished at the next start). In a shared store this replica's claims
        then lapse at once, so that the other replicas take its runs and its outbox entries
        over at their next look."""
        self._finisher.stop()
        if self.store.shared:
            try:
                self.store.release(self.replica)
            except Exception as error:
                if not is_store_error(error):
                    raise
                logger.warning(
                    "verdictgate: could not hand this replica's runs over (%s); the other "
                    "replicas take them over once its heartbeat lapses",
                    error,
                )

    def renew_leases(self) -> None:
        """Renew this replica's heartbeat, which holds every run it owns, when it is due (a
        shared store's; its own thread calls this every sixth of a lease, whatever the tick is
        busy with)."""
        self._renew(self._clock())

    def _renew(self, now: float) -> None:
        """The one place the heartbeat is written: once a quarter of a lease has passed since it
        last was, by the tick (every third of a lease) or the renewal thread (every sixth),
        whichever asks first (an ask while the other is renewing leaves it to that one); so it
        is written about every third of a lease, and never more than half a lease apart."""
        if not self.store.shared or not self._heartbeat.acquire(blocking=False):
            return  # the other caller is renewing it now
        try:
            if now >= self._renewed_at + self.config.lease / 4:
                self.store.renew(self.replica, now + self.config.lease)
                self._renewed_at = now
        finally:
            self._heartbeat.release()

    def _follow(self, now: float) -> None:
        """At each tick (the lock is held), the store is what the lifecycle follows: the runs
        this replica decides catch up with what other replicas wrote to them, a run another
        replica took over is let go, and a run it owns but does not hold (a fault between a
        commit and the lifecycle, or a finish that failed) is taken up again. In a shared store,
        every third of a lease its heartbeat is renewed and the runs of replicas whose heartbeat
        lapsed are taken over. Reads the runs this replica owns (open work), never the history."""
        if self.store.shared and now >= self._next_claim:
            self._renew(now)
            self._next_claim = now + self.config.lease / 3
            if self._store_was_away:  # every heartbeat lapsed meanwhile: the replicas that come
                self._store_was_away = False  # back renew theirs before any is taken over
                self._next_claim = now + self.config.lease
            else:
                self._take_over(now)
            if now >= self._next_recount:
                self._next_recount = now + RECOUNT_EVERY
                self.store.recount()
        owned = self.store.owned_runs(self.replica)
        for run_id in [run_id for run_id in self._known if run_id not in owned]:
            del self._known[run_id]  # taken over by another replica
            self._lifecycle.release(run_id)
        for run_id, (version, final) in owned.items():
            known = self._known.get(run_id)
            if known is not None:
                if version > known.writes and (run := self.store.run(run_id)):
                    self._or_set_aside(run_id, functools.partial(self._catch_up, run, known))
            elif (
                run_id not in self._set_aside
                and not self._finisher.holds(run_id)
                and (run := self.store.run(run_id)) is not None
                and run.status is None
                and (final or not run.final)
            ):
                self._take_up(run)
        self._advance(now)

    def _catch_up(self, run: StoredRun, known: RunVersion) -> None:
        """Tell the lifecycle what other replicas wrote to a run this one decides since it held
        version `known` (the lock is held): its run span, its trials, that it had news."""
        lifecycle, seen = self._lifecycle, run.last_seen
        if run.framework:
            lifecycle.amendable(run.run_id)
        if run.declared is not None:
            lifecycle.ended(run.declared, seen)
        trials = self.store.written_since(run.run_id, known, run.version)
        if lifecycle.holds(run.run_id, trials):  # trials derived again: read again, once,
            self._amended.add(run.run_id)  # by the tick
        else:
            lifecycle.record_all(run.run_id, trials, seen, run.suite, run.point)
        lifecycle.heard(run.run_id, seen)
        self._known[run.run_id] = run.version

    def _write(self, contents: ExportContents, settle: DueTrace | None = None) -> Written:
        """Commit what an export request holds (trials, run spans' declarations, trial marks and
        framework spans, checked at the door), with the writes that came while the last group
        was committing (`_commit`); returns once committed, then wakes the watchers of the runs
        touched; trials refused at their run's limit are counted in `contents`. With `settle`
        (a trace, quiet since, held since) the trials are that trace's due ones, read and
        stored under the same lock, so no span lands between the reading and the settling. What
        the write did."""
        written = self.commits.submit((contents, settle))
        self._log_late_and_let_go(written)
        if written.refused:
            self._reject_beyond_limit(contents, written.refused)
        self._signals.notify(run.run_id for run in written.runs)
        return written

    def _commit(self, group: list[_Write]) -> list[Written | Exception]:
        """Commit a group of writes in one transaction (the lock is held), then tell the
        lifecycle what each committed, in order, and make the runs they completed final; what
        each did. A write is refused alone, never failing the others of its group: one that
        would open runs past `max_open_runs` (Busy, not written), one the store refuses for what
        it holds (`Store.together`); one the store failed counts as news of its runs
        (`_refused`)."""
        now, opening = self._clock(), set[str]()
        refusals = [self._refusal(contents, opening) for contents, _ in group]
        taken = [write for write, refusal in zip(group, refusals, strict=True) if refusal is None]
        done = iter(
            self.store.together(
                [
                    functools.partial(self._written, contents, now, settle)
                    for contents, settle in taken
                ]
            )
        )
        outcomes = [next(done) if refusal is None else refusal for refusal in refusals]
        try:
            for (contents, _), outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, Written):
                    self._record(outcome, contents.declarations, now)
                elif is_store_error(outcome):
                    self._refused(contents, now)
            self._advance(now)
        except Exception as error:  # what was committed is acknowledged: never sent again
            _log_after_commit(error)
            self._let_go_of(outcomes)  # the next tick takes their runs up (`_follow`)
        return outcomes

    def _let_go_of(self, outcomes: Sequence[Written | Exception]) -> None:
        """The runs of a committed group whose following failed, no longer held here, so that
        the next tick takes each up whole from the store (what this replica wrote as a run's
        owner is never caught up with piece by piece)."""
        for outcome in outcomes:
            if isinstance(outcome, Written):
                for run in outcome.runs:
                    if self._known.pop(run.run_id, None) is not None:
                        self._lifecycle.release(run.run_id)

    def _written(self, contents: ExportContents, now: float, settle: DueTrace | None) -> Written:
        """One write, in its group's transaction (the lock is held)."""
        batch = Batch(
            contents.trials,
            contents.declarations,
            contents.labels,
            contents.marks,
            contents.framework_spans,
            settle,
        )
        return self.store.write(
            batch,
            now,
            (self.replica, now + self.config.lease),
            self._caps,
            amend_since=now - self.config.max_hold,
        )

    def _record(
        self, written: Written, declared: Sequence[dict[str, AttributeValue]], now: float
    ) -> None:
        """Tell the lifecycle what a write committed to the runs this replica decides, in
        commit order (the lock is held): the runs whose run span ended them, the trials each
        run took, the runs heard of. A run it holds that other replicas wrote to since first
        catches up with what they relayed (its own writes are never read back); one it claimed
        in this write is taken up whole."""
        lifecycle, direct, caught_up = self._lifecycle, set(), set()
        for run in written.runs:
            if run.owner != self.replica or run.final or run.run_id in self._set_aside:
                continue  # another replica decides it, or it is over (the store counted it late)
            known = self._known.get(run.run_id)
            if run.run_id in written.claimed or (known is None and run.version.writes > 1):
                if known is not None:  # held since before another replica owned it meanwhile
                    del self._known[run.run_id]
                    lifecycle.release(run.run_id)
                self._take_up(run)  # an existing run, claimed by this write
                continue
            if known is not None and known.writes != run.version.writes - 1:
                self._catch_up(run, known)
                caught_up.add(run.run_id)
            else:
                direct.add(run.run_id)
                self._known[run.run_id] = run.version
                if run.framework:  # its plan complete ends it only once idle: spans may come
                    lifecycle.amendable(run.run_id)
        for attributes in declared:
            declaration = run_declaration(attributes)
            if declaration.run_id in direct:
                lifecycle.ended(declaration, now)
        for run_id, accepted in written.accepted.items():
            if run_id in direct or run_id in caught_up:
                suite, point = written.labels.get(run_id, (None, None))
                lifecycle.record_all(run_id, accepted, now, suite, point)
        for run_id in written.heard & direct:
            lifecycle.heard(run_id, now)
        self._amended |= written.amended.keys() & (direct | caught_up)  # read again, by the tick

    def _log_late_and_let_go(self, written: Written) -> None:
        """Warn of framework spans that came after their trial settled (once a run) and of
        framework spans let go to stay within the held-span caps (once)."""
        for run_id, late in written.late_spans.items():
            if run_id not in self._late_logged:
                if len(self._late_logged) >= 10_000:  # a log line a run, not a set for ever
                    self._late_logged.clear()
                self._late_logged.add(run_id)
                logger.warning(
                    "run %.80s: %d framework spans came after their trial was settled (counted "
                    "late; raise --settle if the agent's spans take longer to arrive)",
                    run_id,
                    late,
                )
        if written.let_go and not self._let_go_logged:
            self._let_go_logged = True
            logger.warning(
                "framework spans are being let go to stay within --max-held-spans (%d) or a "
                "trace's 50,000: traces without a trial span, quiet the longest, go first "
                "(logged once; Store.spans_let_go counts them)",
                self.config.max_held_spans,
            )

    def _reject_beyond_limit(self, extract: ExportContents, refused: Mapping[str, int]) -> None:
        """Count in the request's partial success the trials refused because their run holds
        `max_trials_per_run` already."""
        extract.rejected += sum(refused.values())
        extract.errors.append(
            f"runs at their limit of {self._max_trials} trials: " + ", ".join(sorted(refused)[:3])
        )

    def _advance(
        self, now: float, timers: bool = False, waiting: frozenset[str] = frozenset()
    ) -> None:
        """Make final in the store the runs the lifecycle says are over, and hand what is due
        to the finisher (the lock is held). Idle periods and windows (`timers`) are looked at
        by the tick alone, after it settled the trials due by the same `now`; the runs
        `waiting` for a due trial to settle are not idle yet."""
        decisions = self._lifecycle.due(now, timers, waiting)
        finals = [d.run_id for d in decisions if isinstance(d, Final)]
        versions = {run_id: self._known.pop(run_id, None) for run_id in finals}
        closed = self._close(finals) if finals else set()  # a close that fails leaves them
        for run_id in closed:  # open in the store: the next tick takes them up (`_follow`)
            if (version := versions[run_id]) is not None:
                self._finals[run_id] = version
        for decision in decisions:
            if not isinstance(decision, Final) or decision.run_id in closed:
                self._finisher.put(decision)  # a run another replica took over is its to admit

    def _close(self, finals: list[str]) -> set[str]:
        """Make runs final in the store (the lock is held); the runs closed. When the store
        refuses one for what it holds (not for being away), they are closed one by one and that
        one is set aside alone."""
        try:
            return set(self.store.close_runs(finals, self.replica))
        except Exception as error:
            if is_store_error(error):
                raise
        closed: set[str] = set()
        for run_id in finals:
            close = functools.partial(self.store.close_runs, [run_id], self.replica)
            closed.update(self._or_set_aside(run_id, close) or ())
        return closed

    def _or_set_aside(self, run_id: str, work: Callable[[], _T]) -> _T | None:
        """Do one run's part of a tick (the lock is held). A run the store refuses for what it
        holds, or whose work fails for a bug, is set aside alone (`_log_set_aside`), so that one
        never stops the others; None then. The store being away is raised: the tick is tried
        again."""
        try:
            return work()
        except Exception as error:
            if is_store_error(error):
                raise
            _log_set_aside("run", run_id, error)
        self._known.pop(run_id, None)
        self._lifecycle.set_aside(run_id)
        self._set_aside.add(run_id)
        return None

    def _settle_traces(self, now: float) -> frozenset[str]:
        """Derive and store the trials whose own spans (the trial span and those below it) have
        been quiet for the settle time, whatever else shares their trace, or whose trial span
        has waited `max_hold` (settled from what has arrived; later spans are late): a trace's
        due trials in one transaction with marking them settled. Neither wait counts time
        before exports could be taken again (`resume`). Forget traces with no trial left to
        settle, once quiet for TRACE_TTL (FORGET_BATCHES batches at most). The runs whose due
        trials are still to settle (more than `settle_batch` traces were due, or another
        transaction held a due trace: another replica settling it, never waited for): they are
        not idle until a later tick settled them, and no other run waits for them."""
        quiet_since = self._since(now - self.config.settle)
        held_since = self._since(now - self.config.max_hold)
        waiting: frozenset[str] = frozenset()
        if quiet_since or held_since:
            due = self.store.quiet_traces(quiet_since, held_since, self.config.settle_batch)
            busy = False
            for trace_id in due:
                try:
                    written = self._write(
                        ExportContents(), settle=(trace_id, quiet_since, held_since)
                    )
                    busy |= written.busy
                except Exception as error:
                    if is_store_error(error):
                        raise
                    _log_set_aside("trace", trace_id, error)
                    self.store.set_aside_trace(trace_id)
            if busy or len(due) >= self.config.settle_batch:
                waiting = self.store.runs_waiting(quiet_since, held_since)
        batch = self.config.settle_batch  # a settled trial's spans are let go once its trace
        for before, forget in (  # was quiet for the idle period (later spans are late), its
            (now - self.config.idle, self.store.release_settled),  # trace once quiet for
            (now - TRACE_TTL, self.store.forget_traces),  # TRACE_TTL
        ):
            for _ in range(FORGET_BATCHES):
                if forget(before, batch) < batch:
                    break
        return waiting

    def _since(self, cutoff: float) -> float:
        """A settling cutoff (spans quiet, or held, since before it are due), or 0.0 (nothing is
        due) while exports have been taken again for less than that wait."""
        return cutoff if self._lifecycle.resumed_at <= cutoff else 0.0

    # The finisher's side

    def _do(self, decision: Decision) -> None:
        """Finish a run, stage a window, or judge a sequential look (on the finisher). A store
        fault is the store's outage to log (a run it failed to admit is taken up again by a
        later tick); a run that cannot be admitted for any other fault is set aside."""
        try:
            self._decide(decision)
        except Exception as error:
            if not is_store_error(error):
                if isinstance(decision, Final):  # not to be tried again at every tick
                    self._set_aside.add(decision.run_id)
                raise
            self.outage.failed(error, export=False)

    def _decide(self, decision: Decision) -> None:
        if isinstance(decision, Look):
            if decided_round(
                decision.evidence, decision.declaration, decision.first, decision.last
            ):
                with self._lock:
                    self._lifecycle.close(decision.run_id, Reason.SEQUENTIAL)
                    self._advance(self._clock())
        elif isinstance(decision, Final):
            self._finish(decision)
        else:
            self._stage_window(decision)

    def _finish(self, final: Final) -> None:
        """Admit a run made final: assess its evidence, commit the admission (staged for
        publishing in the same transaction, once), show it, and wake its watchers. A canary
        keeps the suite it was judged by, so that it reads the same later, whatever the
        receiver is then told."""
        held = self._finals.pop(final.run_id, None)
        run = self.store.run(final.run_id)
        if run is None or run.status is not None:
            return
        declaration, declared, evidence = final.declaration, final.declared, final.evidence
        if self.store.shared:  # other replicas' last trials, and a run span one of them took
            if held != run.version or run.run_id in self._amended:  # written since the
                evidence = self.store.evidence(run.run_id)  # lifecycle last caught up
                evidence = self.store.evidence(run.run_id)
            if run.declared is not None:
                declaration, declared = run.declared, True
        final = replace(final, declaration=declaration, declared=declared)
        assessment = self.assessment_of(run, declaration, evidence)
        with self._admitting:  # a suite's runs admitted one at a time: their streak counts
            now = self._clock()  # when it was admitted, for the store and the metrics alike
            publication = self._publication(assessment, run, final=True, now=now)
            finished = self.store.finish(
                run.run_id,
                assessment.status.value,
                publication.to_json() if publication and self.forwarder else None,
                now,
                declaration=None if final.declared else self._canary_record(final, assessment),
            )
            if finished:
                self._cache.put(run, assessment)
                if publication is not None and self.scrape is not None:
                    self.scrape.emit(publication)
                    self._shown[run.run_id] = now
        if finished:
            self._staged()
        self._signals.notify((run.run_id,))

    def _stage_window(self, interim: Interim) -> None:
        """Stage an interim admission of an open canary (never after its final one)."""
        run = self.store.run(interim.run_id)
        if run is None or run.status is not None or run.owner != self.replica:
            return  # never after its final admission, nor for a run another replica took
        evidence = self.store.evidence(run.run_id) if self.store.shared else interim.evidence
        assessment = self.assessment_of(run, interim.declaration, evidence, in_progress=True)
        with self._admitting:
            publication = self._publication(assessment, run, final=False, now=self._clock())
            if publication is None:
                return
            if self.forwarder is not None and not self.store.stage(
                run.run_id, publication.to_json()
            ):
                return
            if self.scrape is not None:
                self.scrape.emit(publication)
        self._staged()

    def _canary_record(self, final: Final, assessment: Assessment) -> str | None:
        """What a canary judged by a suite keeps as its declaration: the suite's contract and
        policy, how many cases it has, and the trials it was expected to hold."""
        declaration = final.declaration
        if declaration.suite.name not in self._canary_suites:
            return None
        attributes = run_attributes(
            run_id=final.run_id,
            suite=declaration.suite,
            policy=declaration.policy,
            planned_trials=assessment.trials.expected,
            isolation=declaration.isolation or Isolation.UNKNOWN,
        )
        return json.dumps(attributes)

    def _publication(
        self,
        assessment: Assessment,
        run: StoredRun,
        final: bool,
        now: float | None = None,
    ) -> AdmissionRecord | None:
        """The admission to publish, when the receiver publishes (over OTLP or a scrape
        endpoint); metric routes are limited to the declared contract."""
        if self.forwarder is None and self.scrape is None:
            return None
        return AdmissionRecord.of(
            assessment,
            self._declaration(run).metric_routes,
            self._tally,
            final=final,
            now_ns=None if now is None else int(now * 1e9),
            labels=self._labels,
            inconclusive_streak=streak_after(
                self.store.inconclusive_streak(run.suite, run.point), assessment, final
            ),  # the runs finished before this one, then this admission
        )

    def _staged(self) -> None:
        if self.forwarder is not None:
            self.forwarder.wake()

    # Queries

    def cached_assessment(self, run_id: str) -> CachedAssessment | None:
        """The current admission of a run (inconclusive `in_progress` until final), with its
        rendered reports; None if unknown. The one way every query reaches an assessment:
        cached per run version, an open run re-assessed at most every `assess_interval`
        seconds however many ask."""
        run = self.store.run(run_id)
        return None if run is None else self._cache.get(run)

    def assessment(self, run_id: str) -> Assessment | None:
        """The run's assessment alone, through `cached_assessment`."""
        cached = self.cached_assessment(run_id)
        return None if cached is None else cached.assessment

    def watch(
        self, run_id: str, active: Callable[[], bool] = lambda: True, poll: float = 1.0
    ) -> Iterator[CachedAssessment]:
        """Each new admission of a run until it is final (a run not seen yet is waited for),
        while `active()` (asked at least every `poll` seconds), through `cached_assessment`;
        woken only by changes of this run."""
        with self._signals.watching(run_id) as changed:
            last = None
            while active():
                cached = self.cached_assessment(run_id)
                if cached is not None and cached is not last:
                    last = cached
                    yield cached
                    if not cached.assessment.in_progress:
                        return
                # an entry made less than the cache's interval ago may be stale: ask again then
                changed((self._cache.retry_in(cached) or poll) if cached is not None else poll)

    def wait(self, run_id: str, timeout: float) -> Assessment | None:
        """Wait until the run is final or `timeout` seconds pass; its admission then."""
        deadline = time.monotonic() + timeout
        latest = None
        for cached in self.watch(run_id, lambda: time.monotonic() < deadline):
            latest = cached.assessment
        return latest if latest is not None else self.assessment(run_id)

    def list_runs(self, page_token: str = "", page_size: int = 0) -> tuple[list[StoredRun], str]:
        """One page of runs, oldest first, and the next page's token ("" after the last); a
        token that is not one of ours raises ValueError. `page_size` 0 is the default size."""
        return self.store.page(page_token, page_size)

    def newest_runs(
        self, limit: int, suite: str | None = None, status: str | None = None
    ) -> list[StoredRun]:
        """The newest runs first, at most `limit`, of a suite and with a status when given
        (`in_progress` for runs not yet final)."""
        return self.store.newest(limit, suite, status)

    def assessment_of(
        self,
        run: StoredRun,
        declaration: RunDeclaration | None = None,
        evidence: Evidence | None = None,
        *,
        in_progress: bool | None = None,
    ) -> Assessment:
        """Assess a run, uncached (the cache, the finisher and a restart's metrics do): on
        `evidence` (read from the store unless given), judged by `declaration` (the run's own
        unless given), in progress, unless told, while the run is open."""
        return assess_declared(
            self.store.evidence(run.run_id) if evidence is None else evidence,
            self._declaration(run) if declaration is None else declaration,
            in_progress=not run.final if in_progress is None else in_progress,
            late=run.late,
            declaration_conflict=run.declaration_conflict,
        )

    def _declaration(self, run: StoredRun) -> RunDeclaration:
        """What the run is judged by: its run span, or its canary suite's, or the default."""
        if run.declared is not None:
            return run.declared
        return self._canary_declaration(run.run_id, run.suite, run.point)

    def _canary_declaration(
        self, run_id: str, suite: str | None, point: str | None
    ) -> RunDeclaration:
        known = self._canary_suites.get(suite or "")
        if known is not None:
            return RunDeclaration.of_suite(run_id, known)
        return RunDeclaration.default(run_id, suite, point)


def _replica_name() -> str:
    """A name no other replica has: this host's, this process's, and a random part (a replica
    restarted is a new one, and waits for its old leases to lapse like any other)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def _log_set_aside(kind: str, key: str, error: Exception) -> None:
    """The line for a run or trace set aside, so that one never stops the tick for the others:
    one line when the store refused what it holds (a poison value), the traceback when
    nothing planned for the error (a bug)."""
    if is_driver_error(error):
        logger.warning(
            "verdictgate: %s %.80s is set aside, the others go on: %s: %s",
            kind,
            key,
            type(error).__name__,
            first_line(error),
        )
    else:
        logger.error(
            "verdictgate: %s %.80s is set aside, the others go on", kind, key, exc_info=error
        )


def _log_after_commit(error: Exception) -> None:
    """A fault after a group committed (the store away while runs were closed, or a bug): its
    requests are acknowledged all the same, since what they sent is stored, and the next tick
    takes the runs up from the store."""
    if is_store_error(error):
        logger.warning(
            "verdictgate: a committed write's runs wait for the next tick (%s)", first_line(error)
        )
    else:
        logger.error("verdictgate: following a committed write failed", exc_info=error)


def _isolated(run_id: str, work: Callable[[], object]) -> bool | None:
    """Do one run's work; a run that cannot be assessed is logged (False), a store fault too
    (None: the work is to be tried again), and neither stops a request, the tick or other
    runs."""
    try:
        work()
    except Exception as error:
        if is_store_error(error):
            logger.warning("verdictgate: run %s waits for the store (%s)", run_id, error)
            return None
        logger.warning("verdictgate: run %s cannot be assessed", run_id, exc_info=True)
        return False
    return True
