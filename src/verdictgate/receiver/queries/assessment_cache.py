"""One cached assessment per run version, shared by every asker.

A `status --wait` client, a GetAdmission call, the JSON API and the pages all read a run's
admission through `AssessmentCache`: a run is assessed again only when it changed, and an open
run at most once per `interval` seconds however many clients ask, so the cost of watching
follows the runs watched, not the number of watchers.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ...assessment import Assessment
from ...reports import RENDERERS
from ..store import StoredRun

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
