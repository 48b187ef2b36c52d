"""One admission as plain values: what the admission span, the evaluation event and the metrics
carry. Made once from an assessment, it can wait in a durable outbox and be sent again unchanged."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass

from ..assessment import Assessment, Status
from ..stats import Stability, rate_interval
from ..wire_types import AttributeValue
from . import conventions as names

GAUGES: dict[str, tuple[str, str]] = {
    names.METRIC_ADMISSION: ("1", "1 when the last run was qualified"),
    names.METRIC_INCONCLUSIVE: ("1", "1 when the last run was inconclusive"),
    names.METRIC_INCONCLUSIVE_STREAK: ("{run}", "inconclusive runs in a row, the last included"),
    names.METRIC_ADMISSION_TIME: ("s", "unix time of the last admission"),
    names.METRIC_ADMISSION_RUN: ("s", "unix time of the last admission, by the run it admitted"),
    names.METRIC_CHANGE_RATE_UPPER: (
        "1",
        "upper bound of the change rate between reruns (pooled, and per route)",
    ),
    names.METRIC_PASS_RATE_LOWER: (
        "1",
        "lower bound of the evaluator pass rate (pooled, and per route)",
    ),
}
"""Gauge name -> (unit, description)."""
COUNTER = ("{trial}", "trials assessed, by outcome")
"""Unit and description of the `verdictgate.trials` counter."""

Point = tuple[str, float, dict[str, AttributeValue]]
"""(metric name, value, attributes) of one gauge data point."""


def admission_attributes(assessment: Assessment) -> dict[str, AttributeValue]:
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
        **(
            {names.LATENCY_RESULT: a.latency.result.value} if a.latency and a.latency.result else {}
        ),
        **(
            {names.TOOL_CALLS_RESULT: a.tool_calls.result.value}
            if a.tool_calls and a.tool_calls.result
            else {}
        ),
        names.RELATIONS_VIOLATED: [
            f"{r.name}={route}" for r in a.relations for route in r.violated
        ],
    }


def publishing_resource() -> dict[str, AttributeValue]:
    """The resource a receiver publishes as: the SDK's (`OTEL_RESOURCE_ATTRIBUTES`,
    `OTEL_SERVICE_NAME`), named `verdictgate` unless the environment names it."""
    from opentelemetry.sdk.resources import Resource

    resource = dict(Resource.create().attributes)
    if str(resource.get(names.SERVICE_NAME, "")).startswith("unknown_service"):
        resource[names.SERVICE_NAME] = "verdictgate"
    return resource


OVERFLOW = "otel.metric.overflow"
"""The attribute of the series that holds what a cardinality limit turned away, as the
OpenTelemetry SDK names it."""


class MetricLabels:
    """The (suite, point) label values metrics may carry, so senders cannot grow the number of
    series without bound: the first `limit` pairs seen, of the `allowed` suites when given. Any
    other run is published on the overflow series (`otel.metric.overflow=true`, its admission
    gauges only), as the OpenTelemetry SDK does beyond its cardinality limit; spans always carry
    the real names."""

    def __init__(self, allowed: AbstractSet[str] | None = None, limit: int = 50) -> None:
        self._allowed = allowed
        self._limit = limit
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def base(self, suite: str, point: str) -> dict[str, AttributeValue]:
        """The attributes a run's metrics carry."""
        pair = (suite, point)
        with self._lock:
            admitted = (self._allowed is None or suite in self._allowed) and (
                pair in self._seen or len(self._seen) < self._limit
            )
            if admitted:
                self._seen.add(pair)
        return {names.SUITE: suite, names.POINT: point} if admitted else {OVERFLOW: True}


def _gauges(
    assessment: Assessment,
    contract_routes: AbstractSet[str],
    base: dict[str, AttributeValue],
    when_ns: int,
) -> list[Point]:
    """The gauge points of an admission made at `when_ns`, one per series; routes outside the
    contract fold into `_other` (the highest change-rate bound and the lowest pass-rate bound
    among them)."""

    def label(route: str) -> dict[str, AttributeValue]:
        return {**base, names.ROUTE: route}

    points: list[Point] = [
        (names.METRIC_ADMISSION, int(assessment.status is Status.QUALIFIED), base),
        (names.METRIC_INCONCLUSIVE, int(assessment.status is Status.INCONCLUSIVE), base),
        (names.METRIC_ADMISSION_TIME, when_ns / 1e9, base),
        (names.METRIC_CHANGE_RATE_UPPER, assessment.pooled.ci_high, base),
    ]
    passes, confidence = assessment.passes, assessment.policy.confidence
    method = assessment.policy.method
    if passes.judged:
        low = rate_interval(passes.passed, passes.judged, confidence, method)[0]
        points.append((names.METRIC_PASS_RATE_LOWER, low, base))
    if OVERFLOW in base:
        return points  # one point per gauge: the overflow series has no routes nor run
    points.append(
        (names.METRIC_ADMISSION_RUN, when_ns / 1e9, {**base, names.RUN_ID: assessment.run.id})
    )
    upper: dict[str, float] = {}  # routes outside the contract share `_other`: the worst counts
    for stability in assessment.routes:
        name = stability.route if stability.route in contract_routes else names.OTHER_ROUTE
        upper[name] = max(upper.get(name, 0.0), stability.change.ci_high)
    lower: dict[str, float] = {}
    for route, (passed, judged) in passes.routes.items():
        name = route if route in contract_routes else names.OTHER_ROUTE
        low = rate_interval(passed, judged, confidence, method)[0]
        lower[name] = min(lower.get(name, 1.0), low)
    points += [(names.METRIC_CHANGE_RATE_UPPER, v, label(r)) for r, v in upper.items()]
    points += [(names.METRIC_PASS_RATE_LOWER, v, label(r)) for r, v in lower.items()]
    return points


def trial_counts(assessment: Assessment) -> dict[str, int]:
    """Trials of an assessment by outcome, as the trials counter labels them."""
    trials = assessment.trials
    return {
        "decision": trials.decisions,
        "no_decision": trials.no_decisions,
        "error": trials.errors,
    }


class TrialTally:
    """What each run has already added to the trials counter, so that a run published more than
    once (canary windows, then its final admission) counts every trial once."""

    def __init__(self) -> None:
        self._counted: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def added(self, run_id: str, counts: Mapping[str, int], final: bool) -> dict[str, int]:
        """The part of `counts` not counted yet; a final publication forgets the run."""
        with self._lock:
            before = self._counted.pop(run_id, {}) if final else self._counted.get(run_id, {})
            if not final:
                self._counted[run_id] = dict(counts)
        return {
            outcome: count - before.get(outcome, 0)
            for outcome, count in counts.items()
            if count > before.get(outcome, 0)
        }


class InconclusiveStreaks:
    """Inconclusive runs in a row per (suite, point), as a long-lived publisher sees them."""

    def __init__(self) -> None:
        self._streaks: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def after(self, assessment: Assessment, final: bool) -> int:
        """The streak with this admission: a final one extends or ends it, an interim one (a
        canary window) leaves it as it was."""
        key = (assessment.run.suite, assessment.run.point)
        with self._lock:
            streak = streak_after(self._streaks.get(key, 0), assessment, final)
            if final:
                self._streaks[key] = streak
            return streak


def streak_after(previous: int, assessment: Assessment, final: bool) -> int:
    """Inconclusive runs in a row with this admission, after `previous` of them: a final one
    extends or ends the streak, an interim one (a canary window) leaves it as it was."""
    if not final:
        return previous
    return previous + 1 if assessment.status is Status.INCONCLUSIVE else 0


@dataclass(frozen=True)
class AdmissionRecord:
    """Everything one admission publishes; plain values, so it can be stored and sent again."""

    run_id: str
    suite: str
    point: str
    final: bool
    time_unix_nano: int
    trace_id: str
    """32 hex digits: the admission span's trace, the same on every delivery attempt."""
    span_id: str
    span_attributes: dict[str, AttributeValue]
    event_attributes: dict[str, AttributeValue]
    gauges: list[Point]
    trials_added: dict[str, int]
    """Outcome -> trials to add to the counter."""
    metric_base: dict[str, AttributeValue]
    """The attributes every metric of this admission carries (`MetricLabels.base`)."""

    @classmethod
    def of(
        cls,
        assessment: Assessment,
        contract_routes: AbstractSet[str],
        tally: TrialTally,
        *,
        final: bool = True,
        now_ns: int | None = None,
        labels: MetricLabels | None = None,
        inconclusive_streak: int | None = None,
    ) -> AdmissionRecord:
        """The publication of an assessment; `tally` keeps each trial counted once per run;
        `labels` bounds the label values of its metrics (default: the run's own names);
        `inconclusive_streak` is how many runs in a row of its suite were inconclusive, where
        the publisher knows."""
        run = assessment.run
        when_ns = time.time_ns() if now_ns is None else now_ns
        base: dict[str, AttributeValue] = (
            labels.base(run.suite, run.point)
            if labels is not None
            else {names.SUITE: run.suite, names.POINT: run.point}
        )
        return cls(
            run_id=run.id,
            suite=run.suite,
            point=run.point,
            final=final,
            time_unix_nano=when_ns,
            trace_id=secrets.token_hex(16),
            span_id=secrets.token_hex(8),
            span_attributes=admission_attributes(assessment),
            event_attributes={
                names.EVALUATION_NAME: names.EVALUATION_NAME_VALUE,
                names.EVALUATION_SCORE_LABEL: assessment.status.value,
                names.EVALUATION_SCORE_VALUE: assessment.pooled.ci_high,
                names.RUN_ID: run.id,
            },
            gauges=_gauges(assessment, contract_routes, base, when_ns)
            + (
                [(names.METRIC_INCONCLUSIVE_STREAK, inconclusive_streak, base)]
                if inconclusive_streak is not None
                else []
            ),
            trials_added=tally.added(run.id, trial_counts(assessment), final),
            metric_base=base,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> AdmissionRecord:
        fields = json.loads(text)
        fields["gauges"] = [tuple(point) for point in fields["gauges"]]
        fields.setdefault(  # staged by a release before metric labels were bounded
            "metric_base", {names.SUITE: fields["suite"], names.POINT: fields["point"]}
        )
        return cls(**fields)
