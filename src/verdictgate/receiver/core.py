"""The receiver: spans committed to the store, the run lifecycle driven, admissions published."""

from __future__ import annotations

import functools
import os
import secrets
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..engine import decided_round
from ..lifecycle import Final, FinalReason, Interim, Lifecycle, Look, Ruling, Timing
from ..otel.admission_record import MetricLabels
from ..otel.otlp_reading import ExportContents
from ..otel.span_decoding import DeclaredRun
from .config import ReceiverConfig
from .ingest.commit_groups import CommitGroups
from .ingest.fair_gate import Busy
from .ingest.settling import TraceSettling, settled_batch
from .ingest.span_warnings import SpanWarnings
from .limits import Limits
from .publishing.admitting import Admitter, Publishing
from .publishing.finisher import Finisher
from .publishing.forwarder import Forwarder
from .publishing.judging import Judge
from .publishing.shown_admissions import ShownAdmissions
from .queries.run_queries import RunQueries
from .replication.database_clock import DatabaseClock, store_clock
from .replication.ownership import Ownership
from .run_faults import log_after_commit
from .store import LOCAL, Store, Written, is_store_error
from .store.batch import Batch, DueTrace, WriteCaps
from .store.faults import is_connection_lost
from .store_outage import StoreOutage

if TYPE_CHECKING:
    from .publishing.prometheus_endpoint import PrometheusEndpoint

_Write = tuple[ExportContents, DueTrace | None]
"""What one write commits: a request's contents, or a due trace's trials to settle."""

RETENTION_EVERY = 60.0
"""Seconds between two retention passes."""
RETENTION_BATCH = 100
"""Runs one retention transaction deletes from a SQLite store (`Store.forget_finished`); a
PostgreSQL store drops whole days instead, whatever the batch."""


class Receiver(RunQueries):
    """Trials in, admissions out, by the one run lifecycle (`verdictgate.lifecycle`): ingest,
    then the lifecycle, then the finisher.

    A run is final when its declared plan is complete, when `idle` seconds pass without news
    after its run span, or, for a run judged by the sequential rule (its run span or its canary
    suite says so), at the first complete round of every case it declares that the rule
    decides; its answer is then that of the first round the rule decides, however the trials
    were batched. A run without a run span (a canary) is final after `idle` idle seconds, and
    with `window` it is also assessed every `window` seconds while it collects.

    Replicas may share one store (PostgreSQL): any takes any request, and each run is decided by
    one of them, its owner (`Ownership`: claims, heartbeats, takeovers, catching up), and an
    admission is made once.

    A request is acknowledged after its commit. The open runs' evidence is kept in memory as
    the trials are committed, so a finish on a store of one process never reads a run back:
    the store is the durable log (read at start, to recover the open runs and the runs that
    were final but not yet admitted, and each tick for the runs this replica owns) and the
    outbox; in a shared store a finish reads the run, which other replicas may have written.
    Deciding that a run is final is committed with the request that completed it; assessing,
    staging and publishing its admission happen on the finisher's threads (`Admitter`: each
    run's rulings in order, runs side by side), so a slow finish holds no ingest slot, no
    lock a request needs, and no other run's finish. With a `forwarder`, each admission is
    staged in the store's outbox in the same transaction that makes the run admitted, and
    delivered by the forwarder's own thread; with `scrape`, shown for Prometheus to scrape
    (`ShownAdmissions`). A run holds at most `max_trials_per_run` trials; spans beyond that are
    rejected (partial success).

    A canary whose decision spans name a suite of the config's `canary_suites` is judged by
    that suite (its contract, cases and policy) instead of the default policy. `clock` (epoch
    seconds) times everything: the tick and the tests drive it. `outage` logs the store's
    outages, once when exports or ticks start failing for it and once when it answers again
    (by default on `clock`, telling `Limits`' default retry hint). Queries are answered
    through `RunQueries`.
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
        self.forwarder, self.scrape = forwarder, scrape
        self._clock = clock = clock or store_clock(store)
        self.outage = outage or StoreOutage(Limits().unavailable_retry_after_seconds, clock=clock)
        """The store's outages, logged once each (exports and ticks tell it how they fared)."""
        super().__init__(store, Judge(store, config.canary_suites), config.assess_interval, clock)
        self._caps = WriteCaps(config.max_trials_per_run, config.max_held_spans)
        self._next_retention = 0.0
        self._lock = threading.Lock()
        """Orders commits and the lifecycle's events alike (and guards the lifecycle)."""
        self.commits: CommitGroups[_Write, Written] = CommitGroups(self._lock, self._commit)
        """Where writes wait to be committed: those that arrive while a group commits are
        committed together, by the next (`_commit`)."""
        self.replica = config.replica or (_replica_name() if store.shared else LOCAL)
        """This receiver's name among the replicas of its store (the owner of the runs it
        decides, and the outbox entries its forwarder delivers)."""
        if forwarder is not None:
            forwarder.claim_as(self.replica, config.lease)
        self._away = False
        """A tick failed for the store being away (exports refused meanwhile): the first that
        works again gives every open run a full idle period, and every trace a full settle."""
        self._lifecycle = Lifecycle(
            Timing(idle=config.idle, window=config.window, run_span_ends_run=False),
            self._judge.canary,
        )
        self._finisher = Finisher(self._do)
        self._ownership = Ownership(
            self.replica, store, config, clock, self._lifecycle, self._finisher, self._judge
        )
        admitting = threading.Lock()
        """Held while an admission made by a finisher thread is published and committed (never
        while a run is assessed)."""
        labels = MetricLabels(config.metric_suites, config.max_metric_suites)
        self._shown = None
        if scrape is not None:
            self._shown = ShownAdmissions(scrape, store, self._judge, labels, admitting, clock())
            self._shown.show_latest()
        self._admitter = Admitter(
            store,
            self._judge,
            self._ownership,
            Publishing(forwarder, self._shown, labels),
            clock,
            (self._cache, self._signals),
            admitting,
        )
        self._settling = TraceSettling(store, config, self._lifecycle, self._settle)
        self._warnings = SpanWarnings(config.max_held_spans)
        self._recover()

    def _recover(self) -> None:
        """Take up the store's open runs again (their evidence read once), and finish the runs
        that were final but not yet admitted when the process stopped (`Ownership.recover`)."""
        with self._lock:
            now = self._clock()
            self._ownership.recover(now)
            self._lifecycle.resumed(now)  # nothing was taken while the process was down
            self._advance(now)  # a run whose plan was complete when it stopped

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
        new = {run for run in contents.run_ids() if not self._ownership.holds(run)}
        held = self._ownership.held() + len(opening)
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
                self._away = True
                self._ownership.store_away()
            if is_store_error(error):
                self.outage.failed(error, export=False)
            raise
        self.outage.worked()

    def _tick(self) -> None:
        if isinstance(self._clock, DatabaseClock):
            self._clock.measure()
        now = self._clock()
        with self._lock:
            self._ownership.follow(now)
            self._advance(now)
            if self._away:  # the store is back: every open run and trace has its full time
                self._away = False  # from now, so that the exporters' retries land in it
                self._lifecycle.resumed(now)
        if self._shown is not None:
            self._shown.show_others()
        waiting: frozenset[str] | None = frozenset()  # None: which runs wait is not known
        try:
            waiting = self._settling.settle(now)
        except Exception as error:  # a settling the store failed holds every timer back: a
            waiting = None if is_store_error(error) else frozenset()  # trial due may yet settle
            raise
        finally:
            with self._lock:  # a run is never idle while a trial of it due by `now` waits
                self._ownership.read_amended()
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
            self._ownership.release()

    def renew_leases(self) -> None:
        """Renew this replica's heartbeat, which holds every run it owns, when it is due (a
        shared store's; its own thread calls this every sixth of a lease, whatever the tick is
        busy with)."""
        self._ownership.renew(self._clock())

    def _settle(self, due: DueTrace) -> Written:
        """Settle a due trace's trials (a trace, quiet since, held since): read and stored as a
        write of their own, under the same lock, so no span lands between the reading and the
        settling."""
        return self._write(ExportContents(), due)

    def _write(self, contents: ExportContents, settle: DueTrace | None = None) -> Written:
        """Commit what an export request holds (trials, run spans' declarations, trial marks and
        framework spans, checked at the door), with the writes that came while the last group
        was committing (`_commit`); returns once committed, then wakes the watchers of the runs
        touched; trials refused at their run's limit are counted in `contents`. What the write
        did."""
        written = self.commits.submit((contents, settle))
        self._warnings.note(written)
        if written.refused:
            _reject_beyond_limit(contents, written.refused, self.config.max_trials_per_run)
        self._signals.notify(run.run_id for run in written.runs)
        return written

    def _commit(self, group: list[_Write]) -> list[Written | Exception]:
        """Commit a group of writes in one transaction (the lock is held), then tell the
        lifecycle what each committed, in order, and make the runs they completed final; what
        each did. A write is refused alone, never failing the others of its group: one that
        would open runs past `max_open_runs` (Busy, not written), one the store refuses for what
        it holds (`Store.together`); one the store failed lets go of its runs (its commit may
        have happened all the same), which the next tick takes up whole from the store, each
        with a full idle period from then: its sender retries it (other runs wait for
        nothing)."""
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
                elif is_store_error(outcome):  # committed or not: taken up whole next tick
                    self._ownership.let_go_of_runs(contents.run_ids())
            self._advance(now)
        except Exception as error:  # what was committed is acknowledged: never sent again
            log_after_commit(error)
            self._ownership.let_go_of(outcomes)  # the next tick takes their runs up
        return outcomes

    def _written(self, contents: ExportContents, now: float, settle: DueTrace | None) -> Written:
        """One write, in its group's transaction (the lock is held): a request's contents, or
        the trials of a due trace, held until the commit and derived here (`settled_batch`)."""
        batch = Batch(
            contents.trials,
            contents.declarations,
            contents.labels,
            contents.marks,
            contents.framework_spans,
        )
        if settle is not None:
            due = self.store.held_trace(settle)
            if due is None:  # another transaction holds it: due again at the next tick
                return Written([], {}, {}, busy=True)
            batch = settled_batch(due)
        claim = (self.replica, now + self.config.lease)
        return self.store.write(batch, now, claim, self._caps, now - self.config.max_hold)

    def _record(self, written: Written, declared: Sequence[DeclaredRun], now: float) -> None:
        """Tell the lifecycle what a write committed to the runs this replica decides
        (`Ownership.place`), in commit order (the lock is held): the runs whose run span ended
        them, the trials each run took, the runs heard of."""
        lifecycle = self._lifecycle
        direct, caught_up = self._ownership.place(written)
        for run_span in declared:
            if run_span.declaration.run_id in direct:
                lifecycle.ended(run_span.declaration, now)
        for run_id, accepted in written.accepted.items():
            if run_id in direct or run_id in caught_up:
                suite, point = written.labels.get(run_id, (None, None))
                lifecycle.record_all(run_id, accepted, now, suite, point)
        for run_id in written.heard & direct:
            lifecycle.heard(run_id, now)

    def _advance(
        self, now: float, timers: bool = False, waiting: frozenset[str] = frozenset()
    ) -> None:
        """Make final in the store the runs the lifecycle says are over, and hand what is due
        to the finisher (the lock is held). Idle periods and windows (`timers`) are looked at
        by the tick alone, after it settled the trials due by the same `now`; the runs
        `waiting` for a due trial to settle are not idle yet."""
        rulings = self._lifecycle.due(now, timers, waiting)
        closed = self._ownership.close([d.run_id for d in rulings if isinstance(d, Final)])
        for ruling in rulings:
            if not isinstance(ruling, Final) or ruling.run_id in closed:
                self._finisher.put(ruling)  # a run another replica took over is its to admit

    # The finisher's side

    def _do(self, ruling: Ruling) -> None:
        """Finish a run, stage a window, or judge a sequential look (on the finisher). A store
        fault is the store's outage to log (a run it failed to admit is taken up again by a
        later tick); a run that cannot be admitted for any other fault is set aside."""
        try:
            if isinstance(ruling, Look):
                if decided_round(ruling.evidence, ruling.declaration, ruling.first, ruling.last):
                    with self._lock:
                        self._lifecycle.close(ruling.run_id, FinalReason.SEQUENTIAL)
                        self._advance(self._clock())
            elif isinstance(ruling, Final):
                self._admitter.finish(ruling)
            elif isinstance(ruling, Interim):
                self._admitter.stage_window(ruling)
        except Exception as error:
            if not is_store_error(error):
                if isinstance(ruling, Final):  # not to be tried again at every tick
                    self._ownership.give_up((ruling.run_id,))
                raise
            self.outage.failed(error, export=False)


def _replica_name() -> str:
    """A name no other replica has: this host's, this process's, and a random part (a replica
    restarted is a new one, and waits for its old leases to lapse like any other)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def _reject_beyond_limit(
    extract: ExportContents, refused: Mapping[str, int], max_trials: int
) -> None:
    """Count in the request's partial success the trials refused because their run holds
    `max_trials` (`max_trials_per_run`) already."""
    extract.rejected += sum(refused.values())
    extract.errors.append(
        f"runs at their limit of {max_trials} trials: " + ", ".join(sorted(refused)[:3])
    )
