"""Run and decision span attributes written from the model (`span_decoding` reads them back)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..policy import PassWhen, Policy
from ..suite import Suite
from ..trial_model import Decision, Isolation, NoDecision, TiedSteps, Trial, outcome_of
from ..wire_types import AttributeValue
from . import conventions as names

if TYPE_CHECKING:  # instrumentation loads no module of the assessment
    from ..assessment import RelationResult


def _pairs(mapping: Mapping[str, float]) -> list[str]:
    return [f"{route}={value}" for route, value in sorted(mapping.items())]


def run_attributes(
    run_id: str, suite: Suite, policy: Policy, planned_trials: int, isolation: Isolation
) -> dict[str, AttributeValue]:
    """Attributes of the `verdictgate.run` span."""
    contract = suite.contract
    return {
        names.RUN_ID: run_id,
        names.SUITE: suite.name,
        names.POINT: suite.point,
        names.PLAN_CASES: len(suite.cases),
        names.PLAN_TRIALS: planned_trials,
        names.CONTRACT_ALLOWED: sorted(contract.allowed),
        names.CONTRACT_REQUIRED: sorted(contract.required or ()),
        names.CONTRACT_CRITICAL: sorted(contract.critical),
        names.CONTRACT_TARGETS: _pairs(contract.targets),
        names.CONTRACT_MINIMUM_CASES: _pairs(contract.minimum_cases),
        names.CONTRACT_ALLOWED_NO_DECISIONS: sorted(contract.allowed_no_decisions),
        names.TOLERANCE: policy.tolerance,
        names.METHOD: policy.method.value,
        names.CLAIM: policy.claim.value,
        names.CONFIDENCE: policy.confidence,
        names.DOMINANCE_THRESHOLD: policy.dominance_threshold,
        names.ISOLATION: isolation.value,
        **({names.PASS_RATE_REQUIRED: policy.pass_rate} if policy.pass_rate is not None else {}),
        **(
            {names.PASS_RATE_WHEN: policy.pass_when.value}
            if policy.pass_when is not PassWhen.EVALUATOR
            else {}
        ),
        **({names.MAX_P95_MS: policy.max_p95_ms} if policy.max_p95_ms is not None else {}),
        **(
            {names.MAX_P95_TOOL_CALLS: policy.max_p95_tool_calls}
            if policy.max_p95_tool_calls is not None
            else {}
        ),
    }


def decision_attributes(
    decision: Decision | None, error_type: str | None = None
) -> dict[str, AttributeValue]:
    """The outcome attributes of a decision span for a decision (None: an error)."""
    outcome = outcome_of(decision)
    attributes: dict[str, AttributeValue] = {names.OUTCOME: outcome.value}
    if isinstance(decision, str):
        attributes[names.VERDICT] = decision
    elif isinstance(decision, tuple):
        attributes[names.TOOLS] = list(decision)
    elif isinstance(decision, NoDecision):
        attributes[names.NO_DECISION_REASON] = decision.reason
    else:
        attributes[names.ERROR_TYPE] = error_type or "error"
    return attributes


def trial_attributes(trial: Trial) -> dict[str, AttributeValue]:
    """The attributes of the decision span that records `trial` (its latency is the span's
    duration): the inverse of `trial_from_attributes`."""
    attributes: dict[str, AttributeValue] = {
        names.RUN_ID: trial.run,
        names.CASE_ID: trial.case,
        names.TRIAL: trial.index,
        **decision_attributes(trial.decision, trial.error_type),
    }
    if trial.expected is not None:
        attributes[names.CASE_EXPECTED] = trial.expected
    if trial.passed is not None:
        attributes[names.PASSED] = trial.passed
    if trial.invariants_failed:
        attributes[names.INVARIANT_FAILED] = list(trial.invariants_failed)
    if trial.invariants_warned:
        attributes[names.INVARIANT_WARNED] = list(trial.invariants_warned)
    if trial.evaluation_skipped:
        attributes[names.EVALUATION_SKIPPED] = True
    if trial.tied_steps:
        attributes[names.TIED_STEPS] = flat_ranges(trial.tied_steps)
    if trial.aliases:
        attributes[names.CASE_ALIASES] = list(trial.aliases)
    if trial.key_id is not None:
        attributes[names.CASE_KEY_ID] = trial.key_id
    return attributes


def encode_routes(result: RelationResult, routes: tuple[str, ...]) -> list[str]:
    """`name=route` strings, as the run span carries them."""
    return [f"{result.name}={route}" for route in routes]


def flat_ranges(ranges: TiedSteps) -> list[int]:
    """Ranges as the span attribute carries them: start, end, start, end ..."""
    return [bound for pair in ranges for bound in pair]
