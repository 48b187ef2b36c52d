"""Regression baselines: freeze a qualified run, then check later runs against it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .assessment import Assessment, Status
from .drift import Summary, summary_document, summary_from_document, summary_of
from .errors import InputError, SnapshotRefused
from .policy import Claim, PassWhen, Policy
from .stats import Method, Stability
from .suite import Contract, Suite
from .suite_file import SUITE_SCHEMA, read_json, suite_from_document
from .wire_types import JsonObject, JsonValue

SNAPSHOT_SCHEMA = "verdictgate.snapshot/v1"


def contract_document(contract: Contract) -> JsonObject:
    """A contract as it is written in suite and snapshot files."""
    return {
        "allowed": sorted(contract.allowed),
        "required": sorted(contract.required or ()),
        "critical": sorted(contract.critical),
        "targets": dict(contract.targets),
        "minimum_cases": dict(contract.minimum_cases),
        "allowed_no_decisions": sorted(contract.allowed_no_decisions),
    }


def snapshot(assessment: Assessment, suite: Suite, *, approved: bool) -> JsonObject:
    """The baseline document (`verdictgate.snapshot/v1`, JSON-ready) of a qualified run that
    `approved` says a person approved; never holds raw inputs. SnapshotRefused otherwise."""
    if not approved:
        raise SnapshotRefused(
            "a baseline must be approved by a person: pass {approved}=True", arguments=("approved",)
        )
    if assessment.status is not Status.QUALIFIED:
        raise SnapshotRefused(
            f"the run is {assessment.status.value}, and only a qualified run can become a baseline"
        )
    routes = {route.route: route.change.result.value for route in assessment.routes}
    return {
        "schema": SNAPSHOT_SCHEMA,
        "approved": True,
        "suite": {
            "schema": SUITE_SCHEMA,
            "name": suite.name,
            "point": suite.point,
            "contract": contract_document(suite.contract),
            "cases": [
                {"id": case.case, **({"expected": case.route} if case.route else {})}
                for case in assessment.cases
            ],
        },
        "policy": {
            "tolerance": assessment.policy.tolerance,
            "confidence": assessment.policy.confidence,
            "dominance_threshold": assessment.policy.dominance_threshold,
            "pass_rate": assessment.policy.pass_rate,
            "pass_when": assessment.policy.pass_when.value,
            "max_p95_ms": assessment.policy.max_p95_ms,
            "max_p95_tool_calls": assessment.policy.max_p95_tool_calls,
            "method": assessment.policy.method.value,
            "claim": assessment.policy.claim.value,
        },
        "fingerprints": assessment.run.fingerprints,
        "verdicts": {case.case: case.verdict for case in assessment.cases},
        "evidence": {
            "run": assessment.run.id,
            "isolation": assessment.run.isolation.value,
            "status": assessment.status.value,
            "pairs": assessment.pooled.pairs,
            "flips": assessment.pooled.flips,
            "ci_low": assessment.pooled.ci_low,
            "ci_high": assessment.pooled.ci_high,
            "routes": routes,
            "trials": assessment.trials.received,
            "counts": summary_document(summary_of(assessment)),
        },
    }


@dataclass(frozen=True)
class Baseline:
    """A loaded snapshot: the suite and policy it was admitted under, each case's verdict, and
    the counts a later build is compared with (None in a snapshot older than them)."""

    suite: Suite
    policy: Policy
    verdicts: dict[str, str]
    routes: dict[str, str]
    counts: Summary | None = None


def baseline_from_document(document: JsonValue, source: str) -> Baseline:
    """Read a snapshot document; errors name the file and field."""
    if not isinstance(document, dict) or document.get("schema") != SNAPSHOT_SCHEMA:
        raise InputError(f"not a {SNAPSHOT_SCHEMA} file", path=source, field="schema")
    if document.get("approved") is not True:
        raise InputError("the snapshot was not approved", path=source, field="approved")
    suite = suite_from_document(document.get("suite"), None, source=source)
    policy_fields = document.get("policy")
    verdicts = document.get("verdicts")
    if not isinstance(policy_fields, dict):
        raise InputError("must be an object", path=source, field="policy")
    if not isinstance(verdicts, dict):
        raise InputError("must be an object of case -> verdict", path=source, field="verdicts")
    try:
        policy = Policy(
            **{
                **policy_fields,
                # a snapshot from before these were kept was judged by the defaults
                "method": Method(policy_fields.get("method", Method.WILSON.value)),
                "claim": Claim(policy_fields.get("claim", Claim.TESTED.value)),
                "pass_when": PassWhen(policy_fields.get("pass_when", PassWhen.EVALUATOR.value)),
            }
        )
    except (TypeError, ValueError) as error:
        raise InputError(str(error), path=source, field="policy") from None
    evidence = document.get("evidence") or {}
    try:
        counts = summary_from_document(evidence["counts"])
    except (KeyError, TypeError):
        counts = None  # made by a version that did not keep them
    return Baseline(suite, policy, verdicts, evidence.get("routes") or {}, counts)


@dataclass(frozen=True)
class CaseChange:
    """A case whose stable verdict is not the baseline's (None: no stable verdict now)."""

    case: str
    route: str | None
    before: str | None
    after: str | None


@dataclass(frozen=True)
class Regression:
    """What changed against the baseline."""

    changed_cases: tuple[CaseChange, ...]
    unstable_routes: tuple[str, ...]

    @property
    def regressed(self) -> bool:
        return bool(self.changed_cases or self.unstable_routes)


def load_baseline(path: str | Path) -> Baseline:
    """Read a baseline file `snapshot` wrote; errors name the file and field."""
    return baseline_from_document(read_json(path), str(path))


def check(baseline: Baseline, assessment: Assessment) -> Regression:
    """Cases whose stable verdict changed and routes that became stochastic."""
    now = {case.case: case for case in assessment.cases}
    if baseline.verdicts and not set(baseline.verdicts) & set(now):
        raise InputError(
            "no case matches the snapshot's case ids; was it made with another fingerprint key?",
            field="case",
        )
    changed = tuple(
        CaseChange(case_id, now[case_id].route if case_id in now else None, before, after)
        for case_id, before in sorted(baseline.verdicts.items())
        if (after := now[case_id].verdict if case_id in now else None) != before
    )
    unstable = tuple(
        route.route
        for route in assessment.routes
        if route.change.result is Stability.STOCHASTIC
        and baseline.routes.get(route.route) != Stability.STOCHASTIC.value
    )
    return Regression(changed, unstable)


def regression_document(regression: Regression) -> JsonObject:
    """The regression as JSON fields."""
    return {
        "regressed": regression.regressed,
        "changed_cases": [
            {"case": c.case, "route": c.route, "before": c.before, "after": c.after}
            for c in regression.changed_cases
        ],
        "unstable_routes": list(regression.unstable_routes),
    }
