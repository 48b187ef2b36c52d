"""The read side of the receiver every transport asks through: a run's admission (cached per
run version), watched until final, and pages of runs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ...assessment import Assessment
from ...declaration import RunDeclaration
from ...evidence import Evidence
from ..publishing.judging import Judge
from ..store import Store, StoredRun
from .assessment_cache import AssessmentCache, CachedAssessment
from .run_signals import RunSignals


class RunQueries:
    """Answers about the runs of `store`, judged by `judge`: assessments cached in `_cache`
    (an open run assessed again at most every `assess_interval` seconds of `clock`), and
    watchers woken through `_signals` by whoever changes a run."""

    def __init__(
        self, store: Store, judge: Judge, assess_interval: float, clock: Callable[[], float]
    ) -> None:
        self.store = store
        self._judge = judge
        self._cache = AssessmentCache(self.assessment_of, interval=assess_interval, clock=clock)
        self._signals = RunSignals()

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
        """Assess a run, uncached (`Judge.assess`): on `evidence` (read from the store unless
        given), judged by `declaration` (the run's own unless given), in progress, unless told,
        while the run is open."""
        return self._judge.assess(run, declaration, evidence, in_progress=in_progress)
