"""The exact rule, the sequential e-process and the case-level verdict: pinned values, exact
error bounds, and a seeded simulation of the sequential rule at p = t."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verdictgate.eprocess import sequential_evalues
from verdictgate.sequential.rule import population_verdict
from verdictgate.stats import (
    ALPHA,
    Method,
    Stability,
    binomial_cdf,
    change_rate,
    clopper_pearson_interval,
    exact_pairs_needed,
    exact_stability,
    pairs_needed,
    pairs_to_qualify,
)

DET, STOCH, UNDECIDED = Stability.DETERMINISTIC, Stability.STOCHASTIC, Stability.UNDECIDED


def test_the_exact_rule_at_its_pinned_values() -> None:
    assert exact_pairs_needed(0.05) == 72
    assert exact_stability(0, 72, 0.05) is DET and exact_stability(0, 71, 0.05) is UNDECIDED
    assert (
        change_rate(2, 11, 0.05, method=Method.WILSON).result is STOCH
    )  # Wilson's lopsided answer ...
    assert exact_stability(2, 11, 0.05) is UNDECIDED  # ... which the exact rule does not give


@given(st.integers(0, 40), st.integers(1, 200), st.sampled_from([0.01, 0.05, 0.1, 0.3]))
def test_the_exact_interval_agrees_with_the_exact_rule(x: int, n: int, t: float) -> None:
    if x > n:
        return
    low, high = clopper_pearson_interval(x, n)
    judged = change_rate(x, n, t, method=Method.EXACT)
    assert (judged.ci_low, judged.ci_high) == (low, high) and judged.method is Method.EXACT
    assert judged.result is exact_stability(x, n, t)
    if abs(high - t) > 1e-9 and abs(low - t) > 1e-9:  # away from a tie at the boundary
        assert (judged.result is DET) == (high < t) and (judged.result is STOCH) == (low > t)


def test_pairs_needed_and_to_qualify_follow_the_method() -> None:
    assert pairs_needed(0.05, method=Method.WILSON) == 73 and pairs_needed(0.05) == 72
    assert pairs_to_qualify(0, 10, 0.05, method=Method.EXACT) == 72
    total = pairs_to_qualify(1, 10, 0.05, method=Method.EXACT)
    assert exact_stability(1, total, 0.05) is DET and exact_stability(1, total - 1, 0.05) is not DET


def first_deterministic(flips: int, tolerance: float = 0.05) -> int:
    return next(
        n for n in range(flips, 5000) if sequential_evalues(flips, n, tolerance).result is DET
    )


def fewest_stochastic_flips(pairs: int, tolerance: float = 0.05) -> int:
    return next(
        x for x in range(pairs + 1) if sequential_evalues(x, pairs, tolerance).result is STOCH
    )


def test_the_sequential_rule_boundaries_at_t_005() -> None:
    assert [first_deterministic(x) for x in (0, 1, 2)] == [76, 168, 205]
    assert {fewest_stochastic_flips(n) for n in range(12, 21)} == {5}
    assert {fewest_stochastic_flips(n) for n in range(40, 50)} == {8}
    assert {fewest_stochastic_flips(n) for n in range(70, 80)} == {11}
    assert fewest_stochastic_flips(11) == 4 and fewest_stochastic_flips(21) == 6


def test_the_sequential_rule_refuses_tolerances_its_alternatives_cannot_exceed() -> None:
    with pytest.raises(ValueError, match=r"below 0\.25"):
        sequential_evalues(0, 10, 0.25)


def test_the_case_level_verdict() -> None:
    flaky = population_verdict([8 / 13, 0, 0, 0, 0, 0], 0.05)
    clean = population_verdict([0] * 6, 0.05)
    assert (flaky.result, clean.result) == (UNDECIDED, UNDECIDED)
    assert clean.cases_needed == 76
    assert population_verdict([0] * 76, 0.05).result is DET
    assert population_verdict([0] * 75, 0.05).result is UNDECIDED
    assert population_verdict([0.5] * 12, 0.05).result is STOCH


@given(st.integers(1, 300), st.sampled_from([0.01, 0.02, 0.05, 0.1, 0.2]))
def test_the_exact_rule_errs_at_most_alpha_a_side_at_p_equal_t(pairs: int, t: float) -> None:
    decisions = [exact_stability(x, pairs, t) for x in range(pairs + 1)]
    det = [x for x, d in enumerate(decisions) if d is DET]
    stoch = [x for x, d in enumerate(decisions) if d is STOCH]
    if det:
        assert binomial_cdf(max(det), pairs, t) <= ALPHA
    if stoch:
        assert 1 - binomial_cdf(min(stoch) - 1, pairs, t) <= ALPHA


@given(st.integers(0, 60), st.integers(0, 300), st.sampled_from([0.02, 0.05, 0.1]))
def test_more_flips_never_make_the_e_values_point_the_other_way(x: int, n: int, t: float) -> None:
    if x + 1 > n:
        return
    fewer, more = sequential_evalues(x, n, t), sequential_evalues(x + 1, n, t)
    assert more.deterministic <= fewer.deterministic
    assert more.stochastic >= fewer.stochastic


def simulate(p: float, t: float, runs: int = 20_000, cap: int = 300, seed: int = 7):
    """Seeded runs of the sequential rule on Bernoulli(p) flips, looking after every pair:
    the share that ends deterministic, stochastic, and the mean pairs at the stop."""
    flips = np.cumsum(np.random.default_rng(seed).random((runs, cap)) < p, axis=1)
    det_at = np.full(cap + 1, -1)  # most flips still deterministic after n pairs
    stoch_at = np.full(cap + 1, cap + 1)  # fewest flips stochastic after n pairs
    for n in range(1, cap + 1):
        x = 0
        while x <= n and sequential_evalues(x, n, t).result is DET:  # E_det falls with x
            x += 1
        det_at[n] = x - 1
        stoch_at[n] = next(
            (x for x in range(n + 1) if sequential_evalues(x, n, t).result is STOCH), cap + 1
        )
    n = np.arange(1, cap + 1)
    det = flips <= det_at[n]
    stoch = flips >= stoch_at[n]
    decided = det | stoch
    first = np.where(decided.any(axis=1), decided.argmax(axis=1), cap - 1)
    rows = np.arange(runs)
    ended_det = decided.any(axis=1) & det[rows, first]
    ended_stoch = decided.any(axis=1) & stoch[rows, first]
    return ended_det.mean(), ended_stoch.mean(), (first + 1).mean()


MARGIN = 3 * (ALPHA * (1 - ALPHA) / 20_000) ** 0.5
"""Three standard errors of a 2.5% share over 20,000 runs."""


def test_the_sequential_rule_keeps_both_errors_at_p_equal_t_however_often_it_looks() -> None:
    false_det, false_stoch, _ = simulate(p=0.05, t=0.05)
    assert false_det <= ALPHA + MARGIN and false_stoch <= ALPHA + MARGIN


def test_the_sequential_rule_stops_a_flaky_agent_early() -> None:
    _, stochastic, mean_pairs = simulate(p=0.2, t=0.05)
    assert stochastic > 0.99 and mean_pairs < 40  # the issue measured 33 pairs on average
    certified, _, perfect_pairs = simulate(p=0.0, t=0.05)
    assert certified == 1.0 and perfect_pairs == 76


@given(st.integers(0, 60), st.integers(1, 300), st.sampled_from([0.01, 0.05, 0.1, 0.2]))
def test_the_sequential_interval_agrees_with_its_decisions(x: int, n: int, t: float) -> None:
    if x > n:
        return
    judged = change_rate(x, n, t, method=Method.SEQUENTIAL)
    if min(abs(judged.ci_high - t), abs(judged.ci_low - t)) < 1e-7:
        return  # a tie at the boundary
    assert (judged.result is DET) == (judged.ci_high <= t)
    assert (judged.result is STOCH) == (judged.ci_low >= t)


@settings(deadline=None, max_examples=60)  # exact fractions take a while at n = 400
@given(st.integers(1, 400), st.data(), st.sampled_from([0.001, 0.01, 0.05, 0.2, 0.5, 0.9]))
def test_the_binomial_tail_equals_the_direct_sum(n: int, data, p: float) -> None:
    from fractions import Fraction
    from math import comb

    x = data.draw(st.integers(0, n))
    exact = sum(comb(n, k) * Fraction(p) ** k * (1 - Fraction(p)) ** (n - k) for k in range(x + 1))
    assert binomial_cdf(x, n, p) == pytest.approx(float(exact), rel=1e-9, abs=1e-300)


def test_a_million_pairs_are_judged_at_once_and_e_values_stay_finite() -> None:
    for method in (Method.EXACT, Method.SEQUENTIAL):
        judged = change_rate(10, 1_000_000, 0.05, method=method)
        assert judged.result is DET and 0.0 <= judged.ci_low <= judged.ci_high <= 1.0
    assert sequential_evalues(0, 1_000_000, 0.05).deterministic < float("inf")


def test_counts_beyond_the_rules_reach_read_as_such() -> None:
    judged = change_rate(4, 8, 0.01, method=Method.SEQUENTIAL)
    assert judged.result is STOCH and judged.ci_high == 1.0  # never an interval below the rate
    assert population_verdict([0.5, 0.0, 1.0], 0.3).e_stoch >= 0.0  # t >= 0.25: still an e-value


@pytest.mark.parametrize("pairs", [11, 40, 72, 150])
def test_the_exact_rule_keeps_both_errors_at_p_equal_t_in_a_seeded_simulation(pairs: int) -> None:
    flips = np.random.default_rng(pairs).binomial(pairs, 0.05, size=20_000)
    results = [exact_stability(int(x), pairs, 0.05) for x in flips]
    false_det = sum(r is DET for r in results) / len(results)
    false_stoch = sum(r is STOCH for r in results) / len(results)
    assert false_det <= ALPHA + MARGIN and false_stoch <= ALPHA + MARGIN


def test_the_sequential_rule_beside_a_fixed_wilson_plan() -> None:
    """A fixed Wilson plan spends 73 pairs whatever the agent: the sequential rule spends 76 on
    a perfect one and fewer than half that on one flipping at 4t."""
    fixed = pairs_needed(0.05, 0.95, Method.WILSON)
    _, _, perfect = simulate(p=0.0, t=0.05)
    _, _, flaky = simulate(p=0.2, t=0.05)
    assert fixed == 73 and perfect == fixed + 3 and flaky < fixed / 2
