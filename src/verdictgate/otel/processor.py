"""EvidenceProcessor: an SDK span processor that turns decision spans into admissions."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from ..assessment import Assessment
from ..evidence import Evidence
from ..trial_model import Trial
from . import conventions as names
from .publisher import Publisher
from .spans import (
    RunDeclaration,
    assess_declared,
    metric_routes,
    run_declaration,
    trial_from_attributes,
)

logger = logging.getLogger(__name__)

KEPT_ASSESSMENTS = 1000
"""How many assessments (and ended run ids) the processor keeps for lookup by run id."""

DEFAULT_IDLE_SECONDS = 30.0
"""A canary run (no run span) ends after this long without a new trial; the receiver's
`--grace` default."""

SHUTDOWN_SECONDS = 30.0
"""How long `shutdown` waits for the worker to publish what is pending."""


@dataclass
class _RunState:
    """An open run: its evidence, the names its spans carry, and when it last heard of a trial."""

    evidence: Evidence = field(default_factory=Evidence)
    suite: str | None = None
    point: str | None = None
    last_trial: float = field(default_factory=time.monotonic)
    window_mark: float = field(default_factory=time.monotonic)
    declaration: RunDeclaration | None = None
    """What the run's span declared when it started: such a run ends with its span, never for
    idleness, and has no canary windows."""


@dataclass(frozen=True)
class _Job:
    """One assessment for the worker: a run that ended (final) or a canary window (interim)."""

    run_id: str
    state: _RunState
    declaration: RunDeclaration | None
    final: bool


def _plain(attributes: Any) -> dict[str, Any]:
    """Span attributes as a plain dict (the SDK's mapping takes a lock on every read)."""
    if attributes is None:
        return {}
    copy_ = getattr(attributes, "copy", None)
    return copy_() if copy_ is not None else dict(attributes)


class EvidenceProcessor(SpanProcessor):
    """Collects decision spans per run and publishes one admission when the run ends.

    Like the SDK's own processors, `on_end` only does constant-time bookkeeping on the caller's
    thread (it records the trial before any batching, so a full export queue never drops
    evidence); assessing and publishing happen on one worker thread. A run ends when its
    `verdictgate.run` span ends; a canary without a run span ends after `idle` seconds without a
    new trial (None: only at shutdown). With `canary_window`, an open canary is also assessed
    every `canary_window` seconds: interim admissions (`in_progress`) that do not end it.

    `force_flush` waits until every ended run has been assessed and published, and never ends
    a run; `shutdown` ends every open run, publishes, and then ignores spans. Trials of a run
    that already ended are counted in `late` and dropped. It never raises into the caller.
    """

    def __init__(
        self,
        publisher: Publisher | None = None,
        *,
        idle: float | None = DEFAULT_IDLE_SECONDS,
        canary_window: float | None = None,
        on_assessment: Callable[[Assessment], None] | None = None,
    ) -> None:
        for name, seconds in (("idle", idle), ("canary_window", canary_window)):
            if seconds is not None and not seconds > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {seconds!r}")
        self._publisher = publisher
        self._idle = idle
        self._canary_window = canary_window
        self._on_assessment = on_assessment
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._stopping = False
        self._fresh_state()
        if hasattr(os, "register_at_fork"):  # a forked child starts empty, as the SDK's do
            this = weakref.ref(self)

            def fresh_in_child() -> None:
                processor = this()
                if processor is not None:
                    processor._fresh_state()

            os.register_at_fork(after_in_child=fresh_in_child)
        self._watchers: dict[str, Callable[[Trial], None]] = {}
        self._assessments: OrderedDict[str, Assessment] = OrderedDict()
        self.dropped = 0
        """Spans that looked like evidence but could not be read (malformed attributes)."""
        self.late = 0
        """Decision spans of a run that had already ended (or arriving after shutdown)."""

    def _fresh_state(self) -> None:
        """New locks, no open runs, no jobs, no worker (at start, and in a forked child)."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._runs: dict[str, _RunState] = {}
        self._jobs: deque[_Job] = deque()
        self._pending = 0
        """Jobs queued or being worked on; force_flush waits for 0."""
        self._worker: threading.Thread | None = None

    # SpanProcessor interface

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Note a run span that opens: its run ends with that span, never for idleness."""
        if span.name != names.RUN_SPAN:
            return
        try:
            declaration = run_declaration(_plain(span.attributes))
        except Exception:  # read again, and counted, when the span ends
            return
        with self._lock:
            if self._stopping or declaration.run_id in self._ended:
                return
            state = self._runs.get(declaration.run_id)
            if state is None:
                state = self._runs[declaration.run_id] = _RunState()
            state.declaration = declaration

    def on_end(self, span: ReadableSpan) -> None:
        """Record a decision span or end a run; any other span costs a name check."""
        name = span.name
        try:
            if name.startswith(names.DECISION_SPAN_PREFIX):
                attributes = _plain(span.attributes)
                if names.OUTCOME in attributes:
                    elapsed = (span.end_time or 0) - (span.start_time or 0)
                    self._add_trial(attributes, elapsed / 1e6 if elapsed > 0 else None)
            elif name == names.RUN_SPAN:
                self._end_run(_plain(span.attributes))
        except Exception:  # never raise into the instrumented code
            self.dropped += 1
            logger.debug("verdictgate: unreadable span %s", name, exc_info=True)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every ended run is assessed and published; False if `timeout_millis`
        passed first. Open runs stay open: a flush never changes a result."""
        if threading.current_thread() is self._worker:
            return False  # from a publisher or callback on the worker: never wait on itself
        with self._changed:
            return self._changed.wait_for(lambda: self._pending == 0, timeout_millis / 1000)

    def shutdown(self) -> None:
        """End every open run, publish what is pending, stop the worker; later spans are ignored."""
        with self._changed:
            if not self._stopping:
                self._stopping = True
                for run_id, state in self._runs.items():
                    self._queue(_Job(run_id, state, state.declaration, final=True))
                self._runs.clear()
            worker = self._worker
            self._changed.notify_all()
        if worker is not None and worker is not threading.current_thread():
            worker.join(SHUTDOWN_SECONDS)
            if worker.is_alive():
                logger.warning(
                    "verdictgate: %d runs not yet published after %g s at shutdown",
                    self._pending, SHUTDOWN_SECONDS,
                )  # fmt: skip

    # Queries

    def assessment(self, run_id: str) -> Assessment | None:
        """The latest assessment of a run (interim while a canary window is open), if any."""
        with self._lock:
            return self._assessments.get(run_id)

    def watch(self, run_id: str, on_trial: Callable[[Trial], None] | None) -> None:
        """Call `on_trial` with every new trial of `run_id` (None stops watching)."""
        with self._lock:
            if on_trial is None:
                self._watchers.pop(run_id, None)
            else:
                self._watchers[run_id] = on_trial

    # The caller's side: bookkeeping only

    def _add_trial(self, attributes: dict[str, Any], latency_ms: float | None) -> None:
        trial = trial_from_attributes(attributes, latency_ms)
        run = trial.run
        with self._lock:
            if self._stopping or run in self._ended:
                self.late += 1
                return
            state = self._runs.get(run)
            if state is None:
                state = self._runs[run] = _RunState(
                    suite=attributes.get(names.SUITE), point=attributes.get(names.POINT)
                )
                if self._idle is not None or self._canary_window is not None:
                    self._start_worker()
                    self._changed.notify_all()  # a new deadline for the worker
            state.last_trial = time.monotonic()
            is_new = state.evidence.add(trial)
            watcher = self._watchers.get(run) if is_new and self._watchers else None
        if watcher is not None:
            watcher(trial)

    def _end_run(self, attributes: dict[str, Any]) -> None:
        declaration = run_declaration(attributes)  # a malformed run span is dropped here
        run_id = declaration.run_id
        with self._changed:
            if self._stopping or run_id in self._ended:
                self.late += 1
                return
            state = self._runs.pop(run_id, None) or _RunState()
            self._queue(_Job(run_id, state, declaration, final=True))
            self._changed.notify_all()

    def _queue(self, job: _Job) -> None:
        """Hand a job to the worker (the lock is held)."""
        if job.final:
            self._ended[job.run_id] = None
            while len(self._ended) > KEPT_ASSESSMENTS:
                self._ended.popitem(last=False)
        self._jobs.append(job)
        self._pending += 1
        self._start_worker()

    def _start_worker(self) -> None:
        """Start the worker on first need."""
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(
                target=self._work, name="verdictgate-evidence", daemon=True
            )
            self._worker.start()

    # The worker's side: assess and publish

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._jobs and not self._stopping:
                    wait = self._due_jobs(time.monotonic())
                    if wait is not None and wait <= 0:
                        continue
                    self._changed.wait(wait)
                if not self._jobs and self._stopping:
                    return
                job = self._jobs.popleft()
            try:
                self._finish(job)
            finally:
                with self._changed:
                    self._pending -= 1
                    self._changed.notify_all()

    def _due_jobs(self, now: float) -> float | None:
        """Queue the canaries whose idle period ended and the windows that are due (the lock is
        held); the seconds until the next deadline, or None when there is none. Costs one look at
        each open run, only when a deadline passes or a run opens."""
        next_deadline: float | None = None
        for run_id, state in list(self._runs.items()):
            if state.declaration is not None:
                continue  # ends with its run span
            deadlines = []
            if self._idle is not None:
                if now - state.last_trial >= self._idle:
                    del self._runs[run_id]
                    self._queue(_Job(run_id, state, None, final=True))
                    return 0.0
                deadlines.append(state.last_trial + self._idle)
            if self._canary_window is not None:
                if now - state.window_mark >= self._canary_window:
                    state.window_mark = now
                    interim = _RunState(state.evidence.snapshot(), state.suite, state.point)
                    self._queue(_Job(run_id, interim, None, final=False))
                    return 0.0
                deadlines.append(state.window_mark + self._canary_window)
            for deadline in deadlines:
                if next_deadline is None or deadline < next_deadline:
                    next_deadline = deadline
        return None if next_deadline is None else max(0.0, next_deadline - now)

    def _finish(self, job: _Job) -> None:
        """Assess and publish one job; a failure is logged, never raised."""
        try:
            state = job.state
            assessment = assess_declared(
                job.run_id,
                state.evidence,
                job.declaration,
                suite=state.suite,
                point=state.point,
                in_progress=not job.final,
            )
            with self._lock:
                self._assessments[job.run_id] = assessment
                self._assessments.move_to_end(job.run_id)
                while len(self._assessments) > KEPT_ASSESSMENTS:
                    self._assessments.popitem(last=False)
            if self._publisher is not None:
                routes = metric_routes(job.declaration)
                self._publisher.publish(assessment, routes, final=job.final)
            if self._on_assessment is not None:
                self._on_assessment(assessment)
        except Exception:
            logger.warning("verdictgate: could not assess run %s", job.run_id, exc_info=True)
