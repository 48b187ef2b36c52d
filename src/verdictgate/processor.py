"""EvidenceProcessor: an SDK span processor that turns decision spans into admissions."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from . import conventions as names
from .assessment import Assessment, Isolation, RunInfo
from .engine import assess
from .evidence import Evidence
from .fingerprints import fingerprint_mode
from .policy import Policy
from .publish import Publisher
from .spans import RunDeclaration, run_declaration, tier_fields, trial_fields
from .suite import Suite
from .trial_model import Trial

logger = logging.getLogger(__name__)

KEPT_ASSESSMENTS = 1000
"""How many finished assessments the processor keeps for lookup by run id."""


@dataclass
class _RunState:
    evidence: Evidence = field(default_factory=Evidence)
    suite: str | None = None
    point: str | None = None
    opened: float = field(default_factory=time.monotonic)


def _plain(attributes: Any) -> dict[str, Any]:
    """Span attributes as a plain dict (the SDK's mapping takes a lock on every read)."""
    if attributes is None:
        return {}
    copy = getattr(attributes, "copy", None)
    return copy() if copy is not None else dict(attributes)


class EvidenceProcessor(SpanProcessor):
    """Collects decision spans per run, synchronously in `on_end` (before any batching, so an
    exporter's full queue never drops evidence), and assesses a run when its `verdictgate.run`
    span ends. Runs without a run span (canaries) are assessed on `force_flush`, on `shutdown`,
    or every `canary_window` seconds.

    Memory grows with cases per open run, not with spans; it never raises into the caller.
    """

    def __init__(
        self,
        publisher: Publisher | None = None,
        *,
        canary_window: float | None = None,
        on_assessment: Callable[[Assessment], None] | None = None,
    ) -> None:
        self._publisher = publisher
        self._canary_window = canary_window
        self._on_assessment = on_assessment
        self._lock = threading.Lock()
        self._runs: dict[str, _RunState] = {}
        self._watchers: dict[str, Callable[[Trial], None]] = {}
        self._assessments: OrderedDict[str, Assessment] = OrderedDict()
        self.dropped = 0
        """Spans that looked like evidence but could not be read (malformed attributes)."""

    # SpanProcessor interface

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Read a decision or run span; any other span is ignored at the cost of a name check."""
        name = span.name
        try:
            if name.startswith(names.DECISION_SPAN_PREFIX):
                attributes = _plain(span.attributes)
                if names.OUTCOME in attributes:
                    elapsed = (span.end_time or 0) - (span.start_time or 0)
                    self._add_trial(attributes, elapsed / 1e6 if elapsed > 0 else None)
            elif name == names.RUN_SPAN:
                self._end_run(run_declaration(_plain(span.attributes)))
        except Exception:  # never raise into the instrumented code
            self.dropped += 1
            logger.debug("verdictgate: unreadable span %s", name, exc_info=True)

    def shutdown(self) -> None:
        """Assess every run still open."""
        self.force_flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Assess every run still open (canary runs without a run span)."""
        with self._lock:
            open_runs = list(self._runs.items())
            self._runs.clear()
        for run_id, state in open_runs:
            self._finish(run_id, state, None)
        return True

    # Queries

    def assessment(self, run_id: str) -> Assessment | None:
        """The latest assessment of a run, if it has been assessed."""
        with self._lock:
            return self._assessments.get(run_id)

    def watch(self, run_id: str, on_trial: Callable[[Trial], None] | None) -> None:
        """Call `on_trial` with every new trial of `run_id` (None stops watching)."""
        with self._lock:
            if on_trial is None:
                self._watchers.pop(run_id, None)
            else:
                self._watchers[run_id] = on_trial

    # Internals

    def _end_run(self, declaration: RunDeclaration) -> None:
        with self._lock:
            state = self._runs.pop(declaration.run_id, None) or _RunState()
        self._finish(declaration.run_id, state, declaration)

    def _add_trial(self, attributes: dict[str, Any], latency_ms: float | None) -> None:
        run, case, index, decision, expected, error_type = trial_fields(attributes)
        due: _RunState | None = None
        with self._lock:
            state = self._runs.get(run)
            if state is None:
                state = self._runs[run] = _RunState(
                    suite=attributes.get(names.SUITE), point=attributes.get(names.POINT)
                )
            passed = attributes.get(names.PASSED)
            passed = passed if isinstance(passed, bool) else None
            is_new = state.evidence.record(
                run, case, index, decision, expected, error_type, passed, latency_ms
            )
            tiers = tier_fields(attributes)
            if is_new and (tiers[0] or tiers[1] or tiers[2]):
                state.evidence.note_tiers(run, case, index, *tiers)
            watcher = self._watchers.get(run) if is_new and self._watchers else None
            window = self._canary_window
            if window is not None and time.monotonic() - state.opened >= window:
                due = self._runs.pop(run)
        if watcher is not None:
            failed, warned, skipped = tiers
            watcher(
                Trial(
                    case, index, decision, run, expected, error_type, passed, failed, warned,
                    latency_ms, skipped,
                )
            )  # fmt: skip
        if due is not None:
            self._finish(run, due, None)

    def _finish(self, run_id: str, state: _RunState, declaration: RunDeclaration | None) -> None:
        """Assess and publish one run; a failure is logged, never raised into the caller."""
        try:
            self._assess_and_publish(run_id, state, declaration)
        except Exception:
            logger.warning("verdictgate: could not assess run %s", run_id, exc_info=True)

    def _assess_and_publish(
        self, run_id: str, state: _RunState, declaration: RunDeclaration | None
    ) -> None:
        """Runs outside the lock: publishing ends a span, which re-enters on_end."""
        evidence = state.evidence
        if declaration is None:
            suite = Suite(name=state.suite or Suite.name, point=state.point or Suite.point)
            policy, planned, isolation = Policy(), None, Isolation.UNKNOWN
        else:
            suite, policy = declaration.suite, declaration.policy
            planned, isolation = declaration.planned_trials, declaration.isolation
        quality_failed = declaration.quality_failed if declaration else ()
        relations = declaration.relations if declaration else ()
        info = RunInfo(
            id=run_id,
            suite=suite.name,
            point=suite.point,
            isolation=isolation,
            fingerprints=fingerprint_mode(case for _, case in evidence.cases),
            quality_failed=quality_failed,
            relations=relations,
        )
        assessment = assess(evidence, suite, policy, run=info, planned_trials=planned)
        with self._lock:
            self._assessments[run_id] = assessment
            self._assessments.move_to_end(run_id)
            while len(self._assessments) > KEPT_ASSESSMENTS:
                self._assessments.popitem(last=False)
        if self._publisher is not None:
            self._publisher.publish(assessment, suite.contract.allowed | suite.contract.required)
        if self._on_assessment is not None:
            self._on_assessment(assessment)
