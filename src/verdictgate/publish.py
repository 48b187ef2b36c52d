"""Publishing an assessment into a telemetry pipeline: admission span, evaluation event, metrics."""

from __future__ import annotations

import threading
from collections.abc import Set as AbstractSet
from typing import Any

from opentelemetry import _logs, metrics, trace
from opentelemetry.trace import SpanKind

from . import conventions as names
from .assessment import Assessment, Status
from .stats import Stability, wilson_interval


def admission_attributes(assessment: Assessment) -> dict[str, Any]:
    """Attributes of the `verdictgate.admission` span."""
    a = assessment
    return {
        names.RUN_ID: a.run.id,
        names.SUITE: a.run.suite,
        names.POINT: a.run.point,
        names.STATUS: a.status.value,
        names.REASONS: list(a.reason_codes),
        names.STABILITY_RESULT: a.pooled.result.value,
        names.STABILITY_PAIRS: a.pooled.pairs,
        names.STABILITY_FLIPS: a.pooled.flips,
        names.STABILITY_CI_LOW: a.pooled.ci_low,
        names.STABILITY_CI_HIGH: a.pooled.ci_high,
        names.ROUTES_STOCHASTIC: list(a.routes_with(Stability.STOCHASTIC)),
        names.ROUTES_UNDECIDED: list(a.routes_with(Stability.UNDECIDED)),
        names.ROUTES_DETERMINISTIC: list(a.routes_with(Stability.DETERMINISTIC)),
        names.TRIALS_EXPECTED: a.trials.expected,
        names.TRIALS_RECEIVED: a.trials.received,
        names.TRIALS_ERRORS: a.trials.errors,
        names.TRIALS_CONFLICTS: a.trials.conflicts,
        names.INVARIANTS_BLOCKED: sorted(a.invariants.failed),
        names.INVARIANTS_WARNED: sorted(a.invariants.warned),
        **({names.PASS_RATE_RESULT: a.pass_rate.result.value} if a.pass_rate else {}),
        names.PASS_RATE_ROUTES_UNRELIABLE: list(a.passes.unreliable_routes()),
        names.EVALUATIONS_SKIPPED: a.passes.skipped,
        **({names.LATENCY_P95_MS: a.latency.p95[0]} if a.latency else {}),
        **({names.LATENCY_RESULT: a.latency.result} if a.latency and a.latency.result else {}),
        **(
            {names.TOOL_CALLS_RESULT: a.tool_calls.result}
            if a.tool_calls and a.tool_calls.result
            else {}
        ),
        names.RELATIONS_VIOLATED: [
            f"{r.name}={route}" for r in a.run.relations for route in r.violated
        ],
    }


class Publisher:
    """Publishes assessments through whichever providers it is given (the globals by default).

    Metric attributes are limited to suite, point and contract routes; any other route is
    folded into `_other`, and no case id ever becomes a metric attribute.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        logger_provider: _logs.LoggerProvider | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(
            names.INSTRUMENTATION_SCOPE, tracer_provider=tracer_provider
        )
        self._logger = _logs.get_logger(
            names.INSTRUMENTATION_SCOPE, logger_provider=logger_provider
        )
        meter = metrics.get_meter(names.INSTRUMENTATION_SCOPE, meter_provider=meter_provider)
        self._admission = meter.create_gauge(
            names.METRIC_ADMISSION, unit="1", description="1 when the last run was qualified"
        )
        self._inconclusive = meter.create_gauge(
            names.METRIC_INCONCLUSIVE, unit="1", description="1 when the last run was inconclusive"
        )
        self._upper = meter.create_gauge(
            names.METRIC_CHANGE_RATE_UPPER,
            unit="1",
            description="upper bound of the change rate between reruns (pooled, and per route)",
        )
        self._pass_lower = meter.create_gauge(
            names.METRIC_PASS_RATE_LOWER,
            unit="1",
            description="lower bound of the evaluator pass rate (pooled, and per route)",
        )
        self._trials = meter.create_counter(
            names.METRIC_TRIALS, unit="{trial}", description="trials assessed, by outcome"
        )
        self._counted: dict[str, dict[str, int]] = {}
        """Run id -> trials already added to the counter, for runs published before final."""
        self._counted_lock = threading.Lock()

    def publish(
        self, assessment: Assessment, contract_routes: AbstractSet[str], *, final: bool = True
    ) -> None:
        """Emit the admission span, the evaluation event in its context, and the metrics.

        A run published more than once (a receiver's canary windows, then its final admission)
        adds to the trials counter only what it had not counted yet; `final` forgets it."""
        with self._tracer.start_as_current_span(
            names.ADMISSION_SPAN,
            kind=SpanKind.INTERNAL,
            attributes=admission_attributes(assessment),
        ):
            self._logger.emit(
                event_name=names.EVALUATION_EVENT,
                attributes={
                    names.EVALUATION_NAME: names.EVALUATION_NAME_VALUE,
                    names.EVALUATION_SCORE_LABEL: assessment.status.value,
                    names.EVALUATION_SCORE_VALUE: assessment.pooled.ci_high,
                    names.RUN_ID: assessment.run.id,
                },
            )
        self._record_metrics(assessment, contract_routes)
        self._count_trials(assessment, final)

    def _record_metrics(self, assessment: Assessment, contract_routes: AbstractSet[str]) -> None:
        base = {names.SUITE: assessment.run.suite, names.POINT: assessment.run.point}
        self._admission.set(int(assessment.status is Status.QUALIFIED), base)
        self._inconclusive.set(int(assessment.status is Status.INCONCLUSIVE), base)
        self._upper.set(assessment.pooled.ci_high, base)
        for route in assessment.routes:
            label = route.route if route.route in contract_routes else names.OTHER_ROUTE
            self._upper.set(route.change.ci_high, {**base, names.ROUTE: label})
        passes = assessment.passes
        confidence = assessment.policy.confidence
        if passes.judged:
            self._pass_lower.set(wilson_interval(passes.passed, passes.judged, confidence)[0], base)
        for route, (passed, judged) in passes.routes.items():
            label = route if route in contract_routes else names.OTHER_ROUTE
            low = wilson_interval(passed, judged, confidence)[0]
            self._pass_lower.set(low, {**base, names.ROUTE: label})

    def _count_trials(self, assessment: Assessment, final: bool) -> None:
        trials = assessment.trials
        counts = {
            "decision": trials.decisions,
            "no_decision": trials.no_decisions,
            "error": trials.errors,
        }
        with self._counted_lock:
            if final:
                before = self._counted.pop(assessment.run.id, {})
            else:
                before = self._counted.get(assessment.run.id, {})
                self._counted[assessment.run.id] = counts
        base = {names.SUITE: assessment.run.suite, names.POINT: assessment.run.point}
        for outcome, count in counts.items():
            if count > before.get(outcome, 0):
                self._trials.add(count - before.get(outcome, 0), {**base, names.OUTCOME: outcome})
