"""Sequential judging: a policy judged by the mixture e-process (`eprocess`), and the
case-level e-process behind a claim about new inputs.

Each says deterministic (the change rate is below the tolerance t), stochastic (above it) or
undecided, with each wrong answer bounded by `alpha` (0.025 a side, as the two-sided 95%
intervals elsewhere) at any stopping time, by Ville's inequality: each is a mixture of
likelihood ratios against Bernoulli(t), a nonnegative supermartingale under its null. The
exact rule for a fixed number of pairs is in `stats`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from ..eprocess import decide, log_product, log_sum, reported
from ..judgement import ALPHA, MAX_SEQUENTIAL_TOLERANCE, Method, Stability, check_counts
from ..policy import Claim, Policy
from ..suite import Suite


def sequential_policy(policy: Policy, suite: Suite | None) -> Policy:
    """`policy` judging by the sequential rule; ValueError when the tolerance or a route's
    target of `suite` is beyond the rule's reach, or the policy claims new inputs (stopping a
    route early makes how many pairs a case gets depend on its flips, which the case-level
    rule must not)."""
    if policy.claim is Claim.POPULATION:
        raise ValueError(
            "a run that may stop early (sequential or curtailed) claims the tested cases: a claim "
            "about new inputs needs every case sized in advance"
        )
    judged = replace(policy, method=Method.SEQUENTIAL)  # refuses a tolerance beyond reach
    targets = suite.contract.targets.values() if suite is not None else ()
    if beyond := [t for t in targets if not t < MAX_SEQUENTIAL_TOLERANCE]:
        raise ValueError(
            f"the sequential rule needs every route target below {MAX_SEQUENTIAL_TOLERANCE}, "
            f"got {beyond[0]}"
        )
    return judged


@dataclass(frozen=True)
class PopulationVerdict:
    """A claim about new inputs, with the case as the unit: its e-values over the cases, what
    they decide, and how many zero-flip cases would certify it."""

    cases: int
    e_det: float
    e_stoch: float
    result: Stability
    cases_needed: int
    level: float | None = None
    """The level its stochastic side was held to when judged with the run's routes (`family`);
    None when judged alone."""

    REJECTS: ClassVar[Stability] = Stability.STOCHASTIC
    UNDECIDED: ClassVar[Stability] = Stability.UNDECIDED

    def rejection_p_value(self) -> float:
        """1 / E_st: the smallest level at which it would say stochastic."""
        return min(1.0, 1.0 / self.e_stoch) if self.e_stoch > 0 else 1.0

    def rejects_at(self, level: float) -> bool:
        """Whether E_st reaches 1 / `level`."""
        return self.cases > 0 and self.e_stoch >= 1.0 / level


def population_verdict(
    flip_rates: Sequence[float], tolerance: float, alpha: float = ALPHA
) -> PopulationVerdict:
    """The case-level e-process over cases with change rates r_i = flips_i / pairs_i:

    E_det = 0.75 prod((1 - r_i) / (1 - t)) + 0.25 prod(1 - 0.75 (r_i - t) / (1 - t))
    E_st  = 0.5 prod(1 + (r_i - t) / (1 - t)) + 0.5 prod(1 + 3 (r_i - t) / (1 - t))

    Each factor has mean 1 when a case's flip chance is t, so each mixture is a test
    supermartingale over cases, provided how many pairs a case got does not depend on its own
    flips. From t = 0.25 on, the second E_st factor can go negative: E_st is its first
    component alone.
    """
    check_counts(0, 0, tolerance)
    if any(not 0.0 <= r <= 1.0 for r in flip_rates):
        raise ValueError("a change rate is between 0 and 1")
    flip_rates = sorted(flip_rates)  # the same cases give the same e-values, to the last bit
    t = tolerance
    deterministic = log_sum(
        [
            math.log(0.75) + log_product((1 - r) / (1 - t) for r in flip_rates),
            math.log(0.25) + log_product(1 - 0.75 * (r - t) / (1 - t) for r in flip_rates),
        ]
    )
    stochastic = (
        log_sum(
            [
                math.log(0.5) + log_product(1 + (r - t) / (1 - t) for r in flip_rates),
                math.log(0.5) + log_product(1 + 3 * (r - t) / (1 - t) for r in flip_rates),
            ]
        )
        if t < MAX_SEQUENTIAL_TOLERANCE
        else log_product(1 + (r - t) / (1 - t) for r in flip_rates)
    )
    return PopulationVerdict(
        len(flip_rates),
        reported(deterministic),
        reported(stochastic),
        decide(deterministic, stochastic, alpha),
        population_cases_needed(tolerance, alpha),
    )


@functools.lru_cache(maxsize=64)
def population_cases_needed(tolerance: float, alpha: float = ALPHA) -> int:
    """Fewest cases, none flipping, that certify a population claim under the case-level rule
    (every report asks, so it is searched from its lower bound and remembered). With r_i = 0,
    E_det = 0.75 a^n + 0.25 b^n, a = 1 / (1 - t) > b, so E_det <= a^n: n >= ln(1/alpha) / ln a."""
    t = tolerance
    log_a, log_b = -math.log1p(-t), math.log1p(0.75 * t / (1 - t))
    n = max(1, math.floor(-math.log(alpha) / log_a))
    while log_sum([math.log(0.75) + n * log_a, math.log(0.25) + n * log_b]) < -math.log(alpha):
        n += 1
    return n
