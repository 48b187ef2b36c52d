"""The receiver's core: ingest spans into the store, decide when a run is final, publish."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace

from ..assessment import Assessment
from ..evidence import Evidence
from ..otel.publication import OVERFLOW, MetricLabels, Publication, TrialTally, streak_after
from ..otel.spans import (
    RunDeclaration,
    assess_declared,
    metric_routes,
    run_attributes,
    suite_declaration,
)
from ..sequential_replay import decides
from ..stats import Method
from ..suite import Suite
from .forwarder import Forwarder
from .framework_traces import settled_trials
from .otlp import Extract
from .prometheus_endpoint import PrometheusEndpoint
from .store import Store, StoredRun, Written
from .watch import AssessmentCache, CachedAssessment, RunSignals, RunVersion, run_version

logger = logging.getLogger(__name__)

DEFAULT_MAX_TRIALS_PER_RUN = 1_000_000
"""Trials one run may hold in a receiver (a million trials assess in about two seconds)."""


DEFAULT_SETTLE = 5.0
"""Seconds a trace with a harness's trial span must be quiet before its trials are derived:
the framework spans of other processes may arrive after the trial span."""
TRACE_TTL = 600.0
"""Seconds a trace without a trial span is held (then dropped), and a settled trace remembered
(so that a late copy of its spans decides nothing again)."""
SETTLE_BATCH = 1000
"""Traces one tick settles or forgets at most; the next tick takes the rest."""

RETENTION_EVERY = 60.0
"""Seconds between two retention passes."""
RETENTION_BATCH = 100
"""Runs one retention transaction deletes (`Store.forget_finished`'s default)."""


class Receiver:
    """Trials in, admissions out. A run is final when its declared plan is complete, or when
    `grace` seconds pass without news after its run span; a run without a run span (a canary) is
    final after `grace` idle seconds, and with `window` it is also assessed every `window`
    seconds while it collects. With a `forwarder`, each admission is staged in the store's
    outbox in the same transaction that makes the run final, and delivered by the forwarder's
    own thread: ingest never waits for the publish target. A run holds at most
    `max_trials_per_run` trials; spans beyond that are rejected (partial success), so one sender
    cannot grow a run's store and its assessment without bound.

    A canary whose decision spans name a suite of `canary_suites` is judged by that suite (its
    contract, cases and policy) instead of the default policy. A run judged by the sequential
    rule (its run span or its canary suite says so) is also final as soon as the rule decides
    it: each tick looks at it, once per change, when every case it declares holds the same
    rerun pairs and nothing beyond them (a complete round), so its admission is published, and
    its watchers answered, then.
    """

    def __init__(
        self,
        store: Store,
        forwarder: Forwarder | None = None,
        *,
        grace: float = 30.0,
        window: float | None = None,
        clock: Callable[[], float] = time.time,
        max_trials_per_run: int = DEFAULT_MAX_TRIALS_PER_RUN,
        assess_interval: float = 1.0,
        metric_labels: MetricLabels | None = None,
        retain: float | None = None,
        settle: float = DEFAULT_SETTLE,
        canary_suites: Mapping[str, Suite] | None = None,
        scrape: PrometheusEndpoint | None = None,
    ) -> None:
        self.store = store
        self.forwarder = forwarder
        self.scrape = scrape
        """Where admissions' metrics are also shown for Prometheus to scrape."""
        self._tally = TrialTally()
        self._labels = metric_labels or MetricLabels()
        self._grace = grace
        self._window = window
        self._clock = clock
        self._signals = RunSignals()
        self._cache = AssessmentCache(self.assessment_of, interval=assess_interval)
        self._window_marks: dict[str, float] = {}
        self._max_trials = max_trials_per_run
        self._finishing = threading.Lock()
        self._retain = retain
        self._settle = settle
        self._next_retention = 0.0
        self._canary_suites = dict(canary_suites or {})
        self._looked: dict[str, RunVersion] = {}
        """Open runs, with the version last looked at for a sequential decision."""
        self._failing: dict[str, RunVersion] = {}
        """Open runs whose assessment failed (logged once), with the version that failed: the
        tick tries one again only when it changed."""
        if scrape is not None:
            self._show_latest(scrape)

    def _show_latest(self, scrape: PrometheusEndpoint) -> None:
        """Show again the latest admission of every (suite, point) metrics may name, as it
        stood when it was made, so that a restart does not resolve an alert on a rejected run
        (its trials were counted before)."""
        for run, finished_at in self.store.latest_finished():
            if OVERFLOW in self._labels.base(run.suite or "", run.point or ""):
                continue  # beyond the label limit: nothing of it was shown as its own

            def show(run: StoredRun, made_ns: int = int(finished_at * 1e9)) -> None:
                routes = metric_routes(self._declaration(run))
                publication = Publication.of(
                    self.assessment_of(run), routes, TrialTally(), now_ns=made_ns,
                    labels=self._labels,
                    inconclusive_streak=self.store.inconclusive_streak(run.suite, run.point),
                )  # fmt: skip
                scrape.emit(replace(publication, trials_added={}))

            self._isolated(run, show)

    def ingest(self, extract: Extract) -> None:
        """Commit what a request holds (returns after the commit), then finish any complete run.
        Harnesses' trial spans and framework spans are held by trace until it settles."""
        if not (extract.trials or extract.declarations or extract.marks or extract.framework_spans):
            return
        written = self.store.write(
            extract.trials,
            extract.declarations,
            extract.labels,
            now=self._clock(),
            max_trials=self._max_trials,
            marks=extract.marks,
            spans=extract.framework_spans,
        )
        self._written(written, extract)

    def _written(self, written: Written, extract: Extract | None = None) -> None:
        """After a write: tell the sender of trials refused for want of room, finish the runs
        it completed, and wake their watchers."""
        if written.refused and extract is not None:
            extract.rejected += sum(written.refused.values())
            extract.errors.append(
                f"runs at their limit of {self._max_trials} trials: "
                + ", ".join(sorted(written.refused)[:3])
            )
        for run in written.runs:
            if not run.final and _complete(run):
                self._isolated(run, self._finish)
        self._signals.notify(run.run_id for run in written.runs)

    def tick(self) -> None:
        """Settle the traces whose trials are due; finish runs whose grace period is over;
        assess canary windows that are due; with `retain`, delete runs finished longer ago than
        that (at most once a minute, through an index of finished runs by age: the cost follows
        what is deleted, not the history)."""
        now = self._clock()
        self._settle_traces(now)
        open_runs = self.store.open_runs()
        self._failing = {r.run_id: v for r in open_runs if (v := self._failing.get(r.run_id))}
        self._looked = {r.run_id: v for r in open_runs if (v := self._looked.get(r.run_id))}
        for run in open_runs:
            if self._failing.get(run.run_id) != run_version(run):  # else: failed as it stands
                self._isolated(run, lambda run: self._tick_one(run, now))
        if self._retain is not None and now >= self._next_retention:
            self._next_retention = now + RETENTION_EVERY
            while (
                self.store.forget_finished(now - self._retain, RETENTION_BATCH) == RETENTION_BATCH
            ):
                pass

    def _settle_traces(self, now: float) -> None:
        """Derive and store the trials of traces quiet for the settle time, each trace in one
        transaction with letting go of its spans; forget traces that never got a trial span."""
        for trace_id in self.store.quiet_traces(now - self._settle, SETTLE_BATCH):
            marks, facts = self.store.trace(trace_id)
            written = self.store.write(
                settled_trials(marks, facts),
                labels={mark.run: (mark.suite, mark.point) for mark in marks},
                now=now,
                max_trials=self._max_trials,
                settled=(trace_id,),
            )
            self._written(written)
        self.store.forget_traces(now - TRACE_TTL, SETTLE_BATCH)

    def _isolated(self, run: StoredRun, work: Callable[[StoredRun], None]) -> None:
        """Do a run's work; a run that cannot be assessed is logged once and never stops the
        tick, a request that touched it, or other runs."""
        try:
            work(run)
        except Exception:
            if run.run_id not in self._failing:
                logger.warning("verdictgate: run %s cannot be assessed", run.run_id, exc_info=True)
            self._failing[run.run_id] = run_version(run)

    def _tick_one(self, run: StoredRun, now: float) -> None:
        quiet_since = max(run.last_seen, run.declared_at or 0.0)
        if now - quiet_since >= self._grace:
            self._finish(run)
        elif decided := self._sequential_decision(run):
            self._finish(run, decided)
        elif self._window is not None and run.declaration_json is None:
            mark = self._window_marks.setdefault(run.run_id, run.first_seen)
            if now - mark >= self._window:
                self._window_marks[run.run_id] = now
                self._stage_window(run)

    def _sequential_decision(self, run: StoredRun) -> Assessment | None:
        """The final assessment of an open sequential run its rule decides as it stands (looked
        at once per version); None while undecided."""
        version = run_version(run)
        if self._looked.get(run.run_id) == version:  # unchanged since the last look
            return None
        self._looked[run.run_id] = version
        declaration = self._declaration(run)
        if declaration is None or not _may_decide(run, declaration):
            return None
        return self._decided(replace(run, final=True), declaration, self.store.evidence(run.run_id))

    def _decided(
        self, run: StoredRun, declaration: RunDeclaration, evidence: Evidence
    ) -> Assessment | None:
        """The assessment of a sequential run (`_may_decide`) at a complete round of every case
        it declares, when its rule decides it there (a sequential run may stop before its plan,
        so the plan's size is no measure of what is missing); else None."""
        declared = {case.id for case in declaration.suite.cases}
        seen = {case for _, case in evidence.cases}
        if len(seen) != declaration.planned_cases or (declared and seen != declared):
            return None
        if not evidence.complete_rounds():
            return None
        assessment = self._judged(run, replace(declaration, planned_trials=None), evidence)
        return assessment if decides(assessment) else None

    def assessment(self, run_id: str) -> Assessment | None:
        """The current admission of a run (inconclusive `in_progress` until final); None if
        unknown. Cached per run version; an open run is re-assessed at most every
        `assess_interval` seconds."""
        cached = self.cached_assessment(run_id)
        return None if cached is None else cached.assessment

    def cached_assessment(self, run_id: str) -> CachedAssessment | None:
        """The run's cached assessment with its rendered reports; None if unknown."""
        run = self.store.run(run_id)
        return None if run is None else self._cache.get(run)

    def assessment_of(self, run: StoredRun) -> Assessment:
        """Assess a stored run as it stands (uncached)."""
        return self._assess(run, self.store.evidence(run.run_id))

    def _assess(self, run: StoredRun, evidence: Evidence) -> Assessment:
        declaration = self._declaration(run)
        if (
            run.final
            and declaration is not None
            and _may_decide(run, declaration)
            and (decided := self._decided(run, declaration, evidence))
        ):
            return decided  # how it was finished, whenever it is asked again
        return self._judged(run, declaration, evidence)

    def _judged(
        self, run: StoredRun, declaration: RunDeclaration | None, evidence: Evidence
    ) -> Assessment:
        return assess_declared(
            run.run_id,
            evidence,
            declaration,
            suite=run.suite,
            point=run.point,
            in_progress=not run.final,
            late=run.late,
            declaration_conflict=run.declaration_conflict,
        )

    def _declaration(self, run: StoredRun) -> RunDeclaration | None:
        """What the run is judged by: its run span, or its canary suite's."""
        if run.declared is not None:
            return run.declared
        suite = self._canary_suites.get(run.suite or "")
        return None if suite is None else suite_declaration(run.run_id, suite)

    def watch(
        self, run_id: str, active: Callable[[], bool] = lambda: True, poll: float = 1.0
    ) -> Iterator[CachedAssessment]:
        """Each new admission of a run until it is final (a run not seen yet is waited for),
        while `active()` (asked at least every `poll` seconds); woken only by changes of this
        run."""
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

    def _finish(self, run: StoredRun, decided: Assessment | None = None) -> None:
        """Make a run final; its admission is staged for publishing in the same commit, once.
        Finishing is serialised, so two requests completing one run publish it once. A run the
        sequential rule `decided` ends with that assessment, unless a write came since (the
        next tick looks again). A canary keeps the suite it was judged by, so that it reads the
        same later, whatever the receiver is then told."""
        with self._finishing:
            current = self.store.run(run.run_id)
            if current is None or current.final:
                return
            if decided is not None and run_version(current) != run_version(run):
                return
            assessment = decided or self.assessment_of(replace(current, final=True))
            now = self._clock()  # when it was admitted, for the store and the metrics alike
            publication = self._publication(assessment, current, final=True, now=now)
            finished = self.store.finish(
                run.run_id, assessment.status.value,
                publication.to_json() if publication and self.forwarder else None, now,
                received=current.received if decided is not None else None,
                declaration=self._canary_declaration(current, assessment),
            )  # fmt: skip
            if finished:
                self._cache.put(replace(current, final=True), assessment)  # the state assessed
                if publication is not None and self.scrape is not None:
                    self.scrape.emit(publication)
            self._window_marks.pop(run.run_id, None)
        self._staged()
        self._signals.notify((run.run_id,))

    def _canary_declaration(self, run: StoredRun, assessment: Assessment) -> str | None:
        """What a canary judged by a suite keeps as its declaration: the suite's contract and
        policy, how many cases it has, and the trials it was expected to hold."""
        declaration = None if run.declared is not None else self._declaration(run)
        if declaration is None:
            return None
        attributes = run_attributes(
            run.run_id, declaration.suite, declaration.policy, assessment.trials.expected,
            declaration.isolation,
        )  # fmt: skip
        return json.dumps(attributes)

    def _stage_window(self, run: StoredRun) -> None:
        """Stage an interim admission of an open canary (never after its final one)."""
        with self._finishing:
            current = self.store.run(run.run_id)
            if current is None or current.final:
                return
            publication = self._publication(self.assessment_of(current), current, final=False)
            if publication is None:
                return
            if self.forwarder is not None:
                self.store.stage(run.run_id, publication.to_json())
            if self.scrape is not None:
                self.scrape.emit(publication)
        self._staged()

    def _publication(
        self,
        assessment: Assessment,
        run: StoredRun,
        final: bool,
        now: float | None = None,
    ) -> Publication | None:
        """The admission to publish, when the receiver publishes (over OTLP or a scrape
        endpoint); metric routes are limited to the declared contract."""
        if self.forwarder is None and self.scrape is None:
            return None
        return Publication.of(
            assessment,
            metric_routes(self._declaration(run)),
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


def _may_decide(run: StoredRun, declaration: RunDeclaration) -> bool:
    """Whether a look could find a sequential run at a complete round: judged sequentially,
    known cases, and a count of trials that is a whole number of rounds (checked before the
    evidence is read)."""
    if declaration.policy.method is not Method.SEQUENTIAL:
        return False
    cases = declaration.planned_cases
    return cases is not None and cases > 0 and run.received > 0 and run.received % (2 * cases) == 0


def _complete(run: StoredRun) -> bool:
    return (
        run.declaration_json is not None
        and run.planned_trials is not None
        and run.received >= run.planned_trials
    )
