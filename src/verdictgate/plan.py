"""Sizing a run before any call: repeats per case from the tolerance, capped by a budget."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .errors import PlanError
from .policy import Policy
from .sequential.design import default_max_pairs
from .stats import pairs_needed
from .suite import Suite


@dataclass(frozen=True)
class RunPlan:
    """How many trials each case gets, and what that costs in calls."""

    repeats: Mapping[str, int]

    @property
    def calls(self) -> int:
        return sum(self.repeats.values())


def repeats_for(pairs: int, cases: int) -> int:
    """Trials per case so that `cases` cases give at least `pairs` rerun pairs: 2*ceil(pairs/cases)."""
    return 2 * math.ceil(pairs / max(cases, 1))


def rounds_for(suite: Suite, policy: Policy, pairs_of_test: Callable[[float], int]) -> int:
    """Rounds (one rerun pair of every case each) that give every test its pairs: the pooled
    test over all cases and each route's over its own, `pairs_of_test(tolerance)` each."""
    by_route: dict[str, int] = {}
    for case in suite.cases:
        if case.expected is not None:
            by_route[case.expected] = by_route.get(case.expected, 0) + 1
    tests = [(policy.tolerance, len(suite.cases))] + [
        (suite.contract.tolerance_for(route, policy.tolerance), cases)
        for route, cases in by_route.items()
    ]
    return max(math.ceil(pairs_of_test(t) / max(cases, 1)) for t, cases in tests)


def sequential_trials(suite: Suite, policy: Policy, max_pairs: int | None) -> dict[str, int]:
    """Trials per case of a sequential run: enough rounds for the most demanding test's cap."""
    rounds = rounds_for(suite, policy, lambda t: max_pairs or default_max_pairs(t))
    return dict.fromkeys((case.id for case in suite.cases), 2 * rounds)


def plan_run(
    suite: Suite, policy: Policy, *, repeats: int | None = None, budget: int | None = None
) -> RunPlan:
    """Plan trials per case; an explicit `repeats` overrides sizing; a budget is a hard cap."""
    if not suite.cases:
        raise PlanError("the suite has no cases to run")
    needed = pairs_needed(policy.tolerance, policy.confidence, policy.method)
    if repeats is not None:
        if repeats < 1:
            raise PlanError(f"must be at least 1, got {repeats}", arguments=("repeats",))
        per_case = dict.fromkeys((case.id for case in suite.cases), repeats)
    else:
        base = repeats_for(needed, len(suite.cases))
        per_case = dict.fromkeys((case.id for case in suite.cases), base)
        for route, target in suite.contract.targets.items():
            route_cases = [case.id for case in suite.cases if case.expected == route]
            own = repeats_for(
                pairs_needed(target, policy.confidence, policy.method), len(route_cases)
            )
            for case_id in route_cases:
                per_case[case_id] = max(base, own)
    plan = RunPlan(per_case)
    if budget is not None and plan.calls > budget:
        raise PlanError(
            f"the plan needs {plan.calls} calls ({len(suite.cases)} cases) but the budget is "
            f"{budget}: raise {{budget}}, loosen {{tolerance}}, or set {{repeats}} explicitly",
            arguments=("budget", "tolerance", "repeats"),
        )
    return plan
