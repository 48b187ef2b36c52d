"""Exact binomial sums, written apart from verdictgate's own statistics, to compute how often a
rule gives each wrong answer: by summing the probability of every flip count it answers
wrongly, never by simulation."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from verdictgate.eprocess import sequential_evalues
from verdictgate.sequential.design import default_max_pairs
from verdictgate.stats import ChangeRate, Method, Stability, change_rate


def pmf(n: int, p: float) -> list[float]:
    """P(X = k) for k = 0..n, X ~ Binomial(n, p), each term in logs (no overflow at n = 3000)."""
    log_p, log_q = math.log(p), math.log1p(-p)
    return [math.exp(log_choose(n, k) + k * log_p + (n - k) * log_q) for k in range(n + 1)]


def log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


Rule = Callable[[int, int, float], Stability]
"""(flips, pairs, tolerance) -> what a rule answers."""


def by_method(method: Method) -> Rule:
    return lambda x, n, t: change_rate(x, n, t, method=method).result


def boundaries(rule: Rule, tolerance: float, largest: int) -> list[tuple[int, int]]:
    """For n = 1..largest: (the most flips still deterministic, -1 when none; the fewest flips
    already stochastic, n + 1 when none). Each moves by at most one flip from n to n + 1 for
    these rules; the neighbours of every boundary are checked, so a rule that broke that would
    fail here rather than be summed wrongly."""
    found = []
    det, stoch = -1, 1
    for n in range(1, largest + 1):
        det = min(det + 1, n)
        while det >= 0 and rule(det, n, tolerance) is not Stability.DETERMINISTIC:
            det -= 1
        assert det == n or rule(det + 1, n, tolerance) is not Stability.DETERMINISTIC
        stoch = min(stoch, n + 1)
        while stoch <= n and rule(stoch, n, tolerance) is not Stability.STOCHASTIC:
            stoch += 1
        assert stoch <= 1 or rule(stoch - 1, n, tolerance) is not Stability.STOCHASTIC
        found.append((det, stoch))
    return found


@lru_cache(maxsize=16)
def worst_errors(
    method: Method, tolerance: float, largest: int
) -> tuple[tuple[float, int], tuple[float, int]]:
    """(worst false "deterministic", at n), (worst false "stochastic", at n) over n = 1..largest,
    at a true change rate of exactly the tolerance: the worst case of either, since the chance
    of x <= d falls as the rate rises and that of x >= s falls as it drops."""
    worst_det, worst_stoch = (0.0, 0), (0.0, 0)
    for n, (det, stoch) in enumerate(boundaries(by_method(method), tolerance, largest), 1):
        terms = pmf(n, tolerance)
        false_det = math.fsum(terms[: det + 1])
        false_stoch = math.fsum(terms[stoch:])
        worst_det = max(worst_det, (false_det, n))
        worst_stoch = max(worst_stoch, (false_stoch, n))
    return worst_det, worst_stoch


_THRESHOLDS: dict[tuple[float, float, Method], list[int]] = {}


def stochastic_thresholds(largest: int, tolerance: float, level: float, method: Method) -> list:
    """For n = 0..largest (at least), the fewest flips `method` calls stochastic at `level`
    (n + 1 when none); it never falls as n grows, and each boundary's neighbour is checked.
    Kept per (tolerance, level, method) and extended as longer runs ask."""
    found = _THRESHOLDS.setdefault((tolerance, level, method), [1])
    s = found[-1]
    for n in range(len(found), largest + 1):
        s = min(s, n + 1)
        while s <= n and not counts(s, n, tolerance, method).rejects_at(level):
            s += 1
        assert s == 1 or not counts(s - 1, n, tolerance, method).rejects_at(level)
        found.append(s)
    return found


def counts(flips: int, pairs: int, tolerance: float, method: Method) -> ChangeRate:
    """The counts, as the family judges them (`rejects_at` reads nothing else but, for the
    sequential rule, its result alone), without the interval `change_rate` would compute."""
    result = Stability.UNDECIDED
    if method is Method.SEQUENTIAL and pairs:
        result = sequential_evalues(flips, pairs, tolerance).result
    return ChangeRate(pairs, flips, 0.0, 1.0, tolerance, result, method)


def false_rejection_of_family(
    routes: int, pairs: int, tolerance: float, method: Method, level: float
) -> float:
    """The chance that a run of `routes` routes, `pairs` pairs each, every pair flipping with
    chance `tolerance`, has any of its tests (the pooled one and each route's) stochastic at
    `level`: one minus the chance that no route reaches its threshold and neither do their
    flips together, the routes' counts convolved below their threshold. Holm's step-down
    rejects anything, when every test is at its tolerance, exactly when this happens at
    alpha / (routes + 1)."""
    thresholds = stochastic_thresholds(routes * pairs, tolerance, level, method)
    own, pooled = thresholds[pairs], thresholds[routes * pairs]
    below = pmf(pairs, tolerance)[:own]
    together = [1.0]
    for _ in range(routes):
        grown = [0.0] * (len(together) + len(below) - 1)
        for i, a in enumerate(together):
            for j, b in enumerate(below):
                grown[i + j] += a * b
        together = grown
    return 1.0 - math.fsum(together[:pooled])


def ever_crossed(
    thresholds: list[int], tolerance: float, rounds: int, pairs_a_round: int = 1
) -> float:
    """The chance that a count of flips, `pairs_a_round` pairs a round each flipping with chance
    `tolerance`, reaches `thresholds[pairs]` at the end of some round up to `rounds`: the chance
    of each count still below, carried forward a round at a time."""
    step = pmf(pairs_a_round, tolerance)
    below, crossed = [1.0], 0.0
    for number in range(1, rounds + 1):
        grown = [0.0] * (len(below) + pairs_a_round)
        for i, a in enumerate(below):
            for j, b in enumerate(step):
                grown[i + j] += a * b
        boundary = thresholds[number * pairs_a_round]
        crossed += math.fsum(grown[boundary:])
        below = grown[:boundary]
    return crossed


def sequential_false_rejection_bound(routes: int, tolerance: float, level: float) -> float:
    """An upper bound, computed exactly, on the chance that a sequential run of one case a route
    (a look after every round up to the rule's cap, every pair flipping with chance
    `tolerance`) ever has a test stochastic at `level`: the sum over its tests (each route's,
    and the pooled one, looked at every `routes` pairs) of the chance that each ever is."""
    cap = default_max_pairs(tolerance)
    own = stochastic_thresholds(cap, tolerance, level, Method.SEQUENTIAL)
    pooled = stochastic_thresholds(routes * cap, tolerance, level, Method.SEQUENTIAL)
    return routes * ever_crossed(own, tolerance, cap) + ever_crossed(pooled, tolerance, cap, routes)


def looked_at_every_pair(
    judge: Callable[[int, int], Stability], flip_chance: float, cap: int
) -> tuple[float, float, float]:
    """(expected pairs, P(it ever says deterministic), P(it ever says stochastic)) when a rule,
    `judge(flips, pairs)`, is looked at after every pair up to `cap` pairs and the run stops at
    its first answer: the chance of each flip count among runs still undecided, carried forward
    one pair at a time, every count judged afresh."""
    undecided = {0: 1.0}
    expected = deterministic = stochastic = 0.0
    for n in range(1, cap + 1):
        grown: dict[int, float] = {}
        for flips, mass in undecided.items():
            grown[flips] = grown.get(flips, 0.0) + mass * (1 - flip_chance)
            grown[flips + 1] = grown.get(flips + 1, 0.0) + mass * flip_chance
        undecided = {}
        for flips, mass in grown.items():
            result = judge(flips, n)
            if result is Stability.UNDECIDED:
                undecided[flips] = mass
                continue
            expected += n * mass
            if result is Stability.DETERMINISTIC:
                deterministic += mass
            else:
                stochastic += mass
    return expected + cap * sum(undecided.values()), deterministic, stochastic
