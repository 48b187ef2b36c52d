"""The admission rule: findings in, status with every reason, a headline and next steps out."""

from __future__ import annotations

import math

from .assessment import Assessment, Findings, Isolation, Reason, RouteStability, Status
from .stats import ChangeRate, PassRate, Quantiles, Reliability, Stability, pairs_to_qualify

REJECTING = frozenset(
    {
        "shared_session",
        "integrity_conflict",
        "pooled_stochastic",
        "target_stochastic",
        "route_stochastic",
        "contract_missing_intended",
        "contract_missing_observed",
        "contract_unknown_decision",
        "contract_under_cased",
        "dominant_decision",
        "pass_rate_unreliable",
        "route_pass_rate_unreliable",
        "quality_failed",
        "invariant_blocked",
        "latency_exceeded",
        "tool_calls_exceeded",
        "relation_violated",
        "relations_vacuous",
    }
)
"""Reason codes that are evidence of a problem; any one rejects the run."""


def percent(value: float) -> str:
    """A rate as a short percentage: 0.05 -> `5%`, 0.04999 -> `5%`, 0.0964 -> `9.64%`."""
    return f"{value * 100:.3g}%"


def interval(change: ChangeRate) -> str:
    """A change rate in words: `8 of 13 pairs changed, CI [35.5%, 82.3%]`."""
    return (
        f"{change.flips} of {change.pairs} pairs changed, "
        f"CI [{percent(change.ci_low)}, {percent(change.ci_high)}]"
    )


def judge(findings: Findings) -> Assessment:
    """Apply the admission rule: rejected beats inconclusive beats qualified."""
    reasons = tuple(_reasons(findings))
    codes = {reason.code for reason in reasons}
    if codes & REJECTING:
        status = Status.REJECTED
    elif codes:
        status = Status.INCONCLUSIVE
    else:
        status = Status.QUALIFIED
    ordered = sorted(reasons, key=lambda reason: reason.code not in REJECTING)
    return Assessment(
        **vars(findings),
        status=status,
        reasons=tuple(ordered),
        headline=_headline(findings, status, ordered),
        next_steps=tuple(_next_steps(findings)),
    )


def _routes_named(routes: list[RouteStability]) -> str:
    return "; ".join(
        f"{route.route} ({interval(route.change)}, tolerance {percent(route.change.tolerance)})"
        for route in routes
    )


def _reasons(f: Findings):
    trials, pooled, coverage = f.trials, f.pooled, f.coverage
    if f.run.isolation is Isolation.SHARED_SESSION:
        yield Reason(
            "shared_session",
            "reruns shared one session, so they are not independent; such a run is never admitted",
        )
    if f.run.quality_failed:
        yield Reason(
            "quality_failed",
            f"{len(f.run.quality_failed)} cases missed their expected route or failed a tier on "
            "the first call, so the run stopped before paying for repeats: "
            + ", ".join(f.run.quality_failed[:5]),
        )
    if f.invariants.failed:
        yield Reason(
            "invariant_blocked",
            "blocking invariants failed: "
            + ", ".join(f"{name} in {count} trials" for name, count in f.invariants.failed.items()),
        )
    relations = f.run.relations
    if broken := [r for r in relations if r.status == "violated"]:
        yield Reason(
            "relation_violated",
            "decisions changed under relations that must not change them: "
            + "; ".join(f"{r.name} on {', '.join(r.violated)}" for r in broken),
        )
    if relations and all(r.status == "not_exercised" for r in relations):
        yield Reason(
            "relations_vacuous",
            "the relations requested changed no input, so they tested nothing: "
            + ", ".join(r.name for r in relations),
        )
    if trials.conflicts:
        yield Reason(
            "integrity_conflict",
            f"{trials.conflicts} trial identities (run, case, trial) received conflicting records",
        )
    if pooled.result is Stability.STOCHASTIC:
        yield Reason(
            "pooled_stochastic",
            f"the pooled change rate is above {percent(pooled.tolerance)}: {interval(pooled)}",
        )
    stochastic = [r for r in f.routes if r.change.result is Stability.STOCHASTIC]
    if targeted := [r for r in stochastic if r.targeted]:
        yield Reason("target_stochastic", "routes above their target: " + _routes_named(targeted))
    if untargeted := [r for r in stochastic if not r.targeted]:
        yield Reason("route_stochastic", "routes that flip on reruns: " + _routes_named(untargeted))
    if coverage.missing_intended:
        yield Reason(
            "contract_missing_intended",
            "no case is intended for required routes: "
            + _with_critical(coverage.missing_intended, coverage.critical_missing),
        )
    if unreached := _unreached(f):
        yield Reason(
            "contract_missing_observed",
            "no trial reached required routes: "
            + _with_critical(unreached, coverage.critical_missing),
        )
    if coverage.unknown:
        yield Reason(
            "contract_unknown_decision",
            "trials returned decisions outside the contract: " + ", ".join(coverage.unknown),
        )
    if coverage.under_cased:
        yield Reason(
            "contract_under_cased",
            "routes with fewer cases than the contract asks: "
            + ", ".join(
                f"{route} ({coverage.intended.get(route, 0)} of {coverage.minimum_cases[route]})"
                for route in coverage.under_cased
            ),
        )
    if f.dominance.collapsed:
        dominance = f.dominance
        yield Reason(
            "dominant_decision",
            f"{percent(dominance.share)} of {dominance.cases} cases first decided "
            f"{dominance.verdict}: the probes collapsed onto one decision",
        )
    yield from _threshold_reasons(
        "latency", f.latency, f.policy.max_p95_ms, "the p95 latency", "ms", "recorded a latency"
    )
    yield from _threshold_reasons(
        "tool_calls", f.tool_calls, f.policy.max_p95_tool_calls,
        "the p95 of tools called per trial", "tools", "decided a tool path",
    )  # fmt: skip
    rate = f.pass_rate
    if rate is not None and rate.result is Reliability.UNRELIABLE:
        yield Reason(
            "pass_rate_unreliable",
            f"the pass rate is below the required {percent(rate.required)}: {_passes(rate)}",
        )
    if low_routes := f.passes.unreliable_routes():
        yield Reason(
            "route_pass_rate_unreliable",
            "routes whose pass rate is below the required rate: "
            + "; ".join(
                f"{route} ({_passes(f.passes.route_rates[route])})" for route in low_routes
            ),
        )
    if pooled.result is Stability.UNDECIDED:
        yield Reason(
            "pooled_undecided",
            f"{interval(pooled)}: not enough to show the change rate is below "
            f"{percent(pooled.tolerance)}",
        )
    undecided = [r for r in f.routes if r.targeted and r.change.result is Stability.UNDECIDED]
    if undecided:
        yield Reason(
            "target_undecided", "routes not yet shown within target: " + _routes_named(undecided)
        )
    if rate is not None and rate.result is Reliability.UNDECIDED:
        yield Reason(
            "pass_rate_undecided",
            f"not yet shown above the required pass rate {percent(rate.required)}: {_passes(rate)}"
            if rate.judged
            else "a pass rate is required but no trial carries an evaluator's verdict",
        )
    if trials.errors or trials.missing or _relation_errors(f):
        yield Reason("incomplete", _incomplete(f))
    if f.run.in_progress:
        yield Reason(
            "in_progress",
            "the run is still collecting trials: its plan is not complete and its grace period "
            "has not ended",
        )
    if f.cases_without_repeats:
        yield Reason(
            "no_repeats",
            f"{f.cases_without_repeats} cases have fewer than 2 trials, so they form no rerun pair",
        )


def _threshold_reasons(
    measure: str, stats: Quantiles | None, threshold: float | None, what: str, unit: str, seen: str
):
    """`{measure}_exceeded` when the p95 interval is wholly above the threshold,
    `{measure}_undecided` when it straddles it or no trial carried the measure."""
    if stats is not None and stats.result == "exceeded":
        yield Reason(
            f"{measure}_exceeded", f"{what} is above {stats.max_p95:g} {unit}: {_p95(stats, unit)}"
        )
    elif stats is not None and stats.result == "undecided":
        yield Reason(
            f"{measure}_undecided",
            f"{what} is not yet shown under {stats.max_p95:g} {unit}: {_p95(stats, unit)}",
        )
    elif threshold is not None and stats is None:
        yield Reason(f"{measure}_undecided", f"a threshold is set on {what} but no trial {seen}")


def _p95(stats: Quantiles, unit: str) -> str:
    estimate, low, high = stats.p95
    return f"p95 {estimate:g} {unit} of {stats.trials} trials, CI [{low:g}, {high:g}] {unit}"


def _passes(rate: PassRate) -> str:
    return (
        f"{rate.passed} of {rate.judged} judged trials passed, "
        f"CI [{percent(rate.ci_low)}, {percent(rate.ci_high)}]"
    )


def _with_critical(routes: tuple[str, ...], critical: tuple[str, ...]) -> str:
    return ", ".join(f"{route} (critical)" if route in critical else route for route in routes)


def _unreached(f: Findings) -> tuple[str, ...]:
    """Required routes no trial reached, as evidence of a problem: the cases meant for them
    returned answers (or there are none). A route whose cases' trials all errored or never
    arrived (a judge that was down, say) is not shown unreached: the run is incomplete instead."""
    answered = {case.route for case in f.cases if case.trials > case.errors}
    return tuple(
        route
        for route in f.coverage.missing_observed
        if route in answered or route in f.coverage.missing_intended
    )


def _relation_errors(f: Findings) -> list[str]:
    """`relation on routes` for each relation with a check that errored (not a violation)."""
    return [f"{r.name} on {', '.join(r.errored)}" for r in f.run.relations if r.errored]


def _incomplete(f: Findings) -> str:
    parts = []
    if f.trials.errors:
        kinds = ", ".join(f"{kind} x{n}" for kind, n in f.trials.error_types.items())
        parts.append(f"{f.trials.errors} trials errored ({kinds})")
    if f.trials.missing:
        parts.append(f"{f.trials.missing} of {f.trials.expected} planned trials were not received")
    if relation_errors := _relation_errors(f):
        parts.append("relation checks errored: " + "; ".join(relation_errors))
    return " and ".join(parts)


def _headline(f: Findings, status: Status, reasons: list[Reason]) -> str:
    if status is Status.QUALIFIED:
        pooled = f.pooled
        coverage = (
            f"all {len(f.coverage.required)} required routes were reached"
            if f.coverage.declared
            else "no contract was declared, so route coverage was not judged"
        )
        return (
            f"Qualified: {pooled.pairs} rerun pairs, {pooled.flips} changed; the change rate is "
            f"below {percent(pooled.tolerance)} (95% upper bound {percent(pooled.ci_high)}) and "
            f"{coverage}."
        )
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return f"{status.value.capitalize()}: {reasons[0].message}{more}."


def _more_pairs(change: ChangeRate, confidence: float) -> int | None:
    total = pairs_to_qualify(change.flips, change.pairs, change.tolerance, confidence)
    return None if total is None else total - change.pairs


def _next_steps(f: Findings):
    trials, coverage, pooled = f.trials, f.coverage, f.pooled
    if f.run.isolation is Isolation.SHARED_SESSION:
        yield "Give every trial a fresh session (or a fresh agent instance) and declare that isolation."
    if f.invariants.failed:
        yield "Fix the outputs that break a blocking invariant; every valid output must hold it."
    if f.invariants.warned:
        yield "Warning invariants failed (reported, not gating): " + ", ".join(
            f"{name} in {count} trials" for name, count in f.invariants.warned.items()
        )
    if any(r.status == "violated" for r in f.run.relations):
        yield "Make the decision depend on what the input means, not on its spelling or layout."
    if f.run.relations and all(r.status == "not_exercised" for r in f.run.relations):
        yield "Choose relations that change some inputs, or add inputs they apply to."
    if f.run.quality_failed:
        yield (
            "Fix the decisions of the cases that missed their route first: a reliably wrong route "
            "is still wrong, and repeating it proves nothing."
        )
    if trials.conflicts:
        yield (
            f"Check the harness for reused run ids or re-executed retries: {trials.conflicts} "
            "trial identities got two different answers."
        )
    for route in f.routes:
        if route.change.result is Stability.STOCHASTIC:
            flips = ", ".join(
                f"{a} <-> {b} x{n}" for (a, b), n in ((p.routes, p.count) for p in route.flip_pairs)
            )
            yield (
                f"Make route {route.route} repeatable before freezing a baseline: it flipped {flips}."
                " Look for sampling temperature, unordered tool results or time-dependent prompts."
            )
    if pooled.result is Stability.STOCHASTIC and not any(
        r.change.result is Stability.STOCHASTIC for r in f.routes
    ):
        yield "Find the cases that change between reruns (see flip pairs) and make their decisions repeatable."
    for route in coverage.missing_intended:
        yield f"Add at least one case whose expected route is {route}."
    for route in _unreached(f):
        if route not in coverage.missing_intended:
            yield (
                f"No trial returned {route} although {coverage.intended.get(route, 0)} cases intend it: "
                "check those cases and how the agent handles them."
            )
    for decision in coverage.unknown:
        yield (
            f"The agent returned {decision}, which the contract does not allow: fix the agent, "
            "or add it to the contract's allowed decisions (or allowed_no_decisions)."
        )
    for route in coverage.under_cased:
        have, need = coverage.intended.get(route, 0), coverage.minimum_cases[route]
        yield f"Add {need - have} more cases for route {route}: it has {have}, the contract asks for {need}."
    if f.dominance.collapsed:
        yield (
            f"Most cases first decided {f.dominance.verdict}: add probes meant to reach the other "
            "routes, so the run says something about them."
        )
    if pooled.result is Stability.UNDECIDED:
        yield _pairs_step("the pooled change rate", pooled, len(f.cases), f.policy.confidence)
    for route in f.routes:
        if route.targeted and route.change.result is Stability.UNDECIDED:
            yield _pairs_step(
                f"route {route.route}", route.change, route.cases, f.policy.confidence
            )
    rate = f.pass_rate
    if (rate is not None and rate.result is Reliability.UNRELIABLE) or f.passes.unreliable_routes():
        failing = [
            c.case for c in f.cases if c.pass_rate and c.pass_rate.result is Reliability.UNRELIABLE
        ]
        yield (
            "Fix the failing cases before freezing a baseline: the evaluator fails too many trials"
            + (f" (shown below the required rate: {', '.join(failing[:5])})." if failing else ".")
        )
    if rate is not None and rate.result is Reliability.UNDECIDED and rate.judged:
        total = pairs_to_qualify(
            rate.judged - rate.passed, rate.judged, 1 - rate.required, f.policy.confidence
        )
        if total is not None:
            yield (
                f"Collect {total - rate.judged} more judged trials: if they all pass, the pass rate "
                f"is shown above {percent(rate.required)}."
            )
    if f.run.in_progress:
        yield "Wait for the run to finish (`verdictgate status --wait SECONDS`)."
    elif trials.errors or trials.missing or _relation_errors(f):
        yield f"Fix what failed and rerun the missing trials: {_incomplete(f)}."
    if f.cases_without_repeats:
        yield (
            "Repeat every case at least twice: `verdictgate run --repeats K`, or your harness's "
            "repeat option (promptfoo `repeat`, DeepEval `-r`)."
        )
    if f.run.fingerprints == "unkeyed":
        yield (
            "Set VERDICTGATE_FINGERPRINT_KEY: case ids are unkeyed SHA-256 fingerprints, and a short "
            "input can be guessed from one."
        )
    if f.run.isolation is Isolation.UNKNOWN:
        yield "Declare how reruns were isolated (fresh-session or fresh-instance); independence is assumed, not shown."


def _pairs_step(subject: str, change: ChangeRate, cases: int, confidence: float) -> str:
    more = _more_pairs(change, confidence)
    if more is None:
        return f"{subject.capitalize()} cannot be shown below {percent(change.tolerance)} by more reruns: reduce its changes."
    per_case = 2 * math.ceil(more / max(cases, 1))
    caveat = "" if change.flips == 0 else "; every further change raises that number"
    return (
        f"Collect {more} more rerun pairs for {subject} ({2 * more} calls, about {per_case} more "
        f"trials per case): if they all agree, it is shown below {percent(change.tolerance)}{caveat}."
    )
