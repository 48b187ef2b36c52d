"""Sequential rules: the mixture e-process that judges a change rate validly however often it
is looked at, and the case-level e-process behind a claim about new inputs.

Each says deterministic (the change rate is below the tolerance t), stochastic (above it) or
undecided, with each wrong answer bounded by `alpha` (0.025 a side, as the two-sided 95%
intervals elsewhere) at any stopping time, by Ville's inequality: each is a mixture of
likelihood ratios against Bernoulli(t), a nonnegative supermartingale under its null. The
exact rule for a fixed number of pairs is in `stats`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from .policy import Claim, Policy
from .stats import ALPHA, MAX_SEQUENTIAL_TOLERANCE, Method, Stability, check_counts
from .suite import Suite


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
class EValues:
    """The two e-values after some evidence, and what they decide."""

    deterministic: float
    stochastic: float
    result: Stability


def sequential_evalues(flips: int, pairs: int, tolerance: float, alpha: float = ALPHA) -> EValues:
    """The mixture e-process R1 after `flips` in `pairs` (computed in logs):

    E_det = 0.75 [x = 0] (1 - t)^-n + 0.25 4^-x ((1 - t/4) / (1 - t))^(n - x)
    E_st  = 0.5 2^x ((1 - 2t) / (1 - t))^(n - x) + 0.5 4^x ((1 - 4t) / (1 - t))^(n - x)

    deterministic when E_det >= 1/alpha, stochastic when E_st >= 1/alpha, else undecided.
    """
    check_counts(flips, pairs, tolerance)
    if not tolerance < MAX_SEQUENTIAL_TOLERANCE:
        raise ValueError(
            f"the sequential rule needs a tolerance below {MAX_SEQUENTIAL_TOLERANCE}, got "
            f"{tolerance}: its alternatives go up to 4t"
        )
    t, x, n = tolerance, flips, pairs
    q = math.log1p(-t)
    deterministic = _log_sum(
        [
            *([math.log(0.75) - n * q] if x == 0 else []),
            math.log(0.25) - x * math.log(4) + (n - x) * (math.log1p(-t / 4) - q),
        ]
    )
    stochastic = _log_sum(
        [
            math.log(0.5) + x * math.log(2) + (n - x) * (math.log1p(-2 * t) - q),
            math.log(0.5) + x * math.log(4) + (n - x) * (math.log1p(-4 * t) - q),
        ]
    )
    return EValues(_reported(deterministic), _reported(stochastic), _decide(
        deterministic, stochastic, alpha))  # fmt: skip


def sequential_interval(flips: int, pairs: int, alpha: float = ALPHA) -> tuple[float, float]:
    """The interval the e-process's decisions imply: `high` is the smallest tolerance at which
    these counts are deterministic, `low` the largest at which they are stochastic (each found
    by bisection: E_det rises and E_st falls with the tolerance). Judging at t then agrees with
    the interval: deterministic iff high <= t, stochastic iff low >= t. Tolerances are searched
    below 0.25, the rule's reach: counts no tolerance there calls deterministic get high = 1."""
    check_counts(flips, pairs, 0.5)
    top = MAX_SEQUENTIAL_TOLERANCE * (1 - 1e-9)

    def det(t: float) -> bool:
        return sequential_evalues(flips, pairs, t, alpha).deterministic >= 1.0 / alpha

    def stoch(t: float) -> bool:
        return sequential_evalues(flips, pairs, t, alpha).stochastic >= 1.0 / alpha

    high = _boundary(lambda t: not det(t), top) if det(top) else 1.0
    low = _boundary(stoch, top) if stoch(1e-12) else 0.0
    return low, high


def _boundary(holds_below: Callable[[float], bool], top: float) -> float:
    """The point in (0, top) where `holds_below` stops holding (it holds below, not above)."""
    low, high = 0.0, top
    for _ in range(60):
        middle = (low + high) / 2
        if holds_below(middle):
            low = middle
        else:
            high = middle
    return high


@dataclass(frozen=True)
class PopulationVerdict:
    """A claim about new inputs, with the case as the unit: its e-values over the cases, what
    they decide, and how many zero-flip cases would certify it."""

    cases: int
    e_det: float
    e_stoch: float
    result: Stability
    cases_needed: int


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
    deterministic = _log_sum(
        [
            math.log(0.75) + _log_product((1 - r) / (1 - t) for r in flip_rates),
            math.log(0.25) + _log_product(1 - 0.75 * (r - t) / (1 - t) for r in flip_rates),
        ]
    )
    stochastic = (
        _log_sum(
            [
                math.log(0.5) + _log_product(1 + (r - t) / (1 - t) for r in flip_rates),
                math.log(0.5) + _log_product(1 + 3 * (r - t) / (1 - t) for r in flip_rates),
            ]
        )
        if t < MAX_SEQUENTIAL_TOLERANCE
        else _log_product(1 + (r - t) / (1 - t) for r in flip_rates)
    )
    return PopulationVerdict(
        len(flip_rates), _reported(deterministic), _reported(stochastic),
        _decide(deterministic, stochastic, alpha), population_cases_needed(tolerance, alpha),
    )  # fmt: skip


@functools.lru_cache(maxsize=64)
def population_cases_needed(tolerance: float, alpha: float = ALPHA) -> int:
    """Fewest cases, none flipping, that certify a population claim under the case-level rule
    (every report asks, so it is searched from its lower bound and remembered). With r_i = 0,
    E_det = 0.75 a^n + 0.25 b^n, a = 1 / (1 - t) > b, so E_det <= a^n: n >= ln(1/alpha) / ln a."""
    t = tolerance
    log_a, log_b = -math.log1p(-t), math.log1p(0.75 * t / (1 - t))
    n = max(1, math.floor(-math.log(alpha) / log_a))
    while _log_sum([math.log(0.75) + n * log_a, math.log(0.25) + n * log_b]) < -math.log(alpha):
        n += 1
    return n


MAX_LOG_EVALUE = 690.0
"""E-values are decided in logs; one reported beyond e^690 (about 1e300) is reported as that,
a finite number JSON can carry."""


def _reported(log_value: float) -> float:
    return math.exp(min(log_value, MAX_LOG_EVALUE))


def _decide(log_det: float, log_stoch: float, alpha: float) -> Stability:
    threshold = -math.log(alpha)
    if log_det >= threshold:
        return Stability.DETERMINISTIC
    if log_stoch >= threshold:
        return Stability.STOCHASTIC
    return Stability.UNDECIDED


def _log_sum(logs: list[float]) -> float:
    top = max(logs)
    if top == -math.inf:
        return top
    return top + math.log(math.fsum(math.exp(value - top) for value in logs))


def _log_product(factors: Iterable[float]) -> float:
    total = 0.0
    for factor in factors:
        if factor <= 0.0:
            return -math.inf
        total += math.log(factor)
    return total
