"""The sequential rule's expected cost, computed exactly: checked against the rule itself, pair
by pair, and against the figures the issue measured."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binomial_sums import looked_at_every_pair
from conftest import report_of
from verdictgate.eprocess import sequential_evalues
from verdictgate.sequential.design import default_max_pairs, sequential_design
from verdictgate.stats import Stability


def brute_force(tolerance: float, p: float, cap: int) -> tuple[float, float, float]:
    """Expected pairs, P(deterministic), P(stochastic): every (pairs, flips) judged afresh."""
    return looked_at_every_pair(lambda x, n: sequential_evalues(x, n, tolerance).result, p, cap)


@settings(max_examples=40, deadline=None)
@given(
    st.floats(0.03, 0.24),
    st.floats(0.0, 1.0),
    st.integers(1, 120),
)
def test_the_forward_pass_equals_judging_every_count(tolerance, p, cap) -> None:
    design = sequential_design(tolerance, p, cap)
    expected, det, stoch = brute_force(tolerance, p, cap)
    assert design.expected_pairs == pytest.approx(expected, abs=1e-9 * cap)
    assert design.deterministic == pytest.approx(det, abs=1e-9)
    assert design.stochastic == pytest.approx(stoch, abs=1e-9)
    assert design.deterministic + design.stochastic + design.undecided == pytest.approx(1.0)


def test_the_figures_at_five_percent() -> None:
    perfect = sequential_design(0.05, 0.0)
    assert (perfect.expected_pairs, perfect.deterministic) == (76.0, 1.0)  # the floor is 72
    flaky = sequential_design(0.05, 0.2)
    assert flaky.expected_pairs == pytest.approx(33.0, abs=0.05)  # 66 calls instead of 146
    at_tolerance = sequential_design(0.05, 0.05)
    assert at_tolerance.deterministic <= 0.025 and at_tolerance.stochastic <= 0.025
    assert default_max_pairs(0.05) == 300


def test_a_seeded_simulation_agrees_with_the_exact_figure() -> None:
    rng, t, p, runs = random.Random(14), 0.05, 0.1, 4000
    design = sequential_design(t, p)
    stopped = []
    for _ in range(runs):
        flips = 0
        for n in range(1, default_max_pairs(t) + 1):
            flips += rng.random() < p
            if sequential_evalues(flips, n, t).result is not Stability.UNDECIDED:
                break
        stopped.append(n)
    mean = sum(stopped) / runs
    spread = (sum((s - mean) ** 2 for s in stopped) / runs) ** 0.5
    assert abs(mean - design.expected_pairs) < 4 * spread / runs**0.5


def test_plan_prints_the_design_beside_the_fixed_rules(cli) -> None:
    report = report_of(cli("plan", "--format", "json"))
    chances = [d["flip_chance"] for d in report["sequential_design"]]
    assert chances == [0.0, 0.0125, 0.05, 0.1, 0.2]
    assert report["sequential_design"][0]["expected_pairs"] == 76.0
    assert report["pairs_needed_by_method"]["wilson"] == 73
    assert report["population_cases_needed"] == 76
    text = cli("plan").stdout
    assert "expected pairs" in text and "76 cases" in text
    beyond = report_of(cli("plan", "--tolerance", "0.3", "--format", "json"))
    assert "sequential_design" not in beyond


def test_plan_prices_a_suites_sequential_run_round_by_round(cli) -> None:
    report = report_of(cli("plan", "--suite", "examples/payment_suite.json", "--format", "json"))
    # card_security: a 1% target needs 384 agreeing pairs from its 2 cases, 192 rounds of 24
    assert report["suite"]["sequential"] == {"calls_to_certify": 4608, "most_calls": 18000}
    assert report["suite"]["calls"] == 856
    tiny = report_of(cli("plan", "--tolerance", "0.0001", "--format", "json"))
    assert "sequential_design" not in tiny  # 150,000 pairs: beyond what plan prices exactly
