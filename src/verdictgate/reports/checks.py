"""The assessment as a list of named checks, for formats that report pass / fail per check."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..admission import REJECTING, interval, percent
from ..assessment import Assessment
from ..stats import Stability


class CheckResult(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    """Evidence of a problem (the run is rejected)."""
    UNDECIDED = "undecided"
    """Not enough or incomplete evidence (the run is inconclusive)."""
    NOT_JUDGED = "not_judged"
    """Reported but not gating, e.g. an untargeted route judged only through the pooled rate."""


@dataclass(frozen=True)
class Check:
    name: str
    result: CheckResult
    message: str


_CHECK_CODES: dict[str, tuple[str, ...]] = {
    "quality": ("quality_failed",),
    "invariants": ("invariant_blocked",),
    "relations": ("relation_violated", "relations_vacuous"),
    "isolation": ("shared_session",),
    "integrity": ("integrity_conflict",),
    "completeness": ("incomplete", "in_progress"),
    "repeats": ("no_repeats",),
    "stability.pooled": ("pooled_stochastic", "pooled_undecided"),
    "contract": (
        "contract_missing_intended",
        "contract_missing_observed",
        "contract_unknown_decision",
        "contract_under_cased",
    ),
    "dominance": ("dominant_decision",),
    "pass_rate": ("pass_rate_unreliable", "route_pass_rate_unreliable", "pass_rate_undecided"),
    "latency": ("latency_exceeded", "latency_undecided"),
    "tool_calls": ("tool_calls_exceeded", "tool_calls_undecided"),
}

_PASSING_MESSAGES: dict[str, str] = {
    "quality": "no quality gate failed",
    "invariants": "no blocking invariant failed",
    "relations": "no metamorphic relation requested, or every one held",
    "isolation": "reruns were not declared to share a session",
    "integrity": "no trial identity received conflicting records",
    "completeness": "every planned trial was received without error",
    "repeats": "every case has at least two trials",
    "contract": "every required route was intended and reached; nothing outside the contract",
    "dominance": "the probes did not collapse onto one decision",
    "pass_rate": "no pass rate required, or it is shown above the rate required",
    "latency": "no latency threshold set, or the p95 is shown under it",
    "tool_calls": "no tool-call threshold set, or the p95 is shown under it",
}


def _not_shown(assessment: Assessment, name: str) -> str | None:
    """What a check with no reason of its own says when errors left it unshown: relations that
    could not be checked, required routes whose cases' trials all errored or never arrived."""
    if name == "contract" and (unknown := assessment.coverage.missing_observed):
        return (
            "not yet shown: no trial reached required routes whose cases' trials all errored or "
            "were not received: " + ", ".join(unknown)
        )
    if name == "relations" and (errored := [r for r in assessment.run.relations if r.errored]):
        return (
            "no relation was violated, but some could not be checked (a transform or the agent "
            "raised, or the first answer errored): "
            + "; ".join(f"{r.name} on {', '.join(r.errored)}" for r in errored)
        )
    return None


def checks(assessment: Assessment) -> list[Check]:
    """Every check of the admission rule, with its result and the reason behind it."""
    by_code = {reason.code: reason for reason in assessment.reasons}
    result: list[Check] = []
    for name, codes in _CHECK_CODES.items():
        found = [by_code[code] for code in codes if code in by_code]
        if not found and (unshown := _not_shown(assessment, name)):
            # no evidence of a problem, yet not shown either: incomplete, like an error trial
            result.append(Check(name, CheckResult.UNDECIDED, unshown))
            continue
        if not found:
            message = (
                f"{interval(assessment.pooled)}, below {percent(assessment.pooled.tolerance)}"
                if name == "stability.pooled"
                else _PASSING_MESSAGES[name]
            )
            if name == "invariants" and assessment.invariants.warned:
                message += "; warnings: " + ", ".join(
                    f"{n} in {c} trials" for n, c in assessment.invariants.warned.items()
                )
            result.append(Check(name, CheckResult.PASSED, message))
            continue
        failed = any(reason.code in REJECTING for reason in found)
        outcome = CheckResult.FAILED if failed else CheckResult.UNDECIDED
        result.append(Check(name, outcome, "; ".join(reason.message for reason in found)))
    for route in assessment.routes:
        change = route.change
        summary = (
            f"{interval(change)}, tolerance {percent(change.tolerance)}: {change.result.value}"
        )
        if change.result is Stability.STOCHASTIC:
            outcome = CheckResult.FAILED
        elif change.result is Stability.DETERMINISTIC:
            outcome = CheckResult.PASSED
        elif route.targeted:
            outcome = CheckResult.UNDECIDED
        else:
            outcome = CheckResult.NOT_JUDGED
            summary += " (no target of its own; judged within the pooled rate)"
        result.append(Check(f"stability.route.{route.route}", outcome, summary))
    return result
