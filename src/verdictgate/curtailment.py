"""Curtailment: a run stops as soon as the change rates it must show below their tolerance
(the pooled one, each targeted route's) could no longer be, even if every pair left agreed.
Other reasons it could not qualify (an untargeted route bound to end stochastic, a dominant
decision) do not stop it.

Stopping only when qualifying has become impossible never lets a wrong qualification through:
the run could not have qualified had it gone on. Its other answers are another matter: a
fixed rule looked at part-way is no longer valid, so a curtailed run is judged by the
sequential rule, which is valid at any stop. That costs the verdict: a plan sized for zero
flips is stopped at its first flip, where the sequential rule cannot yet say stochastic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from .assessment import Findings
from .policy import Policy
from .stats import Stability, change_rate
from .suite import Suite


def can_still_qualify(
    findings: Findings, suite: Suite, final_pairs: Mapping[str, int], policy: Policy
) -> bool:
    """Whether the run could still qualify if every pair left agreed: each change rate that
    must be shown below its tolerance (the pooled one, each targeted route's) would be, judged
    by `policy` with the flips seen so far over the pairs it has when the plan, cap or budget
    is spent (`final_pairs`: case id -> rerun pairs), both on the pairs that can count (less
    those already left out because they agreed only up to the order of tied steps, `ties`,
    which never will) and in the worst case, with those counted as flips (`WorstCase`)."""
    expected = suite.expected_by_case()
    uncounted = Counter[str]()
    for case in findings.cases:
        uncounted[case.case] += case.ambiguous_pairs
    tests = []
    for as_flips in (False, True):
        final = {
            case: n if as_flips else max(0, n - uncounted[case]) for case, n in final_pairs.items()
        }
        tests.append(
            (
                findings.pooled.flips + (findings.ambiguous_pairs if as_flips else 0),
                sum(final.values()),
                policy.tolerance,
            )
        )
        tests += [
            (
                route.change.flips + (route.ambiguous_pairs if as_flips else 0),
                sum(n for case, n in final.items() if expected.get(case) == route.route),
                route.change.tolerance,
            )
            for route in findings.routes
            if route.targeted
        ]
    return all(
        change_rate(flips, max(pairs, flips), t, policy.confidence, policy.method).result
        is Stability.DETERMINISTIC
        for flips, pairs, t in tests
    )
