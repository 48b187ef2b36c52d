"""The JSON report, `verdictgate.report/v1`: every field REPORT.md names, and a few more."""

from __future__ import annotations

import json
import math

from ..assessment import Assessment, FlipPair
from ..case_names import Scheme
from ..stats import ChangeRate, Method, PassRate, Quantiles, side_error
from ..wire_types import JsonObject
from .bounds import bounded

REPORT_SCHEMA = "verdictgate.report/v1"


def _change(change: ChangeRate, ambiguous_pairs: int, worst: ChangeRate | None) -> JsonObject:
    """A change rate, with the pairs left out of it because ties hid their order, and its worst
    case, those pairs counted as flips (the test itself when no pair of the run was left out)."""
    worst = worst or change
    return {
        "pairs": change.pairs,
        "flips": change.flips,
        "ambiguous_pairs": ambiguous_pairs,
        "rate": change.rate,
        "ci_low": change.ci_low,
        "ci_high": change.ci_high,
        "tolerance": change.tolerance,
        "result": change.result.value,
        "stochastic_level": change.level,
        "worst_case": {
            "pairs": worst.pairs,
            "flips": worst.flips,
            "ci_low": worst.ci_low,
            "ci_high": worst.ci_high,
            "result": worst.result.value,
        },
    }


def _flip_pairs(pairs: tuple[FlipPair, ...]) -> list[JsonObject]:
    return [{"routes": list(pair.routes), "count": pair.count} for pair in pairs]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _quantiles(stats: Quantiles) -> JsonObject:
    quantiles = {
        name: {"estimate": e, "ci_low": _finite(low), "ci_high": _finite(high)}
        for name, (e, low, high) in (("p50", stats.p50), ("p95", stats.p95))
    }
    return {"trials": stats.trials, **quantiles}


def _judged_quantiles(stats: Quantiles | None, threshold: str) -> JsonObject | None:
    if stats is None:
        return None
    return {
        **_quantiles(stats),
        threshold: stats.max_p95,
        "result": stats.result.value if stats.result else None,
    }


def _judgement(rate: PassRate | None) -> JsonObject:
    """A pass rate's interval and result against the required rate (empty when none is required)."""
    if rate is None:
        return {}
    return {
        "required": rate.required,
        "ci_low": rate.ci_low,
        "ci_high": rate.ci_high,
        "result": rate.result.value,
        "unreliable_level": rate.level,
    }


def stopping_document(a: Assessment) -> JsonObject:
    """JSON `sequential`: where a run that could stop early stopped, and the calls it saved."""
    assert a.stopping is not None
    used = a.trials.expected
    return {
        "stopped_at_pairs": a.pooled.pairs,
        "calls_used": used,
        "calls_avoided": a.stopping.sized_for - used,
        "curtailed": a.stopping.curtailed,
        "reason": a.how_stopped,
    }


def report_document(assessment: Assessment) -> JsonObject:
    """The report as a JSON-ready dict, bounded (`bounds.bounded`): `omitted` counts what each
    bounded part left out. Its keys keep this order: tools read `verdictgate.report/v1`."""
    a, omitted = bounded(assessment)
    return {
        "schema": REPORT_SCHEMA,
        "status": a.status.value,
        "exit_code": a.status.exit_code,
        "reasons": [{"code": r.code, "message": r.message} for r in a.reasons],
        "headline": a.headline,
        "run": _run(a),
        "relations": _relations(a),
        **({"sequential": stopping_document(a)} if a.stopping is not None else {}),
        "population": _population(a),
        "policy": _policy(a),
        "trials": _trials(a),
        "stability": _stability(a),
        "coverage": _coverage(a),
        "dominance": {
            "verdict": a.dominance.verdict,
            "share": a.dominance.share,
            "cases": a.dominance.cases,
            "collapsed": a.dominance.collapsed,
        },
        "pass_rate": _pass_rate(a),
        "latency": _judged_quantiles(a.latency, "max_p95_ms"),
        "tool_calls": _judged_quantiles(a.tool_calls, "max_p95_tool_calls"),
        "invariants": {"failed": dict(a.invariants.failed), "warned": dict(a.invariants.warned)},
        "cases": _cases(a),
        "next_steps": list(a.next_steps),
        "omitted": omitted.counts,
    }


def _run(a: Assessment) -> JsonObject:
    """JSON `run`: which run of which suite and point, and how it was made."""
    return {
        "id": a.run.id,
        "suite": a.run.suite,
        "point": a.run.point,
        "isolation": a.run.isolation.value,
        "fingerprints": a.run.fingerprints,
        "in_progress": a.in_progress,
        "quality_failed": list(a.quality_failed),
    }


def _relations(a: Assessment) -> list[JsonObject]:
    """JSON `relations`: each metamorphic relation's status and the routes it held on."""
    return [
        {
            "name": r.name,
            "status": r.status.value,
            "violated": list(r.violated),
            "held": list(r.held),
            "errored": list(r.errored),
        }
        for r in a.relations
    ]


def _population(a: Assessment) -> JsonObject:
    """JSON `population`: the case-level verdict about new inputs, and its worst case (each
    case's pairs left out for ties counted as its flips; the verdict itself when none was)."""
    worst = a.worst_case.population if a.worst_case else a.population
    return {
        "cases": a.population.cases,
        "result": a.population.result.value,
        "e_det": a.population.e_det,
        "e_stoch": a.population.e_stoch,
        "cases_needed": a.population.cases_needed,
        "stochastic_level": a.population.level,
        "case_names": _case_names(a),
        "worst_case": {
            "cases": worst.cases,
            "e_det": worst.e_det,
            "e_stoch": worst.e_stoch,
            "result": worst.result.value,
        },
    }


def _case_names(a: Assessment) -> JsonObject:
    """JSON `population.case_names`: how the cases are named, each scheme with its cases, and
    the scheme judged alone when names no trial links may be one input (else null)."""
    naming = a.case_names
    return {
        "cases": naming.cases,
        "schemes": [{**_scheme(scheme), "cases": n} for scheme, n in naming.schemes],
        "judged": None if naming.judged is None else _scheme(naming.judged),
        "set_aside": naming.set_aside,
    }


def _scheme(scheme: Scheme) -> JsonObject:
    return {"scheme": scheme.kind, "key_id": scheme.key_id, "run": scheme.run}


def _policy(a: Assessment) -> JsonObject:
    """JSON `policy`: what the run was judged against."""
    return {
        "tolerance": a.policy.tolerance,
        "confidence": a.policy.confidence,
        "dominance_threshold": a.policy.dominance_threshold,
        "pass_rate": a.policy.pass_rate,
        "pass_when": a.policy.pass_when.value,
        "max_p95_ms": a.policy.max_p95_ms,
        "max_p95_tool_calls": a.policy.max_p95_tool_calls,
        "method": a.policy.method.value,
        "sequential": a.policy.method is Method.SEQUENTIAL,
        "claim": a.policy.claim.value,
    }


def _trials(a: Assessment) -> JsonObject:
    """JSON `trials`: the trials expected, received, and what became of them."""
    return {
        "expected": a.trials.expected,
        "received": a.trials.received,
        "missing": a.trials.missing,
        "decisions": a.trials.decisions,
        "no_decisions": a.trials.no_decisions,
        "errors": a.trials.errors,
        "error_types": dict(a.trials.error_types),
        "conflicts": a.trials.conflicts,
        "duplicates": a.trials.duplicates,
        "late": a.trials.late,
        "ambiguous_order": a.trials.ambiguous_order,
    }


def _stability(a: Assessment) -> JsonObject:
    """JSON `stability`: the pooled and per-route change rates, judged as one family."""
    return {
        "pooled": _change(
            a.pooled, a.ambiguous_pairs, a.worst_case.pooled if a.worst_case else None
        ),
        "routes": [
            {
                "route": r.route,
                "cases": r.cases,
                "targeted": r.targeted,
                **_change(r.change, r.ambiguous_pairs, r.worst_case),
                "flip_pairs": _flip_pairs(r.flip_pairs),
            }
            for r in a.routes
        ],
        "flip_pairs": _flip_pairs(a.flip_pairs),
        "family": {
            "tests": a.family_tests,
            "correction": "holm",
            "alpha": side_error(a.policy.confidence),
        },
    }


def _coverage(a: Assessment) -> JsonObject:
    """JSON `coverage`: the routes the contract names against those the run reached."""
    coverage = a.coverage
    return {
        "declared": coverage.declared,
        "required": list(coverage.required),
        "intended": dict(coverage.intended),
        "observed": list(coverage.observed),
        "missing_intended": list(coverage.missing_intended),
        "missing_observed": list(coverage.missing_observed),
        "unknown": list(coverage.unknown),
        "under_cased": list(coverage.under_cased),
        "critical_missing": list(coverage.critical_missing),
        "unordered": list(coverage.unordered),
        "satisfied": coverage.satisfied,
    }


def _pass_rate(a: Assessment) -> JsonObject:
    """JSON `pass_rate`: the trials that passed (as `policy.pass_when` says), pooled and per
    route."""
    return {
        "passed": a.passes.passed,
        "judged": a.passes.judged,
        "skipped": a.passes.skipped,
        **_judgement(a.pass_rate),
        "routes": {
            route: {
                "passed": passed,
                "judged": judged,
                **_judgement(a.passes.route_rates.get(route)),
            }
            for route, (passed, judged) in a.passes.routes.items()
        },
    }


def _cases(a: Assessment) -> list[JsonObject]:
    """JSON `cases`: each case's trials, pairs, flips and stable verdict."""
    return [
        {
            "case": c.case,
            "run": c.run,
            "route": c.route,
            "trials": c.trials,
            "errors": c.errors,
            "pairs": c.pairs,
            "flips": c.flips,
            "ambiguous_pairs": c.ambiguous_pairs,
            "verdict": c.verdict,
            "passed": c.passed,
            "judged": c.judged,
            **_judgement(c.pass_rate),
        }
        for c in a.cases
    ]


def render_json(assessment: Assessment) -> str:
    """The report as indented JSON text."""
    return json.dumps(report_document(assessment), indent=2) + "\n"
