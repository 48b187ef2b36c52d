"""What a sequential test's E_st must reach to say stochastic at a level Holm's step-down holds
it to, tuned to that level by exact computation.

Ville's inequality holds the chance that E_st ever reaches 1 / level within the level, but
loosely: the flip that crosses it overshoots (at 2.5% / 7 and t = 0.05 the chance is 0.54 of
the level). Over a test's first TUNED_PAIRS / t pairs, where a change rate well above the
tolerance is caught, the threshold is lowered to the smallest c at which the chance, for pairs
flipping with chance exactly t and looked at after every pair, of ever saying stochastic stays
within the level: of reaching c within those pairs, then 1 / level up to EXACT_PAIRS / t pairs
(both by forward passes over the flip counts), then 1 / level later (Ville's inequality from
where each path stands there). After those first pairs the threshold is 1 / level: the rule is
never stricter than Ville's, so a test alone, and a pooled test past its first pairs, are
judged as before. Fewer flips only cross less often, and fewer looks too: the level holds for
any change rate up to t, however often the test is looked at.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from .eprocess import log_stochastic
from .judgement import check_counts

TUNED_PAIRS = 5
"""Over the first this-over-the-tolerance pairs (100 at t = 0.05) the threshold is tuned."""

EXACT_PAIRS = 60
"""Up to this over the tolerance (1,200 pairs at t = 0.05) the chance of reaching 1 / level is
computed exactly; past it, bounded by Ville's inequality."""


def stochastic_threshold(tolerance: float, level: float, pairs: int) -> float:
    """The E_st a sequential test held to `level` must reach after `pairs` pairs to say
    stochastic: tuned to the level over its first TUNED_PAIRS / t pairs, 1 / level after."""
    check_counts(0, pairs, tolerance)
    if not 0.0 < level < 1.0:
        raise ValueError(f"a level is between 0 and 1, got {level}")
    if pairs > math.ceil(TUNED_PAIRS / tolerance):
        return 1.0 / level
    return _tuned(tolerance, level)


@functools.lru_cache(maxsize=256)
def _tuned(tolerance: float, level: float) -> float:
    """The smallest value E_st takes over the first pairs whose threshold keeps the chance
    within `level` (`_chance_with`): bisection in logs below Ville's 1 / level, then the exact
    step among the values E_st takes there (so a lower level never gets a lower threshold)."""
    t, tuned = tolerance, math.ceil(TUNED_PAIRS / tolerance)
    chance = _chance_with(t, level, tuned)
    low, high = math.log(1.0 / level) - 3.0, math.log(1.0 / level)
    while high - low > 0.001:
        middle = (low + high) / 2
        if chance(middle) <= level:
            high = middle
        else:
            low = middle
    steps = (value for value in _values_above(t, low, high, tuned) if chance(value) <= level)
    return math.exp(next(steps, high))


def _values_above(t: float, low: float, high: float, pairs: int) -> list[float]:
    """The values log E_st takes over the first `pairs` pairs above `low`, ascending: those up
    to `high`, and after each number of pairs the first above it."""
    values = []
    for n, first in enumerate(_boundaries(t, low, pairs), start=1):
        for flips in range(first, n + 1):
            value = log_stochastic(flips, n, t)
            if value > low:
                values.append(value)
            if value > high:
                break
    return sorted(values)


def _chance_with(t: float, level: float, tuned: int) -> Callable[[float], float]:
    """The chance, for pairs flipping with chance t looked at after every pair, that E_st ever
    says stochastic with the threshold e^log_c over the first `tuned` pairs and 1 / level after,
    as a function of log_c."""
    later = _later(t, level, tuned)

    def chance(log_c: float) -> float:
        below, crossed = [1.0], 0.0  # the chance of each flip count not crossed yet
        for boundary in _boundaries(t, log_c, tuned):
            grown = [mass * (1.0 - t) for mass in below] + [0.0]
            for flips, mass in enumerate(below):
                grown[flips + 1] += mass * t
            crossed += math.fsum(grown[boundary:])
            below = grown[:boundary]
        return crossed + math.fsum(mass * later[flips] for flips, mass in enumerate(below))

    return chance


def _later(t: float, level: float, tuned: int) -> list[float]:
    """For each flip count below 1 / level after `tuned` pairs, the chance that E_st reaches
    1 / level later: exact up to EXACT_PAIRS / t pairs (backwards, a pair at a time), Ville's
    bound from where each path stands there."""
    exact, log_v = math.ceil(EXACT_PAIRS / t), math.log(1.0 / level)
    boundaries = [0, *_boundaries(t, log_v, exact)]  # boundaries[n]: after n pairs
    chances = [
        min(1.0, math.exp(log_stochastic(flips, exact, t) - log_v))
        for flips in range(boundaries[exact])
    ]
    for pairs in range(exact - 1, tuned - 1, -1):
        after = [*chances, 1.0]  # a pair later: a count at that boundary has crossed
        chances = [
            (1.0 - t) * after[flips] + t * after[flips + 1] for flips in range(boundaries[pairs])
        ]
    return chances


def _boundaries(t: float, log_c: float, pairs: int) -> list[int]:
    """For n = 1..pairs, the fewest flips after n pairs with log E_st >= log_c (n + 1 when
    none): a pair more raises it by zero or one flip (E_st falls with n at fixed flips, and a
    flip more raises it)."""
    found, boundary = [], 1
    for n in range(1, pairs + 1):
        while boundary <= n and log_stochastic(boundary, n, t) < log_c:
            boundary += 1
        found.append(boundary)
    return found
