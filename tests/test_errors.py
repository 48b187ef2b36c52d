"""Errors name what is wrong in the caller's terms: Python arguments from the library, options
from the command line, one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

import verdictgate
from verdictgate import PlanError, Policy

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "examples" / "payment_suite.json"
PROMPTFOO = ROOT / "examples" / "promptfoo" / "promptfoo-sample.json"


def test_library_errors_name_arguments_never_flags():
    suite = verdictgate.load_suite(SUITE)
    with pytest.raises(PlanError) as budget:
        verdictgate.plan_run(suite, Policy(), budget=10)
    assert "raise budget, loosen tolerance, or set repeats explicitly" in str(budget.value)
    with pytest.raises(PlanError) as concurrency:
        verdictgate.run(lambda text: "x", suite, concurrency=0)
    assert str(concurrency.value) == "concurrency: must be at least 1, got 0"
    assert "--" not in str(budget.value) + str(concurrency.value)


def test_the_cli_names_the_same_errors_by_their_options(cli):
    budget = cli("plan", "--suite", str(SUITE), "--budget", "10")
    run = cli(
        "run",
        "--agent",
        "examples/payment_router.py:stable_router",
        "--suite",
        str(SUITE),
        "--budget",
        "10",
    )
    for result in (run,) if budget.exit_code == 0 else (budget, run):
        assert result.exit_code == 2
        assert "raise --budget, loosen --tolerance, or set --repeats explicitly" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_a_promptfoo_provider_that_matches_nothing_lists_the_ones_that_exist(cli):
    result = cli("assess", "--promptfoo", str(PROMPTFOO), "--provider", "nope")
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert "field --provider: no row matches 'nope'; the export has " in line
    for name in ("keyword-router", "stochastic-router", "file://provider.js", "file://provider.py"):
        assert name in line
