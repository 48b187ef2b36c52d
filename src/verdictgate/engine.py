"""The one place that turns trials into an Assessment."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

from . import admission
from .assessment import (
    Assessment,
    CaseResult,
    Coverage,
    Dominance,
    Findings,
    FlipPair,
    InvariantCounts,
    Isolation,
    PassCounts,
    RelationResult,
    RouteStability,
    RunInfo,
    Stopping,
    TrialCounts,
    WorstCase,
)
from .case_names import CaseNames, Naming
from .declaration import RunDeclaration
from .evidence import ERROR, MISSING, CaseEvidence, Evidence
from .family import judged_together
from .fingerprints import fingerprint_mode
from .policy import Claim, PassWhen, Policy
from .sequential.replay import decides, replay
from .sequential.rule import PopulationVerdict, population_verdict
from .stats import (
    ChangeRate,
    PassRate,
    Quantiles,
    change_rate,
    pass_rate,
    quantile_stats,
    side_error,
)
from .suite import Contract, Suite
from .ties import Agreement, AllowedOrders, agreement, matches_route, unordered
from .trial_model import Decision, NoDecision, TiedSteps, Trial, decision_text


@dataclass(frozen=True)
class Reported:
    """What a run itself (or its receiver) reported besides its trials: still collecting, the
    cases its quality gate stopped on, the relations it checked, records that came after it
    was final (`late`), a second run span that contradicted the first, and how a run that could
    stop before its plan did (`stopping`)."""

    in_progress: bool = False
    quality_failed: tuple[str, ...] = ()
    relations: tuple[RelationResult, ...] = ()
    late: int = 0
    declaration_conflict: bool = False
    stopping: Stopping | None = None


def assess(
    trials: Evidence | Iterable[Trial],
    suite: Suite | None = None,
    policy: Policy | None = None,
    *,
    run_id: str | None = None,
    isolation: Isolation | None = None,
    planned_trials: int | None = None,
    reported: Reported | None = None,
) -> Assessment:
    """Assess trials against a suite's contract and a policy.

    `planned_trials` is how many trials the run meant to collect. When it is unknown, every case
    is expected to have as many trials as the longest case of its route (a run sizes repeats per
    route), so holes, short cases and suite cases with no trial count as missing. What the run
    itself reported goes in as it is (`reported`). The run's record (`Assessment.run`) is
    derived here, once, from the evidence: how its case ids were made (`fingerprints`) and its
    isolation (the least independent its records declare, unless `isolation` says otherwise).
    """
    evidence = (trials if isinstance(trials, Evidence) else Evidence(trials)).compacted()
    suite = suite or Suite()
    policy = policy or Policy.with_tolerance(suite.tolerance, suite.pass_rate, suite.pass_when)
    run = RunInfo(
        id=run_id or _run_id(evidence),
        suite=suite.name,
        point=suite.point,
        isolation=isolation or evidence.declared_isolation(),
        fingerprints=fingerprint_mode(_names(evidence)),
    )
    findings = _findings(evidence, suite, policy, run, planned_trials, reported or Reported())
    return admission.judge(findings)


def _names(evidence: Evidence) -> Iterator[str]:
    """Every name the evidence gives its cases: case ids and their aliases."""
    for run, case in evidence.cases:
        yield case
        yield from evidence.names_of(run, case)[0]


def _case_names(evidence: Evidence) -> CaseNames:
    """The evidence's case names, united where a trial gives several names of one input."""
    names = CaseNames()
    for run, case in evidence.cases:
        aliases, key_id = evidence.names_of(run, case)
        names.add(run, case, aliases, key_id)
    return names


def _run_id(evidence: Evidence) -> str:
    """The run the evidence holds (its ids joined when it holds several; `run` when none)."""
    runs = sorted({run for run, _ in evidence.cases})
    return ",".join(runs) if runs else "run"


def assess_declared(
    evidence: Evidence,
    declaration: RunDeclaration,
    *,
    in_progress: bool = False,
    late: int = 0,
    declaration_conflict: bool = False,
) -> Assessment:
    """A run's evidence judged against its declaration, with what its receiver adds (records
    that came after it was final, a contradicting second run span). A run judged by the
    sequential rule is answered at the first round the rule decides (`assess_in_rounds`)."""
    reported = replace(
        _declared(declaration),
        in_progress=in_progress,
        late=late,
        declaration_conflict=declaration_conflict,
    )
    if declaration.sequential and evidence.cases:
        return assess_in_rounds(evidence, declaration, reported)[0]
    return _assessed(evidence, declaration, declaration.planned_trials, reported)


def assess_in_rounds(
    evidence: Evidence, declaration: RunDeclaration, reported: Reported | None = None
) -> tuple[Assessment, int]:
    """The evidence replayed round by round under the declaration's (sequential) rule: the
    assessment of the first round it decides (the last when none does), and the rounds
    judged, whenever and however the trials arrived. A run that may stop before its plan is
    not measured by the plan's size."""
    return replay(evidence, _round_judge(declaration, reported))


def decided_round(
    evidence: Evidence, declaration: RunDeclaration, first: int, last: int
) -> int | None:
    """The first of rounds `first` .. `last` at which the declaration's sequential rule decides
    the run (judged as `assess_in_rounds` judges them); None when none does."""
    assessment, round_number = replay(
        evidence, _round_judge(declaration, _declared(declaration)), first, last
    )
    return round_number if decides(assessment) else None


def _round_judge(
    declaration: RunDeclaration, reported: Reported | None
) -> Callable[[Evidence], Assessment]:
    return lambda prefix: _assessed(prefix, declaration, None, reported)


def _declared(declaration: RunDeclaration) -> Reported:
    """What a declaration itself reports besides its trials."""
    return Reported(
        quality_failed=declaration.quality_failed,
        relations=declaration.relations,
        stopping=declaration.stopping,
    )


def _assessed(
    evidence: Evidence, declaration: RunDeclaration, planned: int | None, reported: Reported | None
) -> Assessment:
    return assess(
        evidence,
        declaration.suite,
        declaration.policy,
        run_id=declaration.run_id,
        isolation=declaration.isolation,
        planned_trials=planned,
        reported=reported,
    )


class _Tally:
    """Pairs, flips, cases and flip pairs accumulated for one route (or pooled)."""

    __slots__ = ("ambiguous", "case_ids", "flip_counts", "flips", "judged", "pairs", "passed")

    def __init__(self) -> None:
        self.case_ids: set[str] = set()
        self.pairs = 0
        self.flips = 0
        self.ambiguous = 0
        """Pairs that agreed only up to the order of tied steps: not among `pairs`."""
        self.flip_counts: Counter[tuple[int, int]] = Counter()
        self.passed = 0
        self.judged = 0

    def counted(self, as_flips: bool) -> tuple[int, int]:
        """Its flips and pairs; with `as_flips`, its ambiguous pairs counted among both."""
        extra = self.ambiguous if as_flips else 0
        return self.flips + extra, self.pairs + extra


@dataclass
class _Pairs:
    """What one case's rerun pairs showed."""

    pairs: int = 0
    """Pairs whose agreement the telemetry shows either way: the change rate's."""
    flips: int = 0
    ambiguous: int = 0
    """Pairs equal only up to the order of steps whose spans started in the same instant."""
    flip_counts: Counter[tuple[int, int]] = field(default_factory=Counter)
    """Flips by unordered pair of decision keys."""


def _case_pairs(
    slots: Sequence[int], keys: Sequence[Decision], tied: Mapping[int, TiedSteps]
) -> _Pairs:
    """The rerun pairs of one case's trial slots. A pair in which a trial's path holds tied
    steps (`tied`: index -> ranges) and that is equal only up to their order is ambiguous
    (`ties`): counted apart, neither an agreement nor a flip."""
    found = _Pairs()
    for first, (a, b) in enumerate(zip(slots[0::2], slots[1::2], strict=False)):
        if a < 0 or b < 0:
            continue
        if tied and (2 * first in tied or 2 * first + 1 in tied):
            shown = agreement(
                keys[a], tied.get(2 * first, ()), keys[b], tied.get(2 * first + 1, ())
            )
        else:
            shown = Agreement.AGREED if a == b else Agreement.FLIPPED
        if shown is Agreement.AMBIGUOUS:
            found.ambiguous += 1
            continue
        found.pairs += 1
        if shown is Agreement.FLIPPED:
            found.flips += 1
            found.flip_counts[(a, b) if a < b else (b, a)] += 1
    return found


class _Scan:
    """One pass over the evidence: pooled and per-route tallies, decision counts, per-case
    results, and what sizing a missing plan needs. A case is counted once by all its names
    (`names`), whichever runs hold it."""

    def __init__(self, names: CaseNames) -> None:
        self.names = names
        self.pooled = _Tally()
        self.routes: dict[str, _Tally] = {}
        self.key_counts: Counter[int] = Counter()
        self.tied_counts: Counter[int] = Counter()
        """Trials per decision key whose order rests on a tie of different steps."""
        self.tied_paths: set[tuple[int, TiedSteps]] = set()
        """Each decision key with the tied ranges a trial read it with."""
        self.first_decisions: Counter[int] = Counter()
        self.cases: list[CaseResult] = []
        self.seen_cases: set[str] = set()
        self.received = 0
        self.latencies: list[float] = []
        self.longest: Counter[str | None] = Counter()
        self.case_routes: list[str | None] = []

    def add(
        self,
        case: CaseEvidence,
        route: str | None,
        keys: Sequence[Decision],
        policy: Policy,
        tied: Mapping[int, TiedSteps],
    ) -> None:
        """Tally one case of the evidence, judged as intended for `route`, with its trials'
        tied steps (`Evidence.tied_steps`)."""
        slots = case.slots
        counts = Counter(slots)
        counts.pop(MISSING, None)
        errors = counts.pop(ERROR, 0)
        self.key_counts.update(counts)
        trials_received = errors + sum(counts.values())
        self.received += trials_received
        self.longest[route] = max(self.longest[route], case.length())
        self.case_routes.append(route)
        counted_as = self.names.case_of(case.case)
        self.seen_cases.add(counted_as)
        found = _case_pairs(slots, keys, tied)
        for index, ranges in tied.items():
            key = slots[index] if index < len(slots) else MISSING
            if key >= 0 and unordered(keys[key], ranges):
                self.tied_counts[key] += 1
                self.tied_paths.add((key, ranges))
        passed, judged = (
            _expected_passes(counts, keys, tied, slots, route)
            if policy.pass_when is PassWhen.EXPECTED
            else case.pass_counts()
        )
        self.latencies.extend(case.latency_values())
        tallies = [self.pooled, self.routes.setdefault(route, _Tally())] if route else [self.pooled]
        for tally in tallies:
            tally.case_ids.add(counted_as)
            tally.pairs += found.pairs
            tally.flips += found.flips
            tally.ambiguous += found.ambiguous
            tally.flip_counts.update(found.flip_counts)
            tally.passed += passed
            tally.judged += judged
        first = next((slot for slot in slots if slot >= 0), None)
        if first is not None:
            self.first_decisions[first] += 1
        # one distinct decision means some slot holds it, so `first` is set
        verdict = decision_text(keys[first]) if first is not None and len(counts) == 1 else None
        self.cases.append(
            CaseResult(
                case.case,
                case.run,
                route,
                trials_received,
                errors,
                found.pairs,
                found.flips,
                verdict,
                passed,
                judged,
                _judged_rate(passed, judged, policy),
                ambiguous_pairs=found.ambiguous,
            )
        )

    def add_unseen(self, suite: Suite) -> None:
        """Suite cases with no trial at all: listed, and counted in their route."""
        for case in suite.cases:
            counted_as = self.names.case_of(case.id)
            if counted_as not in self.seen_cases:
                self.cases.append(CaseResult(case.id, None, case.expected, 0, 0, 0, 0, None))
                if case.expected:
                    self.routes.setdefault(case.expected, _Tally()).case_ids.add(counted_as)

    def planned(self, suite: Suite) -> int:
        """Trials expected without a plan: every case as many as the longest of its route."""
        overall = max(self.longest.values(), default=0)
        return sum(self.longest[route] for route in self.case_routes) + sum(
            self.longest.get(case.expected, overall)
            for case in suite.cases
            if self.names.case_of(case.id) not in self.seen_cases
        )


def _expected_passes(
    counts: Mapping[int, int],
    keys: Sequence[Decision],
    tied: Mapping[int, TiedSteps],
    slots: Sequence[int],
    route: str | None,
) -> tuple[int, int]:
    """(passed, judged) when a trial passes by deciding its case's expected `route`: every
    decided trial (a decision or a no-decision; `counts` per decision key) of a case that has
    one is judged, except a path whose tied steps make the route in some order but not in
    another (its order was never observed, so it is neither)."""
    if route is None:
        return 0, 0
    judged = sum(counts.values())
    passed = sum(n for key, n in counts.items() if decision_text(keys[key]) == route)
    for index, ranges in tied.items():
        key = slots[index] if index < len(slots) else MISSING
        if key >= 0 and unordered(keys[key], ranges) and matches_route(keys[key], ranges, route):
            judged -= 1
            passed -= decision_text(keys[key]) == route
    return passed, judged


def _route_results(
    scan: _Scan, evidence: Evidence, contract: Contract, policy: Policy, as_flips: bool
) -> tuple[RouteStability, ...]:
    return tuple(
        RouteStability(
            route,
            len(tally.case_ids),
            change_rate(
                *tally.counted(as_flips),
                contract.tolerance_for(route, policy.tolerance),
                policy.confidence,
                policy.method,
            ),
            route in contract.targets,
            _flip_pairs(tally.flip_counts, evidence),
            tally.ambiguous,
        )
        for route, tally in sorted(scan.routes.items())
    )


def _trial_counts(scan: _Scan, evidence: Evidence, planned: int, late: int) -> TrialCounts:
    no_decisions = sum(n for key, n in scan.key_counts.items() if evidence.is_no_decision(key))
    decided = sum(scan.key_counts.values())
    return TrialCounts(
        expected=planned,
        received=scan.received,
        decisions=decided - no_decisions,
        no_decisions=no_decisions,
        errors=sum(evidence.error_types.values()),
        conflicts=evidence.conflicts,
        duplicates=evidence.duplicates,
        error_types=dict(sorted(evidence.error_types.items())),
        late=late,
        ambiguous_order=evidence.ambiguous_orders(),
    )


def _pass_counts(scan: _Scan, evidence: Evidence, policy: Policy) -> PassCounts:
    routes = sorted(scan.routes.items())
    return PassCounts(
        scan.pooled.passed,
        scan.pooled.judged,
        {r: (t.passed, t.judged) for r, t in routes if t.judged},
        {
            r: rate
            for r, t in routes
            if (rate := _judged_rate(t.passed, t.judged, policy)) is not None
        },
        evidence.evaluations_skipped,
    )


def _findings(
    evidence: Evidence,
    suite: Suite,
    policy: Policy,
    run: RunInfo,
    planned: int | None,
    reported: Reported,
) -> Findings:
    """What one scan of the evidence shows under `policy`, with what the run reported."""
    scan = _scanned(evidence, suite, policy)
    pooled = scan.pooled
    change, routes, population, family_tests, naming = _stability(
        scan, evidence, suite, policy, False
    )
    worst: WorstCase | None = None
    if pooled.ambiguous:
        worst_pooled, worst_routes, worst_population, _, _ = _stability(
            scan, evidence, suite, policy, True
        )
        routes = tuple(
            replace(route, worst_case=w.change)
            for route, w in zip(routes, worst_routes, strict=True)
        )
        worst = WorstCase(worst_pooled, worst_population)
    pooled_passes, passes = _pass_rates_together(
        _pooled_pass_rate(pooled, policy), _pass_counts(scan, evidence, policy), policy
    )
    return Findings(
        run=run,
        policy=policy,
        trials=_trial_counts(
            scan, evidence, scan.planned(suite) if planned is None else planned, reported.late
        ),
        pooled=change,
        routes=routes,
        flip_pairs=_flip_pairs(pooled.flip_counts, evidence),
        ambiguous_pairs=pooled.ambiguous,
        coverage=_observed_coverage(suite.contract, scan, evidence),
        dominance=_dominance(scan.first_decisions, evidence, policy.dominance_threshold),
        cases=tuple(sorted(scan.cases, key=lambda c: (c.case, c.run or ""))),
        pass_rate=pooled_passes,
        latency=quantile_stats(scan.latencies, policy.max_p95_ms, policy.confidence),
        tool_calls=_tool_calls(evidence, policy),
        invariants=InvariantCounts(
            dict(sorted(evidence.invariant_failures.items())),
            dict(sorted(evidence.invariant_warnings.items())),
        ),
        passes=passes,
        in_progress=reported.in_progress,
        quality_failed=reported.quality_failed,
        relations=reported.relations,
        declaration_conflict=reported.declaration_conflict,
        stopping=reported.stopping,
        population=population,
        family_tests=family_tests,
        case_names=naming,
        worst_case=worst,
    )


def _stability(
    scan: _Scan, evidence: Evidence, suite: Suite, policy: Policy, as_flips: bool
) -> tuple[ChangeRate, tuple[RouteStability, ...], PopulationVerdict, int, Naming]:
    """The run's change-rate tests judged together (`_judged_together`), and how the cases
    the case-level one counts are named; with `as_flips`, its worst case: every ambiguous pair
    counted as a flip, of its case, route and the pool."""
    case_level, naming = _population(
        scan.cases, scan.names, policy.tolerance, side_error(policy.confidence), as_flips
    )
    change, routes, population, family_tests = _judged_together(
        change_rate(
            *scan.pooled.counted(as_flips), policy.tolerance, policy.confidence, policy.method
        ),
        _route_results(scan, evidence, suite.contract, policy, as_flips),
        case_level,
        policy,
    )
    return change, routes, population, family_tests, naming


def _scanned(evidence: Evidence, suite: Suite, policy: Policy) -> _Scan:
    """One pass over every case of the evidence, each judged as intended for the suite's
    expected route (else its own), then the suite's cases it holds nothing of. A suite case
    is found by any name of its input."""
    scan = _Scan(_case_names(evidence))
    suite_expected = {
        scan.names.case_of(case): route for case, route in suite.expected_by_case().items()
    }
    for case_evidence in evidence.cases.values():
        route = suite_expected.get(scan.names.case_of(case_evidence.case), case_evidence.expected)
        scan.add(
            case_evidence,
            route,
            evidence.keys,
            policy,
            evidence.tied_steps(case_evidence.run, case_evidence.case),
        )
    scan.add_unseen(suite)
    return scan


def _pooled_pass_rate(pooled: _Tally, policy: Policy) -> PassRate | None:
    """The pooled evaluator pass rate against the policy's required rate (None without one)."""
    if policy.pass_rate is None:
        return None
    return pass_rate(
        pooled.passed, pooled.judged, policy.pass_rate, policy.confidence, policy.method
    )


def _observed_coverage(contract: Contract, scan: _Scan, evidence: Evidence) -> Coverage:
    """The contract's coverage by the cases of each route and the decisions seen: those whose
    order was observed, and each tied path with the allowed decisions its order may be."""
    plain = {key for key, n in scan.key_counts.items() if n > scan.tied_counts[key]}
    allowed = AllowedOrders(contract.allowed)
    return _coverage(
        contract,
        {route: len(tally.case_ids) for route, tally in scan.routes.items()},
        {decision_text(evidence.keys[key]) for key in plain},
        {
            (decision_text(evidence.keys[key]), allowed.orders(evidence.keys[key], ranges))
            for key, ranges in scan.tied_paths
        },
    )


def _judged_together(
    pooled: ChangeRate,
    routes: tuple[RouteStability, ...],
    population: PopulationVerdict,
    policy: Policy,
) -> tuple[ChangeRate, tuple[RouteStability, ...], PopulationVerdict, int]:
    """The claim's test (pooled, or case-level under a claim about new inputs) and every
    route's with evidence, their stochastic sides judged together (`family`), and how many
    tests that is. A route whose test is the pooled one (the same flips, pairs and tolerance:
    a run of one route) is one test, not two."""
    claims_population = policy.claim is Claim.POPULATION
    claim = population if claims_population else pooled
    claim_tested = population.cases if claims_population else pooled.pairs
    same = (pooled.flips, pooled.pairs, pooled.tolerance)
    may_share = claim is pooled and bool(pooled.pairs)  # a route's test may be the pooled one
    as_pooled = {
        i
        for i, route in enumerate(routes)
        if may_share and (route.change.flips, route.change.pairs, route.change.tolerance) == same
    }
    tested = [i for i, route in enumerate(routes) if route.change.pairs and i not in as_pooled]
    family = [routes[i].change for i in tested] + ([claim] if claim_tested else [])
    judged = judged_together(family, side_error(policy.confidence))
    if claim_tested:  # the claim's test comes last
        if claims_population:
            population = cast(PopulationVerdict, judged[-1])
        else:
            pooled = cast(ChangeRate, judged[-1])
    changes = {i: cast(ChangeRate, change) for i, change in zip(tested, judged, strict=False)}
    changes |= dict.fromkeys(as_pooled, pooled)
    adjusted = tuple(
        replace(route, change=changes[i]) if i in changes else route
        for i, route in enumerate(routes)
    )
    return pooled, adjusted, population, len(family)


def _pass_rates_together(
    pooled: PassRate | None, passes: PassCounts, policy: Policy
) -> tuple[PassRate | None, PassCounts]:
    """The pooled pass rate and every route's, their "unreliable" sides judged together
    (`family`)."""
    if pooled is None or not pooled.judged:  # no judged trial: no route has a rate either
        return pooled, passes
    routes = list(passes.route_rates)  # each with judged trials
    judged = judged_together(
        [pooled, *(passes.route_rates[r] for r in routes)], side_error(policy.confidence)
    )
    return judged[0], replace(passes, route_rates=dict(zip(routes, judged[1:], strict=True)))


def _population(
    cases: list[CaseResult], names: CaseNames, tolerance: float, alpha: float, as_flips: bool
) -> tuple[PopulationVerdict, Naming]:
    """The case-level verdict with the case as the unit: a case that several runs or files hold,
    by any of its names, is one case, its change rate all its flips over all its pairs (pairs
    form within a run); with `as_flips`, its ambiguous pairs counted as flips. Names that may
    be one input named two ways are never counted as two cases: then only the cases of one
    naming scheme are judged (`CaseNames.naming`)."""
    totals: dict[str, tuple[int, int]] = {}
    for case in cases:
        counted_as = names.case_of(case.case)
        flips, pairs = totals.get(counted_as, (0, 0))
        extra = case.ambiguous_pairs if as_flips else 0
        totals[counted_as] = (flips + case.flips + extra, pairs + case.pairs + extra)
    naming, judged = names.naming(case for case, (_, pairs) in totals.items() if pairs)
    verdict = population_verdict(
        [flips / pairs for case, (flips, pairs) in totals.items() if case in judged],
        tolerance,
        alpha,
    )
    return verdict, naming


def _judged_rate(passed: int, judged: int, policy: Policy) -> PassRate | None:
    """A pass rate against the required rate, for a case or route with judged trials."""
    if policy.pass_rate is None or not judged:
        return None
    return pass_rate(passed, judged, policy.pass_rate, policy.confidence, policy.method)


def _tool_calls(evidence: Evidence, policy: Policy) -> Quantiles | None:
    """Tools called per decided trial (tool-path decisions only): p50 and p95 with intervals."""
    lengths = {
        key: len(decision)
        for key, decision in enumerate(evidence.keys)
        if isinstance(decision, tuple)
    }
    if not lengths:
        return None
    counts = [
        float(lengths[slot])
        for case in evidence.cases.values()
        for slot in case.slots
        if slot in lengths
    ]
    return quantile_stats(counts, policy.max_p95_tool_calls, policy.confidence)


def _flip_pairs(flip_counts: Counter[tuple[int, int]], evidence: Evidence) -> tuple[FlipPair, ...]:
    named: Counter[tuple[str, str]] = Counter()
    for (a, b), count in flip_counts.items():
        pair = sorted((decision_text(evidence.keys[a]), decision_text(evidence.keys[b])))
        named[(pair[0], pair[1])] += count
    ordered = sorted(named.items(), key=lambda item: (-item[1], item[0]))
    return tuple(FlipPair(routes, count) for routes, count in ordered)


def _coverage(
    contract: Contract,
    route_cases: Mapping[str, int],
    observed: set[str],
    tied: set[tuple[str, tuple[str, ...]]],
) -> Coverage:
    """Coverage against a declared contract. Without one (no `allowed`) nothing is required:
    no route is missing, unknown or under-cased, and only the dominance check applies.

    A tied path (`tied`: shown, with the allowed decisions some order of its tied steps makes)
    is within the contract when any order is allowed; it reached a route when that is the only
    allowed order it may be, and when it may be several, it shows none of them reached nor
    missing (`Coverage.unordered`); allowed in no order, it is outside the contract as read."""
    if not contract.declared:
        return Coverage(
            declared=False,
            required=(),
            intended={},
            observed=tuple(sorted(observed | {shown for shown, _ in tied})),
            missing_intended=(),
            missing_observed=(),
            unknown=(),
            under_cased=(),
            critical_missing=(),
            minimum_cases=dict(contract.minimum_cases),
        )
    reached, may_be = set(observed), set[str]()
    for shown, orders in tied:
        if len(orders) > 1:
            may_be.update(orders)
        else:
            reached.add(orders[0] if orders else shown)
    required = sorted(contract.required or ())
    intended = {route: route_cases.get(route, 0) for route in required}
    missing_intended = [route for route in required if intended[route] == 0]
    missing_observed = [route for route in required if route not in reached | may_be]
    acceptable = set(contract.allowed) | {
        str(NoDecision(reason)) for reason in contract.allowed_no_decisions
    }
    unknown = sorted(reached - acceptable)
    under_cased = [
        route
        for route, minimum in contract.minimum_cases.items()
        if route_cases.get(route, 0) < minimum
    ]
    missing = set(missing_intended) | set(missing_observed)
    return Coverage(
        declared=True,
        required=tuple(required),
        intended=intended,
        observed=tuple(sorted(reached)),
        missing_intended=tuple(missing_intended),
        missing_observed=tuple(missing_observed),
        unknown=tuple(unknown),
        under_cased=tuple(sorted(under_cased)),
        critical_missing=tuple(sorted(route for route in contract.critical if route in missing)),
        minimum_cases=dict(contract.minimum_cases),
        unordered=tuple(sorted(route for route in required if route in may_be - reached)),
    )


def _dominance(first_decisions: Counter[int], evidence: Evidence, threshold: float) -> Dominance:
    cases = sum(first_decisions.values())
    if not cases:
        return Dominance(None, 0.0, 0, False)
    top = max(first_decisions.values())
    verdict = min(decision_text(evidence.keys[k]) for k, n in first_decisions.items() if n == top)
    share = top / cases
    return Dominance(verdict, share, cases, cases >= 2 and share >= threshold)
