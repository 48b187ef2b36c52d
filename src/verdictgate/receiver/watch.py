"""Watching runs: per-run wake-ups, and one cached assessment per run version.

A `status --wait` client, a GetAdmission call and the HTTP query all read a run's admission
through `AssessmentCache`: a run is assessed again only when it changed, and an open run at most
once per `interval` seconds however many clients ask, so the cost of watching follows the runs
watched, not the number of watchers. `RunSignals` wakes the watchers of one run only when that
run changes; other runs' traffic never wakes them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..assessment import Assessment
from ..reports import RENDERERS
from .store import StoredRun

RunVersion = tuple[float, int, bool, int, bool, float | None]


def run_version(run: StoredRun) -> RunVersion:
    """What changes whenever anything about a stored run changes (a write, its end, late records,
    a declaration or a conflict)."""
    return (
        run.last_seen,
        run.received,
        run.final,
        run.late,
        run.declaration_conflict,
        run.declared_at,
    )


@dataclass
class CachedAssessment:
    """A run's assessment as of one version of the run, and its reports as rendered so far."""

    assessment: Assessment
    version: RunVersion
    made_at: float
    _reports: dict[str, str] = field(default_factory=dict)

    def report(self, fmt: str) -> str:
        """The report in `fmt` (json when unknown), rendered once per assessment."""
        fmt = fmt if fmt in RENDERERS else "json"
        text = self._reports.get(fmt)
        if text is None:
            text = self._reports[fmt] = RENDERERS[fmt](self.assessment)
        return text


class AssessmentCache:
    """The latest assessment of recently asked-for runs (at most `size`, least recent dropped).

    A run that did not change is never assessed again. An open run that did is assessed again
    at most every `interval` seconds; meanwhile askers get the previous assessment (it says it
    is in progress). A final run's assessment changes only with late records. At most
    `concurrent` assessments are made at once, so queries of many large runs wait rather than
    hold every run's evidence in memory together.
    """

    def __init__(
        self,
        assess: Callable[[StoredRun], Assessment],
        *,
        interval: float = 1.0,
        size: int = 256,
        concurrent: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._assess = assess
        self._interval = interval
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[str, CachedAssessment] = OrderedDict()
        self._lock = threading.Lock()
        self._assessing: dict[str, threading.Lock] = {}
        """One lock per run being assessed, so concurrent askers assess it once."""
        self._slots = threading.BoundedSemaphore(concurrent)
        """Assessments made at once (each holds its run's evidence in memory)."""

    def get(self, run: StoredRun) -> CachedAssessment:
        """The run's assessment: cached when still current (or when an open run was assessed
        less than `interval` seconds ago), made afresh otherwise."""
        entry = self._fresh_enough(run)
        if entry is not None:
            return entry
        with self._lock:
            lock = self._assessing.setdefault(run.run_id, threading.Lock())
        with lock:
            entry = self._fresh_enough(run)  # another asker may have just made it
            if entry is None:
                with self._slots:
                    entry = self.put(run, self._assess(run))
        with self._lock:
            if not lock.locked():
                self._assessing.pop(run.run_id, None)
        return entry

    def put(self, run: StoredRun, assessment: Assessment) -> CachedAssessment:
        """Keep an assessment made elsewhere (the one a run was finished with); an entry of the
        same version already kept stays (it is the same answer), so askers share one."""
        entry = CachedAssessment(assessment, run_version(run), self._clock())
        with self._lock:
            kept = self._entries.get(run.run_id)
            if kept is not None and kept.version == entry.version:
                return kept
            self._entries[run.run_id] = entry
            self._entries.move_to_end(run.run_id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return entry

    def retry_in(self, entry: CachedAssessment) -> float:
        """Seconds until an open run's stale entry may be replaced."""
        return max(0.0, entry.made_at + self._interval - self._clock())

    def _fresh_enough(self, run: StoredRun) -> CachedAssessment | None:
        with self._lock:
            entry = self._entries.get(run.run_id)
            if entry is None:
                return None
            self._entries.move_to_end(run.run_id)
        if entry.version == run_version(run):
            return entry
        if not run.final and self._clock() - entry.made_at < self._interval:
            return entry
        return None


class RunSignals:
    """Wake-ups per run: `notify` wakes only the waiters of the runs it names."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[str, _Signal] = {}

    @contextmanager
    def watching(self, run_id: str) -> Iterator[Callable[[float], None]]:
        """While inside, a run's changes can be waited for with the yielded `wait(timeout)`,
        which returns at the first change after the previous call (or at the timeout)."""
        with self._lock:
            signal = self._watched.get(run_id)
            if signal is None:
                signal = self._watched[run_id] = _Signal()
            signal.watchers += 1
        seen = signal.generation
        try:

            def wait(timeout: float) -> None:
                nonlocal seen
                with signal.condition:
                    signal.condition.wait_for(lambda: signal.generation != seen, timeout)
                    seen = signal.generation

            yield wait
        finally:
            with self._lock:
                signal.watchers -= 1
                if not signal.watchers:
                    del self._watched[run_id]

    def notify(self, run_ids: Iterable[str]) -> None:
        """Wake the waiters of these runs."""
        with self._lock:
            signals = [self._watched[run] for run in run_ids if run in self._watched]
        for signal in signals:
            with signal.condition:
                signal.generation += 1
                signal.condition.notify_all()


class _Signal:
    __slots__ = ("condition", "generation", "watchers")

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.generation = 0
        self.watchers = 0
