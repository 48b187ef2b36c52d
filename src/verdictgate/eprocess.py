"""The mixture e-process R1: a change rate judged validly however often it is looked at.

It says deterministic (the change rate is below the tolerance t), stochastic (above it) or
undecided, with each wrong answer bounded by `alpha` (0.025 a side, as the two-sided 95%
intervals elsewhere) at any stopping time, by Ville's inequality: each e-value is a mixture of
likelihood ratios against Bernoulli(t), a nonnegative supermartingale under its null.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .judgement import ALPHA, MAX_SEQUENTIAL_TOLERANCE, Stability, check_counts


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
    deterministic = log_sum(
        [
            *([math.log(0.75) - n * q] if x == 0 else []),
            math.log(0.25) - x * math.log(4) + (n - x) * (math.log1p(-t / 4) - q),
        ]
    )
    stochastic = log_stochastic(x, n, t)
    return EValues(
        reported(deterministic), reported(stochastic), decide(deterministic, stochastic, alpha)
    )


def log_stochastic(flips: int, pairs: int, t: float) -> float:
    """log E_st after `flips` in `pairs`, unchecked (`sequential_evalues` checks its counts)."""
    q = math.log1p(-t)
    return log_sum(
        [
            math.log(0.5) + flips * math.log(2) + (pairs - flips) * (math.log1p(-2 * t) - q),
            math.log(0.5) + flips * math.log(4) + (pairs - flips) * (math.log1p(-4 * t) - q),
        ]
    )


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


MAX_LOG_EVALUE = 690.0
"""E-values are decided in logs; one reported beyond e^690 (about 1e300) is reported as that,
a finite number JSON can carry."""


def reported(log_value: float) -> float:
    return math.exp(min(log_value, MAX_LOG_EVALUE))


def decide(log_det: float, log_stoch: float, alpha: float) -> Stability:
    threshold = -math.log(alpha)
    if log_det >= threshold:
        return Stability.DETERMINISTIC
    if log_stoch >= threshold:
        return Stability.STOCHASTIC
    return Stability.UNDECIDED


def log_sum(logs: list[float]) -> float:
    top = max(logs)
    if top == -math.inf:
        return top
    return top + math.log(math.fsum(math.exp(value - top) for value in logs))


def log_product(factors: Iterable[float]) -> float:
    total = 0.0
    for factor in factors:
        if factor <= 0.0:
            return -math.inf
        total += math.log(factor)
    return total
