"""The assessment as a list of named checks, for formats that report pass / fail per check; the
checks and the reasons behind them come from the admission rule's table."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..admission import CHECKS, RULE_OF, Rule, interval, listing, percent, population_summary
from ..assessment import Assessment, Reason, Status
from ..policy import Claim
from ..stats import Stability
from .bounds import bounded


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


def _not_shown(assessment: Assessment, name: str) -> str | None:
    """What a check with no reason of its own says when errors left it unshown: relations that
    could not be checked, required routes whose cases' trials all errored or never arrived."""
    if name == "contract" and (unknown := assessment.coverage.missing_observed):
        return (
            "not yet shown: no trial reached required routes whose cases' trials all errored or "
            "were not received: " + listing(unknown)
        )
    if name == "contract" and (unordered := assessment.coverage.unordered):
        return (
            "not yet shown: required routes reached only by tied paths, whose order may as well "
            "be another allowed decision: " + listing(unordered)
        )
    if name == "relations" and (errored := [r for r in assessment.relations if r.errored]):
        return (
            "no relation was violated, but some could not be checked (a transform or the agent "
            "raised, or the first answer errored): "
            + listing((f"{r.name} on {listing(r.errored)}" for r in errored), "; ")
        )
    return None


def _passing(assessment: Assessment, name: str) -> str:
    """What a check says when none of its reasons applies."""
    if name == "stability.pooled":
        pooled = assessment.pooled
        return f"{interval(pooled)}, below {percent(pooled.tolerance)}"
    message = CHECKS[name]
    if name == "order" and (n := assessment.ambiguous_pairs):
        message += (
            f"; {n} rerun {'pair' if n == 1 else 'pairs'} equal only up to the order of tied "
            "steps left out of the change rates"
        )
    if name == "invariants" and assessment.invariants.warned:
        message += "; warnings: " + listing(
            f"{n} in {c} trials" for n, c in assessment.invariants.warned.items()
        )
    return message


def _other_claim(assessment: Assessment, name: str) -> Check | None:
    """The stability check of the claim not made: reported, not gating."""
    claim = assessment.policy.claim
    if name == "stability.pooled" and claim is Claim.POPULATION:
        summary = f"{interval(assessment.pooled)}: {assessment.pooled.result.value}"
    elif name == "stability.population" and claim is Claim.TESTED:
        summary = f"{population_summary(assessment)}: {assessment.population.result.value}"
    else:
        return None
    return Check(
        name, CheckResult.NOT_JUDGED, f"{summary} (reported; the run claims {claim.value})"
    )


def _route_checks(assessment: Assessment) -> list[Check]:
    """`stability.route`, one check per route."""
    result = []
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


def checks(assessment: Assessment) -> list[Check]:
    """Every check of the admission rule, with its result and the reasons behind it; one check
    per route for the routes a bounded report lists (`bounds.bounded`)."""
    assessment, _ = bounded(assessment)
    found: dict[str, list[tuple[Rule, Reason]]] = {name: [] for name in CHECKS}
    for code, reason in zip(assessment.reason_codes, assessment.reasons, strict=True):
        found[RULE_OF[code].check].append((RULE_OF[code], reason))
    result: list[Check] = []
    for name, fired in found.items():
        if name == "stability.route":
            result += _route_checks(assessment)
        elif other := _other_claim(assessment, name):
            result.append(other)
        elif fired:
            rejects = any(rule.effect is Status.REJECTED for rule, _ in fired)
            outcome = CheckResult.FAILED if rejects else CheckResult.UNDECIDED
            result.append(Check(name, outcome, "; ".join(reason.message for _, reason in fired)))
        elif unshown := _not_shown(assessment, name):
            # no evidence of a problem, yet not shown either: incomplete, like an error trial
            result.append(Check(name, CheckResult.UNDECIDED, unshown))
        else:
            result.append(Check(name, CheckResult.PASSED, _passing(assessment, name)))
    return result
