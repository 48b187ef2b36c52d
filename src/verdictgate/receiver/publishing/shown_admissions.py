"""What the scrape endpoint shows: the latest admission of every (suite, point), whoever
made it (at start, this replica's before it stopped; then, in a shared store, the other
replicas')."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from ...otel.admission_record import OVERFLOW, AdmissionRecord, MetricLabels, TrialTally
from ..run_faults import isolated
from ..store import Store, StoredRun
from .judging import Judge

if TYPE_CHECKING:
    from .prometheus_endpoint import PrometheusEndpoint

SHOWN_PAGE = 1000
"""Other replicas' admissions read at once (a tick reads page after page)."""
SHOWN_MARGIN = 60.0
"""Seconds of other replicas' admissions read again at each tick, for commits that come late."""


class ShownAdmissions:
    """What `scrape` shows: the admissions this replica makes (`emit`) and those made before
    or elsewhere. `admitting` is the lock the finisher holds while it admits."""

    def __init__(
        self,
        scrape: PrometheusEndpoint,
        store: Store,
        judge: Judge,
        labels: MetricLabels,
        admitting: threading.Lock,
        since: float,
    ) -> None:
        self._scrape, self._store, self._judge, self._labels = scrape, store, judge, labels
        self._admitting = admitting
        self._shown: dict[str, float] = {}
        """Runs admitted lately that the scrape endpoint shows (their admission's time)."""
        self._shown_until = since
        """The latest admission time the scrape endpoint has shown (from start on)."""

    def emit(self, publication: AdmissionRecord, admitted_at: float | None = None) -> None:
        """Show an admission this replica made (by the finisher, under `admitting`): a window,
        or, admitted at `admitted_at`, a run's final one (never shown again as another's)."""
        self._scrape.emit(publication)
        if admitted_at is not None:
            self._shown[publication.run_id] = admitted_at

    def show_latest(self) -> None:
        """Show again the latest admission of every (suite, point) metrics may name, as it
        stood when it was made, so that a restart does not resolve an alert on a rejected run
        (its trials were counted before)."""
        for run, finished_at in self._store.latest_finished():
            self._show(run, finished_at)
            self._shown_until = max(self._shown_until, finished_at)

    def _show(self, run: StoredRun, finished_at: float) -> bool:
        """Show an admission made before (at start, or by another replica) as it stood when it
        was made, its trials counted where it was made; nothing for a run beyond the label
        limit (nothing of it was shown as its own). False when it could not be shown now."""
        if OVERFLOW in self._labels.base(run.suite or "", run.point or ""):
            return True

        def show() -> None:
            publication = AdmissionRecord.of(
                self._judge.assess(run),
                self._judge.declaration(run).metric_routes,
                TrialTally(),
                now_ns=int(finished_at * 1e9),
                labels=self._labels,
                inconclusive_streak=self._store.inconclusive_streak(run.suite, run.point),
            )
            self._scrape.emit(replace(publication, trials_added={}))

        return isolated(run.run_id, show) is True

    def show_others(self) -> None:
        """In a shared store, show what the other replicas admitted since the last tick, so
        that every replica's scrape endpoint shows the latest admission of each suite, whoever
        made it (read through the index of finished runs: the admissions since, a margin of
        SHOWN_MARGIN seconds kept for commits that come late or clocks a little apart)."""
        if not self._store.shared:
            return
        newest: dict[tuple[str | None, str | None], tuple[StoredRun, float]] = {}
        position = (self._shown_until - SHOWN_MARGIN, "")
        while page := self._store.finished_since(*position, SHOWN_PAGE):
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
            if self._show(run, finished_at):  # at the next tick
                with self._admitting:
                    self._shown[run.run_id] = finished_at
        with self._admitting:
            horizon = self._shown_until - SHOWN_MARGIN
            for run_id in [run_id for run_id, at in self._shown.items() if at < horizon]:
                del self._shown[run_id]
