"""Every verdict valid by default: the default rule's two wrong answers, computed by exact
binomial sums at every n (change rates and pass rates), and a run's rejecting verdicts across
all its routes held to 2.5% together (Holm's step-down), for the exact rule by exact sums and
for the sequential rule by a seeded simulation with its standard error."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binomial_sums import (
    boundaries,
    ever_crossed,
    false_rejection_of_family,
    pmf,
    sequential_false_rejection_bound,
    stochastic_thresholds,
    worst_errors,
)
from verdictgate import Claim, Contract, Policy, Suite, Trial, assess
from verdictgate.eprocess import sequential_evalues
from verdictgate.family import holm, judged_together
from verdictgate.level_thresholds import EXACT_PAIRS, TUNED_PAIRS, stochastic_threshold
from verdictgate.reports import render_markdown, render_text
from verdictgate.sequential.design import default_max_pairs
from verdictgate.stats import (
    ALPHA,
    Method,
    Reliability,
    Stability,
    change_rate,
    clopper_pearson_interval,
    pairs_needed,
    pass_rate,
    trials_needed_for_pass_rate,
)

TOLERANCES = (0.01, 0.05, 0.10)


@pytest.mark.parametrize("tolerance", TOLERANCES)
def test_the_default_rule_keeps_both_wrong_answers_within_2_5_percent_at_every_n(tolerance):
    (false_det, at_det), (false_stoch, at_stoch) = worst_errors(Policy().method, tolerance, 1000)
    assert false_det <= ALPHA, (false_det, at_det)
    assert false_stoch <= ALPHA, (false_stoch, at_stoch)
    assert false_det > 0.02 and false_stoch > 0.01  # the sums see the rule's real boundary


def test_wilson_breaks_both_bounds_where_the_docs_say() -> None:
    """Wilson, AgentVerity's rule, computed by the same sums: the sums can fail a rule."""
    (false_det, _), (false_stoch, at_stoch) = worst_errors(Method.WILSON, 0.05, 1000)
    assert false_det > ALPHA and false_stoch > 0.14 and at_stoch == 3


@pytest.mark.parametrize("tolerance", TOLERANCES)
def test_a_run_of_2_to_12_routes_at_their_tolerance_is_falsely_rejected_at_most_2_5_percent(
    tolerance,
):
    """Exact sums: every route's pairs and the pooled pairs flip with chance exactly the
    tolerance. Holm's step-down rejects such a run iff one of its routes + 1 tests is
    stochastic at alpha / (routes + 1)."""
    worst = max(
        (
            false_rejection_of_family(routes, pairs, tolerance, Method.EXACT, ALPHA / (routes + 1)),
            routes,
            pairs,
        )
        for routes in range(2, 13)
        for pairs in range(1, 151)
    )
    assert worst[0] <= ALPHA, worst


def test_without_the_correction_six_routes_reject_falsely_far_more_often() -> None:
    """The same sums with each test at alpha alone, on the default plan's 12 pairs a route."""
    alone = false_rejection_of_family(6, 12, 0.05, Method.EXACT, ALPHA)
    together = false_rejection_of_family(6, 12, 0.05, Method.EXACT, ALPHA / 7)
    assert alone > 2 * ALPHA and together <= ALPHA


def simulated_false_rejection(routes: int, tolerance: float, level: float, runs: int) -> float:
    """Sequential runs of one case a route, a look after every round up to the rule's cap, every
    pair flipping with chance `tolerance`: the share of runs in which any test (a route's, or
    the pooled one) is ever stochastic at `level`. A run that qualifies would stop sooner and
    reject less, so this ignores qualifying: it overstates the rate, never understates it."""
    cap = default_max_pairs(tolerance)
    own = stochastic_thresholds(cap, tolerance, level, Method.SEQUENTIAL)
    pooled = stochastic_thresholds(routes * cap, tolerance, level, Method.SEQUENTIAL)
    coin = random.Random(20261201 + routes)
    rejected = 0
    for _ in range(runs):
        flips = [0] * routes
        for n in range(1, cap + 1):
            for route in range(routes):
                flips[route] += coin.random() < tolerance
            if max(flips) >= own[n] or sum(flips) >= pooled[routes * n]:
                rejected += 1
                break
    return rejected / runs


@pytest.mark.parametrize("tolerance", TOLERANCES)
@pytest.mark.parametrize("routes", [2, 6, 12])
def test_a_sequential_run_at_its_tolerance_is_falsely_rejected_at_most_2_5_percent(
    routes, tolerance
):
    """Holm's step-down rejects a run whose tests are all at their tolerance only when one of
    its routes + 1 tests is stochastic at alpha / (routes + 1): at most the sum of their
    chances, each held below its level by its tuned threshold (and near it: the tuning spends
    the level). A seeded simulation of the same runs agrees within its standard error."""
    level = ALPHA / (routes + 1)
    bound = sequential_false_rejection_bound(routes, tolerance, level)
    assert 0.75 * ALPHA < bound <= ALPHA, bound  # nearly all of it spent, never more
    if tolerance == 0.10:
        runs = 3000
        rate = simulated_false_rejection(routes, tolerance, level, runs)
        assert rate <= bound + 3 * math.sqrt(bound * (1 - bound) / runs), (rate, bound)


def test_a_sequential_run_without_the_correction_rejects_falsely_more_often() -> None:
    runs = 3000
    rate = simulated_false_rejection(6, 0.10, ALPHA, runs)
    assert rate > ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / runs), rate


methods = st.sampled_from([Method.EXACT, Method.WILSON, Method.SEQUENTIAL])
counts = st.integers(1, 200).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))
changes = st.builds(
    lambda count, t, method: change_rate(count[0], count[1], t, method=method),
    counts,
    st.sampled_from([0.01, 0.05, 0.1, 0.2]),
    methods,
)


@given(changes)
def test_one_test_alone_is_judged_exactly_as_its_method_judges_it(change) -> None:
    [alone] = judged_together([change], ALPHA)
    assert alone.result is change.result and alone.level == ALPHA


@given(st.lists(changes, min_size=1, max_size=13))
def test_holm_rejects_something_iff_some_test_is_stochastic_at_alpha_over_m(tests) -> None:
    adjusted = holm(tests, ALPHA)
    m = len(tests)
    assert any(a.rejects for a in adjusted) == any(t.rejects_at(ALPHA / m) for t in tests)
    reached = sorted(a.level for a in adjusted if a.level is not None)
    rejected = sum(a.rejects for a in adjusted)
    assert len(reached) == min(m, rejected + 1)  # the step-down stops at its first failure
    assert reached == pytest.approx([ALPHA / (m - k) for k in range(len(reached))])
    for test, a, judged in zip(tests, adjusted, judged_together(tests, ALPHA), strict=True):
        assert judged.level == a.level
        assert (judged.result is Stability.STOCHASTIC) == (a.rejects and test.rejects_at(a.level))
        if test.result is not Stability.STOCHASTIC:
            assert judged.result is test.result  # the deterministic side is never touched


@given(changes, st.sampled_from([ALPHA, ALPHA / 3, ALPHA / 13]))
def test_a_p_value_orders_tests_as_their_rule_decides_them(change, level) -> None:
    p = change.rejection_p_value()
    if abs(p - level) > 1e-9 * level:  # away from a tie at the boundary
        assert change.rejects_at(level) == (p < level)


def test_a_route_stochastic_alone_is_undecided_beside_six_others() -> None:
    """3 flips in 12 pairs at 5%: P(X >= 3) = 1.96% is stochastic alone, but the smallest of
    seven tests is held to 2.5% / 7 = 0.357%, so the run is not rejected for it."""
    routes = [f"r{i}" for i in range(6)]
    suite = Suite("s", "p", (), Contract(frozenset(routes)))
    trials = [
        Trial(
            f"{route}-case",
            index,
            route if not (route == "r0" and index in (1, 3, 5)) else "r1",
            expected=route,
        )
        for route in routes
        for index in range(24)
    ]
    assessment = assess(trials, suite, Policy())
    r0 = next(r for r in assessment.routes if r.route == "r0")
    assert (r0.change.flips, r0.change.pairs) == (3, 12)
    assert change_rate(3, 12, 0.05).result is Stability.STOCHASTIC  # alone
    assert r0.change.result is Stability.UNDECIDED and r0.change.level == pytest.approx(ALPHA / 7)
    assert "route_stochastic" not in assessment.reason_codes
    assert assessment.family_tests == 7


@pytest.mark.parametrize("required", [0.8, 0.95])
def test_the_default_pass_rate_verdict_keeps_both_wrong_answers_within_2_5_percent(required):
    """A pass rate judged as a change rate of failures against 1 - required: "reliable" when
    it is shown above the rate required, "unreliable" when shown below."""
    as_stability = {
        Reliability.RELIABLE: Stability.DETERMINISTIC,
        Reliability.UNRELIABLE: Stability.STOCHASTIC,
        Reliability.UNDECIDED: Stability.UNDECIDED,
    }

    def rule(failed: int, judged: int, tolerance: float) -> Stability:
        return as_stability[pass_rate(judged - failed, judged, 1 - tolerance).result]

    tolerance = round(1 - required, 10)
    for n, (det, stoch) in enumerate(boundaries(rule, tolerance, 400), 1):
        terms = pmf(n, tolerance)
        assert math.fsum(terms[: det + 1]) <= ALPHA and math.fsum(terms[stoch:]) <= ALPHA, n
    assert trials_needed_for_pass_rate(required) == pairs_needed(tolerance)


@given(
    st.integers(1, 5000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
    st.sampled_from([0.8, 0.95, 0.99, 0.999]),
)
def test_the_exact_intervals_ends_are_where_each_tail_is_its_share(count, confidence) -> None:
    """Each end of the Clopper-Pearson interval solves its tail equation to 1e-9 (relative),
    by exact sums written apart from the project's continued fraction."""
    x, n = count
    low, high = clopper_pearson_interval(x, n, confidence)
    alpha = (1 - confidence) / 2
    assert 0.0 <= low <= x / n <= high <= 1.0
    if x > 0:
        assert math.fsum(pmf(n, low)[x:]) == pytest.approx(alpha, rel=1e-9)
    if x < n:
        assert math.fsum(pmf(n, high)[: x + 1]) == pytest.approx(alpha, rel=1e-9)


def test_route_pass_rates_are_judged_together_with_the_pooled_one() -> None:
    """Six routes of 20 judged trials at a required rate of 80%: one route passing 11 (P(X <= 11;
    20, 0.8) = 1.0%) is shown below it alone, but not held to 2.5% / 7 beside the pooled rate
    and five other routes."""
    routes = [f"r{i}" for i in range(6)]
    trials = [
        Trial(
            f"{route}-case",
            index,
            route,
            "r1",
            expected=route,
            passed=not (route == "r0" and index < 9),
        )
        for route in routes
        for index in range(20)
    ]
    assessment = assess(
        trials, Suite("s", "p", (), Contract(frozenset(routes))), Policy(pass_rate=0.8)
    )
    r0 = assessment.passes.route_rates["r0"]
    assert (r0.passed, r0.judged) == (11, 20)
    assert pass_rate(11, 20, 0.8).result is Reliability.UNRELIABLE  # alone
    assert r0.result is Reliability.UNDECIDED and r0.level == pytest.approx(ALPHA / 7)
    assert "route_pass_rate_unreliable" not in assessment.reason_codes
    [alone] = judged_together([pass_rate(11, 20, 0.8)], ALPHA)
    assert alone.result is Reliability.UNRELIABLE and alone.level == ALPHA


@given(
    st.integers(1, 300).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
    st.sampled_from([0.5, 0.8, 0.95]),
    st.sampled_from([Method.EXACT, Method.WILSON]),
    st.sampled_from([ALPHA, ALPHA / 4]),
)
def test_a_pass_rates_p_value_orders_it_as_its_rule_decides_it(count, required, method, level):
    rate = pass_rate(*count, required, method=method)
    p = rate.rejection_p_value()
    if abs(p - level) > 1e-9 * level:
        assert rate.rejects_at(level) == (p < level)
    if level == ALPHA:
        assert rate.rejects_at(level) == (rate.result is Reliability.UNRELIABLE)


def test_a_run_of_one_route_is_one_test_not_two() -> None:
    """Every pair is the route's and the pooled test's: 2 flips in 4 pairs at 5% (P(X >= 2) =
    1.4%) is stochastic, as that one test alone says, not held to 2.5% / 2."""
    trials = [Trial("c", i, "a" if i % 4 != 1 else "b", "r1", expected="a") for i in range(8)]
    assessment = assess(trials, Suite("s", "p", (), Contract(frozenset({"a", "b"}))), Policy())
    [route] = assessment.routes
    assert (route.change.flips, route.change.pairs) == (2, 4)
    assert assessment.family_tests == 1
    assert route.change.result is assessment.pooled.result is Stability.STOCHASTIC
    assert route.change.level == assessment.pooled.level == ALPHA


def test_the_case_level_test_says_what_decides_it_at_its_level_and_labels_follow_confidence():
    """Under a claim about new inputs judged with 6 routes, the case-level e-value must reach
    1 / its level (not 40), and a 99% run's intervals are named 99%."""
    routes = [f"r{i}" for i in range(6)]
    # half the cases flip once in their two pairs: the case-level test is the most telling of
    # the seven, so the step-down holds it to 2.5% / 7 first
    trials = [
        Trial(f"{route}-{k}", i, "r5" if k % 2 and i == 1 else route, "r1", expected=route)
        for route in routes[:5]
        for k in range(4)
        for i in range(4)
    ]
    trials += [Trial(f"r5-{k}", i, "r5", "r1", expected="r5") for k in range(4) for i in range(4)]
    suite = Suite("s", "p", (), Contract(frozenset(routes)))
    assessment = assess(trials, suite, Policy(claim=Claim.POPULATION))
    level = assessment.population.level
    assert level is not None and level < ALPHA
    assert f"({1 / level:.4g} decides)" in " ".join(r.message for r in assessment.reasons)
    wide = assess(trials, suite, Policy(confidence=0.99))
    assert "99% CI" in render_text(wide) and "99% CI" in render_markdown(wide)


def crossing_with(tolerance: float, level: float) -> float:
    """The chance, summed here apart from the code under test, that pairs flipping with chance
    exactly t, looked at after every pair, reach the threshold the rule holds a test at `level`
    to, within EXACT_PAIRS / t pairs (what the rule bounds past them is left out)."""
    exact = math.ceil(EXACT_PAIRS / tolerance)
    boundary = [0] + [
        next(
            (
                x
                for x in range(n + 1)
                if sequential_evalues(x, n, tolerance).stochastic
                >= stochastic_threshold(tolerance, level, n)
            ),
            n + 1,
        )
        for n in range(1, exact + 1)
    ]
    return ever_crossed(boundary, tolerance, exact)


@pytest.mark.parametrize("tolerance", TOLERANCES)
@pytest.mark.parametrize("tests", [1, 7, 13])
def test_a_threshold_tuned_to_a_level_spends_it_and_no_more(tolerance, tests) -> None:
    """Held to 2.5% / tests, a sequential test says stochastic at t within its level, and
    nearly all of it is spent (Ville's threshold alone spends about half)."""
    level = ALPHA / tests
    assert 0.9 * level < crossing_with(tolerance, level) <= level


@given(st.sampled_from([0.01, 0.02, 0.05, 0.1, 0.2]), st.integers(1, 60), st.integers(1, 5))
@settings(max_examples=40, deadline=None)
def test_a_tuned_threshold_is_below_villes_and_rises_as_the_level_falls(
    tolerance, tests, more
) -> None:
    """Never stricter than Ville's 1 / level, which it is past the first pairs; a lower level
    never gets a lower threshold (Holm's step-down needs a test's rejections nested)."""
    level = ALPHA / tests
    threshold = stochastic_threshold(tolerance, level, 1)
    assert threshold <= 1 / level
    assert stochastic_threshold(tolerance, ALPHA / (tests + more), 1) >= threshold
    tuned = math.ceil(TUNED_PAIRS / tolerance)
    assert stochastic_threshold(tolerance, level, tuned) == threshold
    assert stochastic_threshold(tolerance, level, tuned + 1) == 1 / level
