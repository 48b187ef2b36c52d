"""Wilson's statistics pinned to REPORT.md's known values (AgentVerity's rule, kept as
`--method wilson`), and their properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verdictgate.stats import (
    Method,
    Stability,
    change_rate,
    classify,
    pairs_needed,
    pairs_to_qualify,
    wilson_interval,
    z_score,
)

WILSON = Method.WILSON


def test_z_at_95_percent_is_the_exact_quantile():
    assert z_score(0.95) == pytest.approx(1.959963984540054, abs=1e-15)


@pytest.mark.parametrize(
    ("flips", "pairs", "low", "high"),
    [
        (0, 36, 0.0, 0.0964),
        (0, 72, 0.0, 0.0507),
        (0, 73, 0.0, 0.04999),
        (8, 13, 0.355, 0.823),
        (0, 13, 0.0, 0.228),
        (8, 78, 0.0529, 0.1895),
    ],
)
def test_known_intervals(flips, pairs, low, high):
    ci_low, ci_high = wilson_interval(flips, pairs)
    assert ci_low == pytest.approx(low, abs=6e-4)
    assert ci_high == pytest.approx(high, abs=6e-5 if high < 0.1 else 6e-4)


def test_the_73rd_pair_decides_at_five_percent():
    assert change_rate(0, 72, 0.05, method=WILSON).result is Stability.UNDECIDED
    assert change_rate(0, 73, 0.05, method=WILSON).result is Stability.DETERMINISTIC
    assert wilson_interval(0, 73)[1] < 0.05 < wilson_interval(0, 72)[1]


def test_known_results():
    assert change_rate(8, 13, 0.05, method=WILSON).result is Stability.STOCHASTIC
    assert change_rate(0, 13, 0.05, method=WILSON).result is Stability.UNDECIDED
    assert change_rate(8, 78, 0.05, method=WILSON).result is Stability.STOCHASTIC
    assert change_rate(0, 0, 0.05, method=WILSON).result is Stability.UNDECIDED
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(("tolerance", "pairs"), [(0.05, 73), (0.10, 35), (0.01, 381)])
def test_pairs_needed(tolerance, pairs):
    assert pairs_needed(tolerance, method=WILSON) == pairs


@pytest.mark.parametrize(("flips", "pairs", "total"), [(1, 73, 110), (8, 78, 311)])
def test_pairs_to_qualify(flips, pairs, total):
    assert pairs_to_qualify(flips, pairs, 0.05, method=WILSON) == total


def test_strict_inequalities_at_the_tolerance():
    assert classify(0.0, 0.05, 0.05, 10) is Stability.UNDECIDED
    assert classify(0.05, 0.2, 0.05, 10) is Stability.UNDECIDED
    assert classify(0.0, 0.0499, 0.05, 10) is Stability.DETERMINISTIC
    assert classify(0.0501, 0.2, 0.05, 10) is Stability.STOCHASTIC


counts = st.integers(min_value=1, max_value=5000).flatmap(
    lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n))
)
confidences = st.sampled_from([0.8, 0.9, 0.95, 0.99, 0.999])


@given(counts, confidences)
def test_interval_is_ordered_contains_the_rate_and_has_exact_edges(count, confidence):
    flips, pairs = count
    low, high = wilson_interval(flips, pairs, confidence)
    assert 0.0 <= low <= flips / pairs <= high <= 1.0
    assert (low == 0.0) == (flips == 0)
    assert (high == 1.0) == (flips == pairs)


@given(counts, confidences)
def test_bounds_are_monotonic(count, confidence):
    flips, pairs = count
    low, high = wilson_interval(flips, pairs, confidence)
    if flips < pairs:  # one more flip in the same pairs moves both bounds up
        up_low, up_high = wilson_interval(flips + 1, pairs, confidence)
        assert up_low >= low and up_high >= high
    _, more_high = wilson_interval(flips, pairs + 1, confidence)
    assert more_high <= high  # one more agreeing pair lowers the upper bound
    wider = wilson_interval(flips, pairs, min(0.9999, confidence + 0.0005))
    assert wider[0] <= low and wider[1] >= high


@given(st.floats(min_value=0.003, max_value=0.5), confidences)
def test_pairs_needed_is_the_smallest_sufficient_number(tolerance, confidence):
    n = pairs_needed(tolerance, confidence, WILSON)
    assert wilson_interval(0, n, confidence)[1] < tolerance
    assert n == 1 or wilson_interval(0, n - 1, confidence)[1] >= tolerance


@given(
    st.integers(min_value=0, max_value=30),
    st.integers(min_value=0, max_value=400),
    st.floats(min_value=0.02, max_value=0.3),
)
def test_pairs_to_qualify_is_the_smallest_total(flips, extra, tolerance):
    pairs = flips + extra
    total = pairs_to_qualify(flips, pairs, tolerance, method=WILSON)
    assert total is not None and total >= pairs
    assert wilson_interval(flips, total)[1] < tolerance
    if total > pairs:
        assert wilson_interval(flips, total - 1)[1] >= tolerance


def test_invalid_counts_are_refused():
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    with pytest.raises(ValueError):
        pairs_needed(0.0)
