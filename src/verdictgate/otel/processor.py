"""EvidenceProcessor: an SDK span processor that turns decision spans into admissions."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
import warnings
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import cast

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from ..assessment import Assessment
from ..engine import assess_declared, decided_round
from ..lifecycle import DEFAULT_IDLE_SECONDS, Final, FinalReason, Lifecycle, Look, Ruling, Timing
from ..trial_model import Trial
from ..wire_types import AttributeValue
from . import conventions as names
from .publisher import Publisher
from .span_decoding import run_declaration, trial_from_attributes
from .span_facts import Decided, DecisionReader, attributes_of, plain

logger = logging.getLogger(__name__)

KEPT_ASSESSMENTS = 1000
"""How many assessments the processor keeps for lookup by run id."""

MAX_QUEUE_SIZE = 100_000
"""How many spans wait for the worker at most before a caller waits for room (what is kept of
a decision takes a few dozen to a few hundred bytes: 100,000 took 10 MiB in the benchmark)."""

SHUTDOWN_SECONDS = 30.0
"""How long `shutdown` waits for the worker to publish what is pending."""

WAKE_BATCH = 512
"""Spans waiting that wake the worker before its next round (as the SDK's batch processor)."""
ROUND_SECONDS = 0.1
"""How often the worker looks at what is waiting and what is due, at the latest."""
ROUND_SPANS = 8192
"""Spans the worker records before it acts on what is due (it then goes on at once)."""


class _Flush:
    """A marker in the intake: set once everything before it is recorded and published (and,
    for shutdown's, every open run ended and published: the worker then stops)."""

    def __init__(self, stop: bool = False) -> None:
        self.done = threading.Event()
        self.stop = stop


class _Watch:
    """A watcher that starts (or, with None, stops) at its place in the intake."""

    __slots__ = ("on_trial", "run_id")

    def __init__(self, run_id: str, on_trial: Callable[[Trial], None] | None) -> None:
        self.run_id, self.on_trial = run_id, on_trial


class _RunSpan:
    """A run span that started or ended, with its attributes as they were then."""

    __slots__ = ("attributes", "ended")

    def __init__(self, attributes: dict[str, AttributeValue], ended: bool) -> None:
        self.attributes, self.ended = attributes, ended


_Span = _RunSpan | Decided
"""What the intake keeps of a span."""


class EvidenceProcessor(SpanProcessor):
    """Collects decision spans per run and publishes one admission when the run ends.

    Like the SDK's batch processor, `on_end` checks a span's name and queues what the worker
    reads of it (a decision's attributes and duration, never the span); reading the trial, the
    run lifecycle (`verdictgate.lifecycle`), watchers, assessing and publishing happen on one
    worker thread. A run ends when its `verdictgate.run` span ends; a canary without a
    run span ends after `idle` seconds without a new trial (None: only at shutdown). With
    `window`, an open canary is also assessed every `window` seconds: interim admissions
    (`in_progress`) that do not end it. A run judged by the sequential rule is answered at the
    first round its rule decides, however its trials arrived. `clock` (seconds, monotonic)
    times idleness and windows.

    `force_flush` returns once every span ended before it is recorded, and every run that ended
    (or was due to) is assessed and published; it never ends a run early. `shutdown` ends
    every open run, publishes, and then ignores spans. Trials of a run that already ended are
    counted in `late` and dropped. It never raises into the caller.

    The intake is bounded: with `max_queue_size` spans waiting for the worker, the thread whose
    span ends waits for room (counted in `waited`) rather than drop it (as the SDK's batch
    processor does). Evidence is what this processor is for: a decision dropped under load is
    not missing at random (it goes with bursts, slow cases, a slow publisher), so an admission
    of what was left would be biased, however the drops were counted. A caller waits only while
    the worker is `max_queue_size` spans behind; the worker's own thread never waits (a span a
    callback ends there is queued past the bound), and shutdown releases every caller waiting
    (its span then counts as late).
    """

    def __init__(
        self,
        publisher: Publisher | None = None,
        *,
        idle: float | None = DEFAULT_IDLE_SECONDS,
        window: float | None = None,
        on_assessment: Callable[[Assessment], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        canary_window: float | None = None,
        max_queue_size: int = MAX_QUEUE_SIZE,
    ) -> None:
        if max_queue_size < 1:
            raise ValueError("max_queue_size must be at least 1")
        if canary_window is not None:
            warnings.warn(
                "EvidenceProcessor(canary_window=...) is now window=...", DeprecationWarning, 2
            )
            window = canary_window if window is None else window
        self._timing = Timing(idle=idle, window=window, run_span_ends_run=True)
        self._publisher = publisher
        self._on_assessment = on_assessment
        self._clock = clock
        self._stopping = False
        self._max_queue_size = max_queue_size
        self._watchers: dict[str, Callable[[Trial], None]] = {}
        """The worker's own: changed through the intake, in order with the spans."""
        self._assessments: OrderedDict[str, Assessment] = OrderedDict()
        self.dropped = 0
        """Spans that looked like evidence but could not be read (malformed attributes)."""
        self.late = 0
        """Decision and run spans of runs that had already ended (or came after shutdown)."""
        self.waited = 0
        """Spans whose caller waited for room: `max_queue_size` spans were waiting already."""
        self._fresh_state()
        if hasattr(os, "register_at_fork"):  # a forked child starts empty, as the SDK's do
            this = weakref.ref(self)

            def fresh_in_child() -> None:
                processor = this()
                if processor is not None:
                    processor._fresh_state()

            os.register_at_fork(after_in_child=fresh_in_child)

    def _fresh_state(self) -> None:
        """New locks, no open runs, nothing queued, no worker (at start, and in a forked
        child)."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        """Notified when there is work for the worker."""
        self._room = threading.Condition(self._lock)
        """Notified when the worker took what was queued (callers waiting for room go on)."""
        self._waiting = 0
        """Callers waiting for room now."""
        self._intake: deque[_Span | _Watch | _Flush] = deque()
        self._reader = DecisionReader()
        self._lifecycle = Lifecycle(self._timing)
        self._worker: threading.Thread | None = None
        self._stopped: _Flush | None = None
        """Shutdown's marker, once it was asked for."""

    # SpanProcessor interface

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Note a run span that opens: its run ends with that span, never for idleness."""
        if span.name == names.RUN_SPAN and not self._stopping:
            self._queue(_RunSpan(plain(span.attributes), ended=False), wake=False)

    def on_end(self, span: ReadableSpan) -> None:
        """Queue what the worker reads of a decision or run span (waiting for room while the
        intake is full); any other span costs a name check."""
        name = span.name
        if name == names.RUN_SPAN:
            self._queue(_RunSpan(plain(span.attributes), ended=True), wake=True)
        elif name.startswith(names.DECISION_SPAN_PREFIX):
            try:
                facts = self._reader.facts(span)
            except Exception:
                self.dropped += 1
                logger.debug("verdictgate: unreadable span", exc_info=True)
                return
            self._queue(facts, wake=False)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every span ended so far is recorded, and every run that ended (or whose
        idle period or window is due) is assessed and published; False if `timeout_millis`
        passed first. A flush never ends a run early."""
        if threading.current_thread() is self._worker:
            return False  # from a publisher or callback on the worker: never wait on itself
        if self._stopping:  # what there was is shutdown's to publish
            stopped = self._stopped
            return stopped is None or stopped.done.wait(timeout_millis / 1000)
        flush = _Flush()
        self._intake.append(flush)
        self._ensure_worker(wake=True)
        return flush.done.wait(timeout_millis / 1000)

    def shutdown(self) -> None:
        """End every open run, publish what is pending, stop the worker; later spans are
        ignored (and counted late)."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            flush = self._stopped = _Flush(stop=True)
            self._intake.append(flush)
            self._room.notify_all()  # callers waiting for room: their spans are late
        worker = self._ensure_worker(wake=True)
        if worker is not threading.current_thread() and not flush.done.wait(SHUTDOWN_SECONDS):
            logger.warning(
                "verdictgate: runs not yet published after %g s at shutdown", SHUTDOWN_SECONDS
            )

    # Queries

    def assessment(self, run_id: str) -> Assessment | None:
        """The latest assessment of a run (interim while a canary window is open), if any."""
        with self._lock:
            return self._assessments.get(run_id)

    def watch(self, run_id: str, on_trial: Callable[[Trial], None] | None) -> None:
        """Call `on_trial`, on the worker, with every new trial of `run_id` whose span ends
        from now on (None: stop, after the trials of spans that ended before); `force_flush`
        returns after it was called for every trial ended before."""
        if not self._stopping:
            self._intake.append(_Watch(run_id, on_trial))
            self._ensure_worker()

    # The caller's side: a name check and a queue

    def _queue(self, span: _Span, wake: bool) -> None:
        """Queue a span for the worker, first waiting for room if `max_queue_size` are queued
        (never on the worker's own thread); a span after shutdown is late."""
        with self._lock:
            intake = self._intake
            if (
                len(intake) >= self._max_queue_size
                and not self._stopping
                and threading.current_thread() is not self._worker
            ):
                self._wait_for_room()
            if self._stopping:
                self.late += 1
                return
            intake.append(span)
            if wake or len(intake) == WAKE_BATCH or self._worker is None:
                self._worker_locked(wake=True)

    def _wait_for_room(self) -> None:
        """Wait, holding the lock between looks, until fewer than `max_queue_size` spans are
        queued or the processor shuts down."""
        self.waited += 1
        self._waiting += 1
        try:
            while len(self._intake) >= self._max_queue_size and not self._stopping:
                self._worker_locked(wake=True)
                self._room.wait(ROUND_SECONDS)  # and look again, should the worker have died
        finally:
            self._waiting -= 1

    def _ensure_worker(self, wake: bool = False) -> threading.Thread:
        """Start the worker on first need; wake it when asked."""
        with self._lock:
            return self._worker_locked(wake)

    def _worker_locked(self, wake: bool) -> threading.Thread:
        """`_ensure_worker`, the lock held."""
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(
                target=self._work, name="verdictgate-evidence", daemon=True
            )
            self._worker.start()
        if wake:
            self._wake.notify()
        return self._worker

    # The worker's side: read, record, decide, assess, publish

    def _work(self) -> None:
        while True:
            with self._wake:
                if not self._intake:
                    self._wake.wait(ROUND_SECONDS)
            stop = self._take_intake()
            if stop:
                return

    def _take_intake(self) -> bool:
        """Record what is queued, in order and at most a round's worth (so that what is due
        is acted on under a steady stream too), acting on what is due at each flush marker
        and at the end; True once shut down."""
        intake = self._intake
        for _ in range(ROUND_SPANS):
            if not intake:
                break
            item = intake.popleft()
            if not isinstance(item, _Flush):
                self._read(item)
                continue
            self._made_room()
            self._act(self._clock())
            if item.stop:
                self._shut_down()
            item.done.set()
            if item.stop:
                return True
        self._made_room()
        self._act(self._clock())
        return False

    def _made_room(self) -> None:
        """Let callers waiting for room go on (before the worker assesses and publishes)."""
        if self._waiting:
            with self._lock:
                self._room.notify_all()

    def _shut_down(self) -> None:
        """End and publish every open run; what was queued after shutdown is late."""
        self._lifecycle.shutdown()
        self._act(self._clock())
        for rest in self._intake:
            if isinstance(rest, _Flush):
                rest.done.set()  # a flush after shutdown's: nothing more to do
            elif isinstance(rest, tuple) or (isinstance(rest, _RunSpan) and rest.ended):
                self.late += 1
        self._intake.clear()

    def _read(self, item: _Span | _Watch) -> None:
        """One queued span into the lifecycle (or a watcher changed); an unreadable span is
        counted, never raised."""
        if isinstance(item, _Watch):
            if item.on_trial is None:
                self._watchers.pop(item.run_id, None)
            else:
                self._watchers[item.run_id] = item.on_trial
            return
        lifecycle, now = self._lifecycle, self._clock()
        try:
            if isinstance(item, _RunSpan):
                if not item.ended:
                    with contextlib.suppress(ValueError):  # read again, and counted, at its end
                        lifecycle.started(run_declaration(item.attributes), now)
                elif not lifecycle.ended(run_declaration(item.attributes), now):
                    self.late += 1
                return
            attributes, elapsed = attributes_of(item), item[2]
            if names.OUTCOME not in attributes:
                return
            trial = trial_from_attributes(attributes, elapsed / 1e6 if elapsed > 0 else None)
            # read as they were written (not checked to be strings, as a receiver checks them)
            suite, point = attributes.get(names.SUITE), attributes.get(names.POINT)
            is_new = lifecycle.record(
                trial, now, cast("str | None", suite), cast("str | None", point)
            )
        except Exception:
            self.dropped += 1
            logger.debug("verdictgate: unreadable span", exc_info=True)
            return
        if is_new is None:
            self.late += 1
        elif is_new and self._watchers:
            watcher = self._watchers.get(trial.run)
            if watcher is not None:
                self._isolated(trial.run, lambda: watcher(trial))

    def _act(self, now: float) -> None:
        """Assess and publish what the lifecycle says is due; a sequential look that decides
        its run ends it."""
        while rulings := self._lifecycle.due(now):
            for ruling in rulings:
                self._isolated(ruling.run_id, functools.partial(self._do, ruling))

    def _do(self, ruling: Ruling) -> None:
        """End a run a look decides, or assess and publish a final or interim admission."""
        if isinstance(ruling, Look):
            if decided_round(ruling.evidence, ruling.declaration, ruling.first, ruling.last):
                self._lifecycle.close(ruling.run_id, FinalReason.SEQUENTIAL)
            return
        final = isinstance(ruling, Final)
        assessment = assess_declared(
            ruling.evidence,
            ruling.declaration,
            in_progress=not final,
            declaration_conflict=isinstance(ruling, Final) and ruling.declaration_conflict,
        )
        with self._lock:
            self._assessments[ruling.run_id] = assessment
            self._assessments.move_to_end(ruling.run_id)
            while len(self._assessments) > KEPT_ASSESSMENTS:
                self._assessments.popitem(last=False)
        if self._publisher is not None:
            routes = ruling.declaration.metric_routes
            self._publisher.publish(assessment, routes, final=final)
        if self._on_assessment is not None:
            self._on_assessment(assessment)

    @staticmethod
    def _isolated(run_id: str, work: Callable[[], object]) -> None:
        """Do one run's work on the worker (a watcher, an assessment, a publication); a failure
        is logged, never raised."""
        try:
            work()
        except Exception:
            logger.warning("verdictgate: work on run %s failed", run_id, exc_info=True)
