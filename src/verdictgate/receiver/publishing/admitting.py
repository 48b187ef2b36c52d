"""The finisher's side of the receiver: a run made final assessed, its admission committed and
published (staged in the outbox, shown for the scrape endpoint), and a canary's windows
staged."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from ...assessment import Assessment, Isolation
from ...lifecycle import Final, Interim
from ...otel.admission_record import AdmissionRecord, MetricLabels, TrialTally, streak_after
from ...otel.spans import run_attributes
from ..queries.assessment_cache import AssessmentCache
from ..queries.run_signals import RunSignals
from ..replication.ownership import Ownership
from ..store import Store, StoredRun
from .forwarder import Forwarder
from .judging import Judge
from .shown_admissions import ShownAdmissions


@dataclass(frozen=True)
class Publishing:
    """Where admissions go beyond the store: the `forwarder`'s outbox, the scrape endpoint's
    `shown`, each when there is one; `labels` limits the metrics they name."""

    forwarder: Forwarder | None
    shown: ShownAdmissions | None
    labels: MetricLabels


class Admitter:
    """Admits runs made final and stages canaries' windows, one at a time (`admitting`, held
    while an admission is published and committed, never while a run is assessed), the caches,
    watchers and publishers told."""

    def __init__(
        self,
        store: Store,
        judge: Judge,
        ownership: Ownership,
        publishing: Publishing,
        clock: Callable[[], float],
        told: tuple[AssessmentCache, RunSignals],
        admitting: threading.Lock,
    ) -> None:
        self._store, self._judge, self._ownership = store, judge, ownership
        self._publishing, self._clock = publishing, clock
        self._cache, self._signals = told
        self._admitting = admitting
        self._tally = TrialTally()

    def finish(self, final: Final) -> None:
        """Admit a run made final: assess its evidence, commit the admission (staged for
        publishing in the same transaction, once), show it, and wake its watchers. A canary
        keeps the suite it was judged by, so that it reads the same later, whatever the
        receiver is then told."""
        held = self._ownership.made_final_at(final.run_id)
        run = self._store.run(final.run_id)
        if run is None or run.status is not None:
            return
        declaration, declared, evidence = final.declaration, final.declared, final.evidence
        if self._store.shared:  # other replicas' last trials, and a run span one of them took
            if held != run.version or self._ownership.amended(run.run_id):  # written since
                evidence = self._store.evidence(run.run_id)  # the lifecycle last caught up
            if run.declared is not None:
                declaration, declared = run.declared, True
        final = replace(final, declaration=declaration, declared=declared)
        assessment = self._judge.assess(run, declaration, evidence)
        forwarder, shown = self._publishing.forwarder, self._publishing.shown
        with self._admitting:  # a suite's runs admitted one at a time: their streak counts
            now = self._clock()  # when it was admitted, for the store and the metrics alike
            publication = self._publication(assessment, run, final=True, now=now)
            finished = self._store.finish(
                run.run_id,
                assessment.status.value,
                publication.to_json() if publication and forwarder else None,
                now,
                declaration=None if final.declared else self._canary_record(final, assessment),
            )
            if finished:
                self._cache.put(run, assessment)
                if publication is not None and shown is not None:
                    shown.emit(publication, admitted_at=now)
        if finished:
            self._staged()
        self._signals.notify((run.run_id,))

    def stage_window(self, interim: Interim) -> None:
        """Stage an interim admission of an open canary (never after its final one)."""
        run = self._store.run(interim.run_id)
        if run is None or run.status is not None or run.owner != self._ownership.replica:
            return  # never after its final admission, nor for a run another replica took
        evidence = self._store.evidence(run.run_id) if self._store.shared else interim.evidence
        assessment = self._judge.assess(run, interim.declaration, evidence, in_progress=True)
        forwarder, shown = self._publishing.forwarder, self._publishing.shown
        with self._admitting:
            publication = self._publication(assessment, run, final=False, now=self._clock())
            if publication is None:
                return
            if forwarder is not None and not self._store.stage(run.run_id, publication.to_json()):
                return
            if shown is not None:
                shown.emit(publication)
        self._staged()

    def _canary_record(self, final: Final, assessment: Assessment) -> str | None:
        """What a canary judged by a suite keeps as its declaration: the suite's contract and
        policy, how many cases it has, and the trials it was expected to hold."""
        declaration = final.declaration
        if declaration.suite.name not in self._judge.canary_suites:
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
        self, assessment: Assessment, run: StoredRun, final: bool, now: float
    ) -> AdmissionRecord | None:
        """The admission to publish, when the receiver publishes (over OTLP or a scrape
        endpoint); metric routes are limited to the declared contract."""
        if self._publishing.forwarder is None and self._publishing.shown is None:
            return None
        return AdmissionRecord.of(
            assessment,
            self._judge.declaration(run).metric_routes,
            self._tally,
            final=final,
            now_ns=int(now * 1e9),
            labels=self._publishing.labels,
            inconclusive_streak=streak_after(
                self._store.inconclusive_streak(run.suite, run.point), assessment, final
            ),  # the runs finished before this one, then this admission
        )

    def _staged(self) -> None:
        if self._publishing.forwarder is not None:
            self._publishing.forwarder.wake()
