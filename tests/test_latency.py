"""Latency quantiles with distribution-free intervals, and a p95 threshold as an assertion."""

from __future__ import annotations

import json
import math
import random

import pytest

import verdictgate
from conftest import stable_answers, suite_document, trial_records
from verdictgate.stats import quantile_interval


@pytest.mark.parametrize("n", [40, 200, 1000])
def test_the_p95_interval_covers_the_true_quantile_in_at_least_95_percent_of_samples(n):
    rng = random.Random(20261130 + n)
    true_p95 = -math.log(0.05)  # of an exponential distribution with rate 1
    runs = 800
    covered = 0
    for _ in range(runs):
        sample = sorted(rng.expovariate(1.0) for _ in range(n))
        _, low, high = quantile_interval(sample, 0.95)
        covered += low <= true_p95 <= high
    rate = covered / runs
    print(f"n={n}: the 95% interval for p95 covered the true value in {rate:.1%} of {runs} samples")
    assert rate >= 0.94  # the promise (0.95), less simulation noise of about one point


def test_small_samples_leave_the_upper_end_open():
    _, low, high = quantile_interval([1.0, 2.0, 3.0], 0.95)
    assert high == math.inf and low <= 3.0
    assert quantile_interval([], 0.5) is None


def timed(records: list[dict], slow_every: int | None, slow_ms: float = 900.0) -> list[dict]:
    for number, record in enumerate(records):
        record["latency_ms"] = (
            slow_ms if slow_every and number % slow_every == 0 else 20.0 + number % 7
        )
    return records


@pytest.mark.parametrize(
    ("slow_every", "pairs", "exit_code", "result", "code"),
    [
        (None, 13, 0, "within", None),
        (4, 13, 1, "exceeded", "latency_exceeded"),
        (None, 2, 3, "undecided", "latency_undecided"),
    ],
)
def test_a_p95_threshold(write, cli, slow_every, pairs, exit_code, result, code):
    records = timed(trial_records(stable_answers(pairs_per_case=pairs)), slow_every)
    trials = write("t.jsonl", records)
    run = cli(
        "assess",
        "--trials",
        trials,
        "--suite",
        write("s.json", suite_document()),
        "--max-p95-ms",
        "100",
        "--format",
        "json",
    )
    report = json.loads(run.stdout)
    assert report["latency"]["trials"] == len(records) and report["latency"]["result"] == result
    if code:
        assert code in {r["code"] for r in report["reasons"]}
    assert run.exit_code == exit_code


def test_the_runner_times_every_call_from_its_decision_span():
    suite = verdictgate.Suite(
        "s", "p", (verdictgate.Case("c", "x", "a"),), verdictgate.Contract({"a"})
    )
    assessment = verdictgate.run(
        lambda text: "a", suite, repeats=6, policy=verdictgate.Policy(max_p95_ms=10_000)
    )
    assert assessment.latency is not None and assessment.latency.trials == 6
    assert assessment.latency.p50[0] > 0 and assessment.latency.result in ("within", "undecided")


def test_tool_calls_per_trial_for_tool_path_decisions(write, cli):
    records = [
        {
            "case": f"c{c}",
            "trial": t,
            "outcome": "decision",
            "tools": ["search", "book", "pay"][: 1 + (c + t) % 3],
        }
        for c in range(4)
        for t in range(10)
    ]
    report = json.loads(
        cli("assess", "--trials", write("t.jsonl", records), "--format", "json").stdout
    )
    calls = report["tool_calls"]
    assert (
        calls["trials"] == 40
        and calls["p50"]["estimate"] == 2.0
        and calls["p95"]["estimate"] == 3.0
    )
    labels = json.loads(
        cli(
            "assess",
            "--trials",
            write("l.jsonl", trial_records(stable_answers())),
            "--format",
            "json",
        ).stdout
    )
    assert labels["tool_calls"] is None
