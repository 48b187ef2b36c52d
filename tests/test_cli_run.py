"""`plan` and `run` through the CLI, on the bundled payment-dispute examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SUITE = str(EXAMPLES / "payment_suite.json")
ROUTER = EXAMPLES / "payment_router.py"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--tolerance", "0.05"], "with no flip, 72 pairs at 0.05 (144 calls"),
        (["--precision", "cheap"], "36 pairs at 0.1"),
        (["--precision", "strict"], "368 pairs at 0.01"),
        (["--observed", "1/73"], "1/73 -> 110 pairs in total: 37 more pairs (74 calls)"),
        (["--observed", "8/78"], "8/78 -> 312 pairs in total"),
        (["--suite", SUITE], "12 cases x 12/368 trials = 856 calls"),
        (["--method", "wilson", "--tolerance", "0.05"], "73 pairs at 0.05 (146 calls"),
        (["--method", "wilson", "--observed", "8/78"], "8/78 -> 311 pairs in total"),
        (["--method", "wilson", "--suite", SUITE], "12 cases x 14/382 trials = 904 calls"),
    ],
)
def test_plan(cli, args, expected):
    result = cli("plan", *args)
    assert result.exit_code == 0
    assert expected in result.stdout


@pytest.mark.parametrize(
    ("args", "first"),
    [
        (["--observed", "1/73"], "1/73 -> 110 pairs in total: 37 more pairs (74 calls)"),
        (["--observed", "8/78"], "8/78 -> 312 pairs in total"),
        (["--pass-rate", "0.95"], "72 judged trials, all passing, show a pass rate above 0.95"),
        (["--observed", "1/73", "--pass-rate", "0.95"], "1/73 -> 110 pairs in total"),
    ],
)
def test_plan_answers_what_was_asked_on_its_first_line(cli, args, first):
    lines = cli("plan", *args).stdout.splitlines()
    assert lines[0].startswith(first)
    assert any(
        line.startswith("with no flip, 72 pairs at 0.05") for line in lines[1:]
    )  # the pricing after


def test_plan_as_json_and_with_a_budget(cli):
    document = json.loads(cli("plan", "--suite", SUITE, "--format", "json").stdout)
    assert document["pairs_needed"] == 72 and document["suite"]["calls"] == 856
    refused = cli("plan", "--suite", SUITE, "--budget", "500")
    assert refused.exit_code == 2 and "needs 856 calls" in refused.stderr


@pytest.mark.parametrize(
    ("factory", "exit_code", "codes"),
    [
        ("stable_router", 0, set()),
        ("flipping_router", 1, {"target_stochastic", "pooled_stochastic"}),
        ("collapsed_router", 1, {"dominant_decision", "contract_missing_observed"}),
    ],
)
def test_run_the_examples(cli, tmp_path, factory, exit_code, codes):
    trials = tmp_path / "trials.jsonl"
    result = cli(
        "run",
        "--agent",
        f"{ROUTER}:{factory}",
        "--suite",
        SUITE,
        "--isolation",
        "fresh-instance",
        "--concurrency",
        "4",
        "--format",
        "json",
        "--trials-out",
        str(trials),
    )
    assert result.exit_code == exit_code, result.output
    report = json.loads(result.stdout)
    assert codes <= {reason["code"] for reason in report["reasons"]}
    assert report["trials"]["received"] == 856 == len(trials.read_text().splitlines())
    again = cli("assess", "--trials", str(trials), "--suite", SUITE, "--format", "json")
    reassessed = json.loads(again.stdout)
    assert again.exit_code == exit_code
    assert reassessed["run"]["isolation"] == "fresh-instance"  # the file keeps what run declared
    for field in ("stability", "coverage", "trials", "latency", "next_steps"):
        assert reassessed[field] == report[field], field


def test_run_with_the_quality_gate(cli):
    result = cli(
        "run",
        "--agent",
        f"{ROUTER}:collapsed_router",
        "--suite",
        SUITE,
        "--quality-gate",
        "--format",
        "json",
    )
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["reasons"][0]["code"] == "quality_failed"
    assert report["trials"]["received"] == 12


def test_run_with_relations_reports_each(cli):
    result = cli(
        "run",
        "--agent",
        f"{ROUTER}:stable_router",
        "--suite",
        SUITE,
        "--relation",
        "case",
        "--relation",
        "punctuation",
        "--format",
        "json",
    )
    report = json.loads(result.stdout)
    assert {r["name"]: r["status"] for r in report["relations"]} == {
        "case": "held",
        "punctuation": "held",
    }
    assert result.exit_code == 0
