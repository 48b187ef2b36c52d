"""What the sequential rule costs before any call: for an agent whose pairs flip with chance p,
how many pairs a test takes on average and how often it ends each way, computed exactly by
a forward pass over (pairs, flips) rather than simulated.

After n pairs the rule says deterministic for every flip count up to d(n) (E_det falls as flips
rise) and stochastic from s(n) on (E_st rises): so the probability of being still undecided
after n pairs, spread over the flip counts between, is carried forward one pair at a time
until it is gone or the cap is reached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..eprocess import sequential_evalues
from ..level_thresholds import stochastic_threshold
from ..stats import ALPHA

PAIRS_PER_TOLERANCE = 15
"""A sequential test's cap, in pairs, is this over its tolerance (300 pairs at t = 0.05)."""

NEGLIGIBLE = 1e-12
"""Probability still undecided below which the pass stops (it is counted as undecided)."""


def default_max_pairs(tolerance: float) -> int:
    """The most pairs a sequential test collects unless told otherwise: 15/t."""
    return math.ceil(PAIRS_PER_TOLERANCE / tolerance)


@dataclass(frozen=True)
class SequentialDesign:
    """The sequential rule's behaviour on an agent whose pairs flip with chance `flip_chance`."""

    flip_chance: float
    expected_pairs: float
    deterministic: float
    """Probability the test ends deterministic."""
    stochastic: float
    undecided: float
    """Probability it reaches its cap undecided."""


def sequential_design(
    tolerance: float,
    flip_chance: float,
    max_pairs: int | None = None,
    alpha: float = ALPHA,
    level: float | None = None,
) -> SequentialDesign:
    """Expected pairs and outcome chances of the sequential rule at `tolerance`, looked at after
    every pair up to `max_pairs` (default 15/t), on pairs that flip with chance `flip_chance`;
    its stochastic side held to `level` in a family (`family`: stochastic alone, and at the
    threshold tuned to the level, `stochastic_threshold`), or alone when None."""
    if not 0.0 <= flip_chance <= 1.0:
        raise ValueError(f"a flip chance is between 0 and 1, got {flip_chance}")
    cap = default_max_pairs(tolerance) if max_pairs is None else max_pairs
    if cap < 1:
        raise ValueError(f"a test needs at least one pair, got {max_pairs}")
    boundaries = _boundaries(tolerance, cap, alpha, level)
    open_mass = [1.0]  # probability of each flip count among tests still undecided
    low = 0  # the flip count open_mass[0] stands for
    expected = deterministic = stochastic = 0.0
    for n in range(1, cap + 1):
        grown = [0.0] * (len(open_mass) + 1)
        for offset, mass in enumerate(open_mass):
            grown[offset] += mass * (1.0 - flip_chance)
            grown[offset + 1] += mass * flip_chance
        det_up_to, stoch_from = boundaries[n - 1]
        kept: list[float] = []
        kept_low = None
        for offset, mass in enumerate(grown):
            flips = low + offset
            if flips <= det_up_to:
                deterministic += mass
                expected += n * mass
            elif flips >= stoch_from:
                stochastic += mass
                expected += n * mass
            else:
                kept_low = flips if kept_low is None else kept_low
                kept.append(mass)
        if kept_low is None or sum(kept) < NEGLIGIBLE:
            break
        open_mass, low = kept, kept_low
    else:
        expected += cap * sum(open_mass)
    return SequentialDesign(
        flip_chance, expected, deterministic, stochastic, 1.0 - deterministic - stochastic
    )


def _boundaries(
    tolerance: float, cap: int, alpha: float, level: float | None
) -> list[tuple[int, int]]:
    """For n = 1..cap: (the most flips still deterministic, -1 when none; the fewest flips
    already stochastic, at `level` when given, n + 1 when none). A pair more raises each by
    zero or one flip (E_det rises and E_st falls with n at fixed flips, and the tuned threshold
    only rises, to 1 / level past its first pairs), so each is found by stepping from the last."""
    threshold = 1.0 / alpha

    def stochastic_at(n: int) -> float:
        if level is None:
            return threshold
        return max(threshold, stochastic_threshold(tolerance, level, n))

    result = []
    det, stoch = -1, 1
    for n in range(1, cap + 1):
        det = min(det + 1, n)
        while det >= 0 and sequential_evalues(det, n, tolerance, alpha).deterministic < threshold:
            det -= 1
        stoch = min(stoch, n + 1)
        at = stochastic_at(n)
        while stoch <= n and sequential_evalues(stoch, n, tolerance, alpha).stochastic < at:
            stoch += 1
        result.append((det, stoch))
    return result
