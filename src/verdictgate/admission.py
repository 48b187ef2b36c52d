"""The admission rule as one table: each reason code with its effect on the status, the report
check it belongs to, its message and its next steps. Status, reasons, headline, next steps and
the JUnit/Markdown checks are all derived from `RULES`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum

from .assessment import (
    Assessment,
    Findings,
    Isolation,
    Reason,
    RelationStatus,
    RouteStability,
    Status,
)
from .policy import Claim, PassWhen
from .shown import SHOWN_CHARS, shown
from .stats import (
    ChangeRate,
    Method,
    PassRate,
    Quantiles,
    Reliability,
    Stability,
    Threshold,
    judged_once,
    pairs_to_qualify,
    side_error,
)
from .trial_model import NO_TOOL_SELECTED, decision_text


class ReasonCode(str, Enum):
    """Every reason a run is not qualified (REPORT.md: codes may be added, never renamed)."""

    SHARED_SESSION = "shared_session"
    QUALITY_FAILED = "quality_failed"
    INVARIANT_BLOCKED = "invariant_blocked"
    RELATION_VIOLATED = "relation_violated"
    RELATIONS_VACUOUS = "relations_vacuous"
    INTEGRITY_CONFLICT = "integrity_conflict"
    DECLARATION_CONFLICT = "declaration_conflict"
    POOLED_STOCHASTIC = "pooled_stochastic"
    POPULATION_STOCHASTIC = "population_stochastic"
    TARGET_STOCHASTIC = "target_stochastic"
    ROUTE_STOCHASTIC = "route_stochastic"
    CONTRACT_MISSING_INTENDED = "contract_missing_intended"
    CONTRACT_MISSING_OBSERVED = "contract_missing_observed"
    CONTRACT_UNKNOWN_DECISION = "contract_unknown_decision"
    CONTRACT_UNDER_CASED = "contract_under_cased"
    DOMINANT_DECISION = "dominant_decision"
    LATENCY_EXCEEDED = "latency_exceeded"
    TOOL_CALLS_EXCEEDED = "tool_calls_exceeded"
    PASS_RATE_UNRELIABLE = "pass_rate_unreliable"
    ROUTE_PASS_RATE_UNRELIABLE = "route_pass_rate_unreliable"
    LATENCY_UNDECIDED = "latency_undecided"
    TOOL_CALLS_UNDECIDED = "tool_calls_undecided"
    AMBIGUOUS_ORDER = "ambiguous_order"
    POOLED_UNDECIDED = "pooled_undecided"
    POPULATION_UNDECIDED = "population_undecided"
    MIXED_CASE_NAMES = "mixed_case_names"
    TARGET_UNDECIDED = "target_undecided"
    PASS_RATE_UNDECIDED = "pass_rate_undecided"
    INCOMPLETE = "incomplete"
    CURTAILED = "curtailed"
    IN_PROGRESS = "in_progress"
    NO_REPEATS = "no_repeats"
    NO_TOOL_SPANS = "no_tool_spans"


@dataclass(frozen=True)
class Rule:
    """One row of the admission rule."""

    code: ReasonCode
    effect: Status
    """REJECTED (evidence of a problem) or INCONCLUSIVE (not enough evidence)."""
    check: str
    """The JUnit/Markdown check it belongs to (`stability.route` expands to one per route)."""
    message: Callable[[Findings], str | None]
    """The reason's plain-language message when it applies to the findings, else None."""
    next_steps: Callable[[Findings], Iterable[str]]
    """What to do about it."""


CHECKS: dict[str, str] = {
    "quality": "no quality gate failed",
    "invariants": "no blocking invariant failed",
    "relations": "no metamorphic relation requested, or every one held",
    "isolation": "reruns were not declared to share a session",
    "integrity": "no trial identity received conflicting records",
    "completeness": "every planned trial was received without error",
    "repeats": "every case has at least two trials",
    "stability.pooled": "the pooled change rate is shown below the tolerance",
    "stability.population": "the case-level change rate is shown below the tolerance",
    "stability.route": "every route is judged on its own interval",
    "order": "no test or required route was left undecided by steps whose order was not recorded",
    "contract": "every required route was intended and reached; nothing outside the contract",
    "dominance": "the probes did not collapse onto one decision",
    "pass_rate": "no pass rate required, or it is shown above the rate required",
    "latency": "no latency threshold set, or the p95 is shown under it",
    "tool_calls": "no tool-call threshold set, or the p95 is shown under it",
}
"""Report check -> what it says when none of its reasons applies."""


def percent(value: float) -> str:
    """A rate as a short percentage: 0.05 -> `5%`, 0.04999 -> `5%`, 0.0964 -> `9.64%`."""
    return f"{value * 100:.3g}%"


def interval(change: ChangeRate) -> str:
    """A change rate in words: `8 of 13 pairs changed, CI [35.5%, 82.3%]`."""
    return (
        f"{change.flips} of {change.pairs} pairs changed, "
        f"CI [{percent(change.ci_low)}, {percent(change.ci_high)}]"
    )


def ci_label(confidence: float) -> str:
    """How an interval at `confidence` is named: `95%`."""
    return f"{confidence * 100:.4g}%"


def level_text(level: float | None) -> str:
    """The level a test's stochastic side was held to, or `-` when the step-down never reached
    it (or it was not judged with the others)."""
    return "-" if level is None else percent(level)


def family_caption(f: Findings) -> str | None:
    """What the "stochastic at" column means, when more than one test was judged together."""
    if f.family_tests < 2:
        return None
    caption = (
        f"stochastic results held to {percent(side_error(f.policy.confidence))} across "
        f"{f.family_tests} tests together (Holm's step-down; stochastic at: each test's level, "
        "- where the step-down stopped before it)"
    )
    if f.policy.method is Method.WILSON:
        caption += "; Wilson's rule does not hold a test to its level, so neither is the run's"
    return caption


LISTED = 10
"""Most names a message lists; the rest are counted ("and 12 more"), so a run with thousands of
labels still gets short reasons (the report's tables hold the detail)."""


def listing(items: Iterable[str], separator: str = ", ") -> str:
    """Names joined, at most LISTED of them, then how many more. Callers shorten the labels in
    an item; an item still over twice SHOWN_CHARS is shortened whole."""
    items = list(items)
    joined = separator.join(shown(item, 2 * SHOWN_CHARS) for item in items[:LISTED])
    return joined + (f" and {len(items) - LISTED} more" if len(items) > LISTED else "")


def _routes_named(routes: list[RouteStability]) -> str:
    return listing(
        (
            f"{shown(route.route)} ({interval(route.change)}, "
            f"tolerance {percent(route.change.tolerance)})"
            for route in routes
        ),
        "; ",
    )


def _with_critical(routes: tuple[str, ...], critical: tuple[str, ...]) -> str:
    return listing(f"{shown(route)} (critical)" if route in critical else route for route in routes)


def _passes(rate: PassRate) -> str:
    return (
        f"{rate.passed} of {rate.judged} judged trials passed, "
        f"CI [{percent(rate.ci_low)}, {percent(rate.ci_high)}]"
    )


def _nothing_judged(pass_when: PassWhen) -> str:
    """Why no trial was judged for the pass rate."""
    if pass_when is PassWhen.EXPECTED:
        return "no decided trial's case names an expected decision"
    return "no trial carries an evaluator's verdict"


def _p95(stats: Quantiles, unit: str) -> str:
    estimate, low, high = stats.p95
    return f"p95 {estimate:g} {unit} of {stats.trials} trials, CI [{low:g}, {high:g}] {unit}"


def unreached(f: Findings) -> tuple[str, ...]:
    """Required routes no trial reached, as evidence of a problem: the cases meant for them
    returned answers (or there are none). A route whose cases' trials all errored or never
    arrived (a judge that was down, say) is not shown unreached: the run is incomplete instead."""
    answered = {case.route for case in f.cases if case.trials > case.errors}
    return tuple(
        route
        for route in f.coverage.missing_observed
        if route in answered or route in f.coverage.missing_intended
    )


def relation_errors(f: Findings) -> list[str]:
    """`relation on routes` for each relation with a check that errored (not a violation)."""
    return [f"{r.name} on {listing(r.errored)}" for r in f.relations if r.errored]


def _claims(f: Findings, claim: Claim) -> bool:
    return f.policy.claim is claim


def population_summary(f: Findings) -> str:
    """The case-level verdict in words: `6 cases with rerun pairs, case-level e-values 0.0733
    for below and 1.68 for above (40 decides)`."""
    p = f.population
    return (
        f"{p.cases} cases with rerun pairs, case-level e-values {p.e_det:.3g} for below and "
        f"{p.e_stoch:.3g} for above ({_decisive(f)} decides)"
    )


def _decisive(f: Findings) -> str:
    """The e-value that decides the case-level test: 1 / its level among the run's tests (40 at
    95% when judged alone)."""
    return f"{1 / (f.population.level or side_error(f.policy.confidence)):.4g}"


def _schemes_named(f: Findings) -> str:
    """Each naming scheme with its cases: `40 by explicit case ids, 40 by unkeyed fingerprints`."""
    return listing(f"{n} by {scheme.describe()}" for scheme, n in f.case_names.schemes)


def _more_cases(f: Findings) -> Iterator[str]:
    p = f.population
    yield (
        f"Add cases: a claim about new inputs counts cases, not pairs; {p.cases_needed} cases "
        f"that never change certify it at {percent(f.policy.tolerance)} (this run has {p.cases}),"
        " and each case that changes raises that number. Or claim only the tested cases "
        "(--claim tested)."
    )


def _stochastic(f: Findings, targeted: bool) -> list[RouteStability]:
    return [
        r for r in f.routes if r.change.result is Stability.STOCHASTIC and r.targeted == targeted
    ]


def _flip_step(route: RouteStability) -> str:
    flips = listing(
        f"{shown(a)} <-> {shown(b)} x{n}"
        for (a, b), n in ((p.routes, p.count) for p in route.flip_pairs)
    )
    return (
        f"Make route {shown(route.route)} repeatable before freezing a baseline: it flipped {flips}."
        " Look for sampling temperature, unordered tool results or time-dependent prompts."
    )


def _pairs_step(
    subject: str, change: ChangeRate, cases: int, confidence: float, ambiguous: int = 0
) -> str:
    """How many more pairs, all agreeing, would show `change` below its tolerance: with
    `ambiguous` pairs that could not be ordered, `change` is the worst case, which counts them
    as changes (`WorstCase`)."""
    total = pairs_to_qualify(
        change.flips, change.pairs, change.tolerance, confidence, change.method
    )
    if total is None:
        return f"{subject.capitalize()} cannot be shown below {percent(change.tolerance)} by more reruns: reduce its changes."
    more = total - change.pairs
    per_case = 2 * math.ceil(more / max(cases, 1))
    caveat = "" if change.flips == 0 else "; every further change raises that number"
    if ambiguous:
        caveat += (
            "; a pair equal only up to the order of tied steps counts as a change here "
            f"({ambiguous} so far)"
        )
    return (
        f"Collect {more} more rerun pairs for {subject} ({2 * more} calls, about {per_case} more "
        f"trials per case): if they all agree, it is shown below {percent(change.tolerance)}{caveat}."
    )


def _incomplete(f: Findings) -> str | None:
    parts = []
    if f.trials.errors:
        ranked = sorted(f.trials.error_types.items(), key=lambda item: -item[1])
        kinds = listing(f"{shown(kind)} x{n}" for kind, n in ranked)
        parts.append(f"{f.trials.errors} trials errored ({kinds})")
    if f.trials.missing:
        parts.append(f"{f.trials.missing} of {f.trials.expected} planned trials were not received")
    if errored := relation_errors(f):
        parts.append("relation checks errored: " + listing(errored, "; "))
    return " and ".join(parts) or None


def _threshold(
    measure: str, unit: str, seen: str, result: Threshold
) -> Callable[[Findings], str | None]:
    """The message of `{measure}_exceeded` (the p95 interval wholly above its threshold) or
    `{measure}_undecided` (straddling it, or a threshold that no trial gave a value for)."""

    def message(f: Findings) -> str | None:
        stats = f.latency if measure == "latency" else f.tool_calls
        threshold = f.policy.max_p95_ms if measure == "latency" else f.policy.max_p95_tool_calls
        what = "the p95 latency" if measure == "latency" else "the p95 of tools called per trial"
        if stats is not None and stats.result is result:
            above = "is above" if result is Threshold.EXCEEDED else "is not yet shown under"
            return f"{what} {above} {stats.max_p95:g} {unit}: {_p95(stats, unit)}"
        if result is Threshold.UNDECIDED and threshold is not None and stats is None:
            return f"a threshold is set on {what} but no trial {seen}"
        return None

    return message


def _threshold_step(measure: str) -> Callable[[Findings], Iterable[str]]:
    def steps(f: Findings) -> Iterator[str]:
        stats = f.latency if measure == "latency" else f.tool_calls
        if stats is None and measure == "latency":
            yield "Record each trial's latency (decision spans are timed; trials files carry latency_ms)"
        elif stats is None:
            yield "A tool-call threshold needs decisions that are tool paths: record the tools called"
        elif stats.result is Threshold.EXCEEDED:
            yield f"Bring the p95 {measure.replace('_', ' ')} under the threshold before freezing a baseline."
        else:
            yield f"Collect more timed trials: the p95 {measure.replace('_', ' ')} is not yet shown under its threshold."

    return steps


def _one(step: str) -> Callable[[Findings], Iterable[str]]:
    return lambda f: (step,)


def _fix_failing_cases(f: Findings) -> Iterator[str]:
    failing = [
        c.case for c in f.cases if c.pass_rate and c.pass_rate.result is Reliability.UNRELIABLE
    ]
    failed_by = (
        "too many trials decide other than their case's expected decision"
        if f.policy.pass_when is PassWhen.EXPECTED
        else "the evaluator fails too many trials"
    )
    yield (
        f"Fix the failing cases before freezing a baseline: {failed_by}"
        + (f" (shown below the required rate: {', '.join(failing[:5])})." if failing else ".")
    )


def _more_judged(f: Findings) -> Iterator[str]:
    rate = f.pass_rate
    if rate is None or not rate.judged:
        return
    total = pairs_to_qualify(
        rate.judged - rate.passed,
        rate.judged,
        1 - rate.required,
        f.policy.confidence,
        judged_once(f.policy.method),
    )
    if total is not None:
        yield (
            f"Collect {total - rate.judged} more judged trials: if they all pass, the pass rate "
            f"is shown above {percent(rate.required)}."
        )


def _curtailed_steps(f: Findings) -> Iterator[str]:
    yield (
        "Make the cases that changed repeatable (see flip pairs), or plan more pairs: even had "
        "every call left agreed, this plan could not have qualified the run."
    )
    if not any(
        rule.message(f)
        for rule in RULES
        if rule.check.startswith("stability.") and rule.effect is Status.REJECTED
    ):
        yield (
            "Curtailed at its first flips, the run had too few to show a change rate above its "
            "tolerance: for that verdict, run it with --sequential, which stops as soon as one "
            "is shown."
        )


def _unreached_steps(f: Findings) -> Iterator[str]:
    """What to do about each intended route no trial reached; where decisions were whole JSON
    outputs, one step: the routes may be inside them."""
    routes = [route for route in unreached(f) if route not in f.coverage.missing_intended]
    if routes and _documents(f):
        yield (
            f"No trial returned {listing(shown(route) for route in routes)} as read, but the "
            "decisions were whole JSON outputs: with the route read from inside them "
            "(--decision-path), see which routes are reached."
        )
        return
    for route in routes:
        yield (
            f"No trial returned {shown(route)} although {f.coverage.intended.get(route, 0)} cases intend it: "
            "check those cases and how the agent handles them."
        )


def _unknown_steps(f: Findings) -> list[str]:
    """What to do about each decision outside the contract; decisions that are whole JSON
    outputs are no decision to fix or allow, and get one step together (and a run whose spans
    show no tool at all is told how to record them instead: `no_tool_spans`)."""
    documents = _documents(f)
    steps = [
        f"The agent returned {shown(decision)}, which the contract does not allow: fix the agent, "
        "or add it to the contract's allowed decisions (or allowed_no_decisions)."
        for decision in f.coverage.unknown
        if decision not in documents and not (decision == NO_TOOL_TEXT and _no_tool_spans(f))
    ]
    if documents:
        steps.append(
            f"Leave the agent and the contract as they are for the {len(documents)} JSON "
            f"{'output' if len(documents) == 1 else 'outputs'} outside the contract: each is a "
            "whole output read as its decision, and the contract judges the route read from "
            "inside it (--decision-path FIELD, decision_path= in Python)."
        )
    return steps


def _documents(f: Findings) -> list[str]:
    """The decisions outside the contract that are JSON objects or arrays: whole outputs."""
    return [d for d in f.coverage.unknown if _json_document(d)]


NO_TOOL_TEXT = decision_text(NO_TOOL_SELECTED)


def _no_tool_spans(f: Findings) -> bool:
    """Whether every decision of the run is `no_tool_selected`, which the contract does not
    allow: most often the framework's spans record no tool runs (an instrumentation of the model
    client records only `chat` spans, the app running the tools), not an agent that never
    chose one."""
    return f.coverage.observed == (NO_TOOL_TEXT,) and NO_TOOL_TEXT in f.coverage.unknown


NO_TOOL_SPANS_STEP = (
    "No trial's spans show a tool call: if the agent does call tools, record each run of one as "
    "a span the `tools` rule reads, an `execute_tool` span naming it in `gen_ai.tool.name` "
    "(OpenTelemetry's GenAI utility: `get_telemetry_handler().tool(name)` around the tool's code; "
    "OpenInference: a TOOL span with `tool.name`). An instrumented model client alone (such as "
    "opentelemetry-instrumentation-openai-v2) records `chat` spans only. Or decide with a rule "
    "its spans can show (`--decision agents`, `nodes`, or an attribute the agent sets to its route)."
)


def _decision_path_step(f: Findings) -> str | None:
    """Decisions that are JSON objects or arrays are most often whole outputs whose route is
    a field inside: the step that says so leads, since every contract reason follows from it."""
    documents = _documents(f)
    if not documents:
        return None
    return (
        f"{len(documents)} {'decision is a JSON document' if len(documents) == 1 else 'decisions are JSON documents'} "
        f"(such as {shown(documents[0])}): the "
        "route is likely a field inside them. Read it with --decision-path FIELD "
        "(decision_path= when importing in Python)."
    )


def _json_document(text: str) -> bool:
    """Whether `text` is a JSON object or array."""
    if text[:1] not in ("{", "[") or len(text) > 4096:
        return False
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def _left_undecided(f: Findings) -> list[str]:
    """The gating stability tests that are undecided while pairs of theirs were left out for
    ties (`ties`): had those pairs been ordered, they might have been decided."""
    if not f.ambiguous_pairs:
        return []
    tests = []
    if _claims(f, Claim.TESTED) and f.pooled.result is Stability.UNDECIDED:
        tests.append("the pooled change rate")
    if _claims(f, Claim.POPULATION) and f.population.result is Stability.UNDECIDED:
        tests.append("the case-level change rate")
    tests += [
        f"route {shown(r.route)}"
        for r in f.routes
        if r.targeted and r.ambiguous_pairs and r.change.result is Stability.UNDECIDED
    ]
    return tests


def _shown_only_if_agreed(f: Findings) -> Iterator[tuple[str, str | None]]:
    """The gating stability tests that the countable pairs pass and the worst case does not
    (`WorstCase`: every ambiguous pair counted as a flip): what the message says of each, and
    the step sizing the pairs that would show it even so (None for the case-level test, which
    counts cases, and for an untargeted route, which need only not be shown above)."""
    worst = f.worst_case
    if worst is None:
        return
    they = "it" if f.ambiguous_pairs == 1 else "they"
    if (
        _claims(f, Claim.TESTED)
        and f.pooled.result is Stability.DETERMINISTIC
        and worst.pooled.result is not Stability.DETERMINISTIC
    ):
        yield (
            f"the pooled change rate is shown below {percent(f.pooled.tolerance)} only if {they} "
            f"agreed (counted as changes: {interval(worst.pooled)})",
            _pairs_step(
                "the pooled change rate",
                worst.pooled,
                len(f.cases),
                f.policy.confidence,
                f.ambiguous_pairs,
            ),
        )
    if (
        _claims(f, Claim.POPULATION)
        and f.population.result is Stability.DETERMINISTIC
        and worst.population.result is not Stability.DETERMINISTIC
    ):
        yield (
            f"new inputs are shown to change below {percent(f.policy.tolerance)} only if {they} "
            f"agreed (counted as changes: case-level e-value {worst.population.e_det:.3g} for "
            f"below, {_decisive(f)} decides)",
            None,
        )
    for r in f.routes:
        if (w := r.worst_case) is None:
            continue
        if r.targeted:
            if (
                r.change.result is Stability.DETERMINISTIC
                and w.result is not Stability.DETERMINISTIC
            ):
                yield (
                    f"route {shown(r.route)} is shown below {percent(w.tolerance)} only if "
                    f"{they} agreed (counted as changes: {interval(w)})",
                    _pairs_step(
                        f"route {shown(r.route)}",
                        w,
                        r.cases,
                        f.policy.confidence,
                        r.ambiguous_pairs,
                    ),
                )
        elif r.change.result is not Stability.STOCHASTIC and w.result is Stability.STOCHASTIC:
            yield (
                f"route {shown(r.route)} is not shown above {percent(w.tolerance)} only if "
                f"{they} agreed (counted as changes: {interval(w)})",
                None,
            )


def _ambiguous_order(f: Findings) -> str | None:
    """The message of `ambiguous_order`: pairs that could not be ordered left a test
    undecided, or shown only if they agreed, or tied paths left required routes neither
    reached nor missing."""
    parts = []
    n = f.ambiguous_pairs
    said = [clause for clause, _ in _shown_only_if_agreed(f)]
    if tests := _left_undecided(f):
        said.insert(
            0,
            f"without {'it' if n == 1 else 'them'} {listing(tests)} "
            f"{'is' if len(tests) == 1 else 'are'} not decided",
        )
    if said:
        parts.append(
            f"{n} rerun {'pair' if n == 1 else 'pairs'} could not be ordered (equal only up to "
            "the order of steps whose spans started in the same instant, so neither agreements "
            f"nor flips), and {listing(said, '; ')}"
        )
    if routes := f.coverage.unordered:
        parts.append(
            "required routes reached only by tied paths that may as well be another allowed "
            "order: " + listing(routes)
        )
    return "; ".join(parts) or None


def _ambiguous_order_steps(f: Findings) -> Iterator[str]:
    """How to record the order of the steps that tied, then the pairs that would show each
    test that is shown only if the pairs that could not be ordered agreed."""
    yield from _order_steps(f)
    yield from (step for _, step in _shown_only_if_agreed(f) if step)


def _order_steps(f: Findings) -> Iterator[str]:
    """How to record the order of steps that tied, when any did."""
    tied, pairs = f.trials.ambiguous_order, f.ambiguous_pairs
    if not (tied or pairs):
        return
    left_out = (
        f", and the {pairs} rerun {'pair' if pairs == 1 else 'pairs'} equal only up to that "
        f"order {'was' if pairs == 1 else 'were'} left out of the change rates"
        if pairs
        else ""
    )
    yield (
        f"{tied} {'trial' if tied == 1 else 'trials'} had tool paths with steps whose spans "
        "started in the same instant (timestamps in whole milliseconds: the OpenTelemetry JS "
        "SDK's performance.timeOrigin-based clock has that resolution on some runtimes), so "
        f"their order there is not known{left_out}. To judge it, record the tool spans' start "
        "times finer than a millisecond (nanoseconds), end one tool span before the next "
        "starts, or record the path on the decision span itself (`verdictgate.tools`, in the "
        "order the agent called them)."
    )


def _uncounted(f: Findings) -> str:
    """What a qualified headline adds about pairs that were not counted for ties."""
    n = f.ambiguous_pairs
    if not n:
        return ""
    return (
        f" ({n} rerun {'pair' if n == 1 else 'pairs'} equal only up to the order of tied steps "
        f"{'was' if n == 1 else 'were'} not counted; counted as changes, the run would still be "
        "qualified)"
    )


RULES: tuple[Rule, ...] = (
    Rule(
        ReasonCode.SHARED_SESSION,
        Status.REJECTED,
        "isolation",
        lambda f: (
            "reruns shared one session, so they are not independent; such a run is never admitted"
            if f.run.isolation is Isolation.SHARED_SESSION
            else None
        ),
        _one(
            "Give every trial a fresh session (or a fresh agent instance) and declare that isolation."
        ),
    ),
    Rule(
        ReasonCode.QUALITY_FAILED,
        Status.REJECTED,
        "quality",
        lambda f: (
            f"{len(f.quality_failed)} cases missed their expected route or failed a tier on "
            "the first call, so the run stopped before paying for repeats: "
            + listing(f.quality_failed[:5])
            if f.quality_failed
            else None
        ),
        _one(
            "Fix the decisions of the cases that missed their route first: a reliably wrong route "
            "is still wrong, and repeating it proves nothing."
        ),
    ),
    Rule(
        ReasonCode.INVARIANT_BLOCKED,
        Status.REJECTED,
        "invariants",
        lambda f: (
            "blocking invariants failed: "
            + listing(f"{name} in {count} trials" for name, count in f.invariants.failed.items())
            if f.invariants.failed
            else None
        ),
        _one("Fix the outputs that break a blocking invariant; every valid output must hold it."),
    ),
    Rule(
        ReasonCode.RELATION_VIOLATED,
        Status.REJECTED,
        "relations",
        lambda f: (
            "decisions changed under relations that must not change them: "
            + listing(
                (
                    f"{r.name} on {listing(r.violated)}"
                    for r in f.relations
                    if r.status is RelationStatus.VIOLATED
                ),
                "; ",
            )
            if any(r.status is RelationStatus.VIOLATED for r in f.relations)
            else None
        ),
        _one("Make the decision depend on what the input means, not on its spelling or layout."),
    ),
    Rule(
        ReasonCode.RELATIONS_VACUOUS,
        Status.REJECTED,
        "relations",
        lambda f: (
            "the relations requested changed no input, so they tested nothing: "
            + listing(r.name for r in f.relations)
            if f.relations and all(r.status is RelationStatus.NOT_EXERCISED for r in f.relations)
            else None
        ),
        _one("Choose relations that change some inputs, or add inputs they apply to."),
    ),
    Rule(
        ReasonCode.INTEGRITY_CONFLICT,
        Status.REJECTED,
        "integrity",
        lambda f: (
            f"{f.trials.conflicts} trial identities (run, case, trial) received conflicting records"
            if f.trials.conflicts
            else None
        ),
        lambda f: (
            f"Check the harness for reused run ids or re-executed retries: {f.trials.conflicts} "
            "trial identities got two different answers.",
        ),
    ),
    Rule(
        ReasonCode.DECLARATION_CONFLICT,
        Status.REJECTED,
        "integrity",
        lambda f: (
            "a second run span declared this run differently (contract, policy or plan); "
            "the first declaration was kept"
            if f.declaration_conflict
            else None
        ),
        _one("Give every run its own run id: two senders declared the same run differently."),
    ),
    Rule(
        ReasonCode.POOLED_STOCHASTIC,
        Status.REJECTED,
        "stability.pooled",
        lambda f: (
            f"the pooled change rate is above {percent(f.pooled.tolerance)}: {interval(f.pooled)}"
            if _claims(f, Claim.TESTED) and f.pooled.result is Stability.STOCHASTIC
            else None
        ),
        lambda f: (
            ()
            if any(r.change.result is Stability.STOCHASTIC for r in f.routes)
            else (
                "Find the cases that change between reruns (see flip pairs) and make their decisions repeatable.",
            )
        ),
    ),
    Rule(
        ReasonCode.POPULATION_STOCHASTIC,
        Status.REJECTED,
        "stability.population",
        lambda f: (
            f"new inputs are shown to change above {percent(f.policy.tolerance)}: "
            f"{population_summary(f)}"
            if _claims(f, Claim.POPULATION) and f.population.result is Stability.STOCHASTIC
            else None
        ),
        _one(
            "Find the cases that change between reruns (see flip pairs) and make their decisions "
            "repeatable: with the case as the unit, a few unstable cases weigh heavily."
        ),
    ),
    Rule(
        ReasonCode.TARGET_STOCHASTIC,
        Status.REJECTED,
        "stability.route",
        lambda f: (
            "routes above their target: " + _routes_named(routes)
            if (routes := _stochastic(f, targeted=True))
            else None
        ),
        lambda f: [_flip_step(route) for route in _stochastic(f, targeted=True)],
    ),
    Rule(
        ReasonCode.ROUTE_STOCHASTIC,
        Status.REJECTED,
        "stability.route",
        lambda f: (
            "routes that flip on reruns: " + _routes_named(routes)
            if (routes := _stochastic(f, targeted=False))
            else None
        ),
        lambda f: [_flip_step(route) for route in _stochastic(f, targeted=False)],
    ),
    Rule(
        ReasonCode.CONTRACT_MISSING_INTENDED,
        Status.REJECTED,
        "contract",
        lambda f: (
            "no case is intended for required routes: "
            + _with_critical(f.coverage.missing_intended, f.coverage.critical_missing)
            if f.coverage.missing_intended
            else None
        ),
        lambda f: [
            f"Add at least one case whose expected route is {shown(r)}."
            for r in f.coverage.missing_intended
        ],
    ),
    Rule(
        ReasonCode.CONTRACT_MISSING_OBSERVED,
        Status.REJECTED,
        "contract",
        lambda f: (
            "no trial reached required routes: "
            + _with_critical(routes, f.coverage.critical_missing)
            if (routes := unreached(f))
            else None
        ),
        _unreached_steps,
    ),
    Rule(
        ReasonCode.CONTRACT_UNKNOWN_DECISION,
        Status.REJECTED,
        "contract",
        lambda f: (
            "trials returned decisions outside the contract: " + listing(f.coverage.unknown)
            if f.coverage.unknown
            else None
        ),
        _unknown_steps,
    ),
    Rule(
        ReasonCode.CONTRACT_UNDER_CASED,
        Status.REJECTED,
        "contract",
        lambda f: (
            "routes with fewer cases than the contract asks: "
            + listing(
                f"{shown(route)} ({f.coverage.intended.get(route, 0)} of {f.coverage.minimum_cases[route]})"
                for route in f.coverage.under_cased
            )
            if f.coverage.under_cased
            else None
        ),
        lambda f: [
            f"Add {f.coverage.minimum_cases[r] - f.coverage.intended.get(r, 0)} more cases for route {shown(r)}: "
            f"it has {f.coverage.intended.get(r, 0)}, the contract asks for {f.coverage.minimum_cases[r]}."
            for r in f.coverage.under_cased
        ],
    ),
    Rule(
        ReasonCode.DOMINANT_DECISION,
        Status.REJECTED,
        "dominance",
        lambda f: (
            f"{percent(f.dominance.share)} of {f.dominance.cases} cases first decided "
            f"{shown(f.dominance.verdict or '')}: the probes collapsed onto one decision"
            if f.dominance.collapsed
            else None
        ),
        lambda f: (
            f"Most cases first decided {shown(f.dominance.verdict or '')}: add probes meant to reach the other "
            "routes, so the run says something about them.",
        ),
    ),
    Rule(
        ReasonCode.LATENCY_EXCEEDED,
        Status.REJECTED,
        "latency",
        _threshold("latency", "ms", "recorded a latency", Threshold.EXCEEDED),
        _threshold_step("latency"),
    ),
    Rule(
        ReasonCode.TOOL_CALLS_EXCEEDED,
        Status.REJECTED,
        "tool_calls",
        _threshold("tool_calls", "tools", "decided a tool path", Threshold.EXCEEDED),
        _threshold_step("tool_calls"),
    ),
    Rule(
        ReasonCode.PASS_RATE_UNRELIABLE,
        Status.REJECTED,
        "pass_rate",
        lambda f: (
            f"the pass rate is below the required {percent(rate.required)}: {_passes(rate)}"
            if (rate := f.pass_rate) is not None and rate.result is Reliability.UNRELIABLE
            else None
        ),
        _fix_failing_cases,
    ),
    Rule(
        ReasonCode.ROUTE_PASS_RATE_UNRELIABLE,
        Status.REJECTED,
        "pass_rate",
        lambda f: (
            "routes whose pass rate is below the required rate: "
            + listing(
                (f"{shown(route)} ({_passes(f.passes.route_rates[route])})" for route in low), "; "
            )
            if (low := f.passes.unreliable_routes())
            else None
        ),
        _fix_failing_cases,
    ),
    Rule(
        ReasonCode.CURTAILED,
        Status.INCONCLUSIVE,
        "completeness",
        lambda f: (
            f"the run was curtailed after {f.trials.expected} of {s.sized_for} planned calls: "
            f"no outcome of the {s.sized_for - f.trials.expected} calls left could qualify it"
            if (s := f.stopping) is not None and s.curtailed
            else None
        ),
        _curtailed_steps,
    ),
    Rule(
        ReasonCode.LATENCY_UNDECIDED,
        Status.INCONCLUSIVE,
        "latency",
        _threshold("latency", "ms", "recorded a latency", Threshold.UNDECIDED),
        _threshold_step("latency"),
    ),
    Rule(
        ReasonCode.TOOL_CALLS_UNDECIDED,
        Status.INCONCLUSIVE,
        "tool_calls",
        _threshold("tool_calls", "tools", "decided a tool path", Threshold.UNDECIDED),
        _threshold_step("tool_calls"),
    ),
    Rule(
        ReasonCode.AMBIGUOUS_ORDER,
        Status.INCONCLUSIVE,
        "order",
        _ambiguous_order,
        _ambiguous_order_steps,
    ),
    Rule(
        ReasonCode.POOLED_UNDECIDED,
        Status.INCONCLUSIVE,
        "stability.pooled",
        lambda f: (
            f"{interval(f.pooled)}: not enough to show the change rate is below "
            f"{percent(f.pooled.tolerance)}"
            if _claims(f, Claim.TESTED) and f.pooled.result is Stability.UNDECIDED
            else None
        ),
        lambda f: (
            _pairs_step(
                "the pooled change rate",
                f.worst_case.pooled if f.worst_case else f.pooled,
                len(f.cases),
                f.policy.confidence,
                f.ambiguous_pairs,
            ),
        ),
    ),
    Rule(
        ReasonCode.POPULATION_UNDECIDED,
        Status.INCONCLUSIVE,
        "stability.population",
        lambda f: (
            f"{population_summary(f)}: not enough to show that new inputs change below "
            f"{percent(f.policy.tolerance)}"
            if _claims(f, Claim.POPULATION) and f.population.result is Stability.UNDECIDED
            else None
        ),
        _more_cases,
    ),
    Rule(
        ReasonCode.MIXED_CASE_NAMES,
        Status.INCONCLUSIVE,
        "stability.population",
        lambda f: (
            f"the cases are named in more than one way ({_schemes_named(f)}) and no trial links "
            "the names, so one input may be counted under two: new inputs were judged on the "
            f"{f.case_names.judged_cases} cases named by {f.case_names.judged.describe()} alone "
            f"({f.case_names.set_aside} set aside)"
            if _claims(f, Claim.POPULATION) and f.case_names.judged is not None
            else None
        ),
        _one(
            "Name every run's cases the same way (explicit ids everywhere, or fingerprints under "
            "the same VERDICTGATE_FINGERPRINT_KEY everywhere), or record each input's other "
            "names: a trial's `aliases` (the instrumentation records the input's fingerprint "
            "beside an explicit case id when it is given both) and its fingerprint `key_id`."
        ),
    ),
    Rule(
        ReasonCode.TARGET_UNDECIDED,
        Status.INCONCLUSIVE,
        "stability.route",
        lambda f: (
            "routes not yet shown within target: " + _routes_named(routes)
            if (
                routes := [
                    r for r in f.routes if r.targeted and r.change.result is Stability.UNDECIDED
                ]
            )
            else None
        ),
        lambda f: [
            _pairs_step(
                f"route {shown(r.route)}",
                r.worst_case or r.change,
                r.cases,
                f.policy.confidence,
                r.ambiguous_pairs,
            )
            for r in f.routes
            if r.targeted and r.change.result is Stability.UNDECIDED
        ],
    ),
    Rule(
        ReasonCode.PASS_RATE_UNDECIDED,
        Status.INCONCLUSIVE,
        "pass_rate",
        lambda f: (
            (
                f"not yet shown above the required pass rate {percent(rate.required)}: {_passes(rate)}"
                if rate.judged
                else f"a pass rate is required but {_nothing_judged(f.policy.pass_when)}"
            )
            if (rate := f.pass_rate) is not None and rate.result is Reliability.UNDECIDED
            else None
        ),
        _more_judged,
    ),
    Rule(
        ReasonCode.INCOMPLETE,
        Status.INCONCLUSIVE,
        "completeness",
        _incomplete,
        lambda f: (
            ()
            if f.in_progress
            else (f"Fix what failed and rerun the missing trials: {_incomplete(f)}.",)
        ),
    ),
    Rule(
        ReasonCode.IN_PROGRESS,
        Status.INCONCLUSIVE,
        "completeness",
        lambda f: (
            "the run is still collecting trials: its plan is not complete and its idle period "
            "has not ended"
            if f.in_progress
            else None
        ),
        _one("Wait for the run to finish (`verdictgate status --wait SECONDS`)."),
    ),
    Rule(
        ReasonCode.NO_REPEATS,
        Status.INCONCLUSIVE,
        "repeats",
        lambda f: (
            f"{f.cases_without_repeats} cases have fewer than 2 trials, so they form no rerun pair"
            if f.cases_without_repeats
            else None
        ),
        _one(
            "Repeat every case at least twice: `verdictgate run --repeats K`, or your harness's "
            "repeat option (promptfoo `repeat`, DeepEval `-r`)."
        ),
    ),
    Rule(
        ReasonCode.NO_TOOL_SPANS,
        Status.INCONCLUSIVE,
        "contract",
        lambda f: (
            f"every trial decided {NO_TOOL_TEXT}: no span of the run shows a tool call, so "
            "its telemetry may not record the tools the agent runs"
            if _no_tool_spans(f)
            else None
        ),
        _one(NO_TOOL_SPANS_STEP),
    ),
)
"""The admission rule, one row per reason code, in the order reasons are listed."""

RULE_OF: dict[str, Rule] = {rule.code.value: rule for rule in RULES}
"""Reason code -> its row."""


def _advice(f: Findings) -> Iterator[str]:
    """Next steps that are not about a reason: things worth knowing that do not gate."""
    if f.invariants.warned:
        yield "Warning invariants failed (reported, not gating): " + listing(
            f"{name} in {count} trials" for name, count in f.invariants.warned.items()
        )
    if f.run.fingerprints == "unkeyed":
        yield (
            "Set VERDICTGATE_FINGERPRINT_KEY: case ids are unkeyed SHA-256 fingerprints, and a short "
            "input can be guessed from one."
        )
    yield from _order_steps(f)  # the same step as `ambiguous_order`'s, when it fires
    if f.run.isolation is Isolation.UNKNOWN:
        yield "Declare how reruns were isolated (fresh-session or fresh-instance); independence is assumed, not shown."


def judge(findings: Findings) -> Assessment:
    """Apply the admission rule: rejected beats inconclusive beats qualified."""
    fired = [(rule, message) for rule in RULES if (message := rule.message(findings)) is not None]
    effects = {rule.effect for rule, _ in fired}
    status = (
        Status.REJECTED
        if Status.REJECTED in effects
        else Status.INCONCLUSIVE
        if effects
        else Status.QUALIFIED
    )
    ordered = [r for r in fired if r[0].effect is Status.REJECTED] + [
        r for r in fired if r[0].effect is not Status.REJECTED
    ]
    if findings.trials.received and 2 * findings.trials.errors >= findings.trials.received:
        # most trials errored: that leads what cannot reject (a rejecting reason still leads)
        ordered.sort(
            key=lambda fired_rule: (
                fired_rule[0].effect is not Status.REJECTED,
                fired_rule[0].code is not ReasonCode.INCOMPLETE,
            )
        )
    reasons = tuple(Reason(rule.code.value, message) for rule, message in ordered)
    leads = [  # a step every contract reason follows from comes first
        _decision_path_step(findings),
        NO_TOOL_SPANS_STEP if _no_tool_spans(findings) else None,
    ]
    steps = [
        *(lead for lead in leads if lead),
        *(step for rule, _ in ordered for step in rule.next_steps(findings)),
    ]
    return Assessment(
        **vars(findings),
        status=status,
        reasons=reasons,
        headline=_headline(findings, status, reasons),
        next_steps=tuple(dict.fromkeys([*steps, *_advice(findings)])),
    )


def _headline(f: Findings, status: Status, reasons: tuple[Reason, ...]) -> str:
    if status is Status.QUALIFIED:
        coverage = (
            f"all {len(f.coverage.required)} required routes were reached"
            if f.coverage.declared
            else "no contract was declared, so route coverage was not judged"
        )
        if f.policy.claim is Claim.POPULATION:
            p = f.population
            changed = sum(1 for case in f.cases if case.flips)
            return (
                f"Qualified: {p.cases} cases, {changed} changed{_uncounted(f)}; new inputs "
                f"like these change below {percent(f.policy.tolerance)} of reruns (case-level e-value "
                f"{p.e_det:.3g} >= {_decisive(f)}) and {coverage}."
            )
        pooled = f.pooled
        return (
            f"Qualified: {pooled.pairs} rerun pairs, {pooled.flips} changed{_uncounted(f)}; the "
            f"tested cases' change rate is below {percent(pooled.tolerance)} ({ci_label(f.policy.confidence)} upper bound "
            f"{percent(pooled.ci_high)}) and {coverage}."
        )
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return f"{status.value.capitalize()}: {reasons[0].message}{more}."
