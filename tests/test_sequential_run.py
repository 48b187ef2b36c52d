"""`run --sequential`: collected round by round, stopped as soon as the sequential rule decides."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import verdictgate
from conftest import report_of
from verdictgate import PlanError, Status
from verdictgate.admission import RULES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SUITE = str(EXAMPLES / "payment_suite.json")


def run(cli, router: str, *options: str) -> dict:
    result = cli(
        "run",
        "--agent",
        f"{EXAMPLES / 'payment_router.py'}:{router}",
        "--suite",
        SUITE,
        "--isolation",
        "fresh-instance",
        "--format",
        "json",
        *options,
    )
    return report_of(result)


REJECTING = {rule.code.value for rule in RULES if rule.effect is Status.REJECTED}


def rejecting(report: dict) -> set[str]:
    """The codes of the reasons that reject the run."""
    return {reason["code"] for reason in report["reasons"]} & REJECTING


def test_the_flipping_router_is_rejected_for_its_reason_at_a_fraction_of_the_calls(cli) -> None:
    fixed = run(cli, "flipping_router")
    sequential = run(cli, "flipping_router", "--sequential")
    assert fixed["status"] == sequential["status"] == "rejected"
    assert rejecting(sequential) and rejecting(sequential) <= rejecting(fixed)
    assert sequential["trials"]["received"] == sequential["trials"]["expected"]  # complete
    assert sequential["trials"]["received"] < fixed["trials"]["received"]
    assert sequential["policy"]["method"] == "sequential"


def seeded_flipping_router(seed: int):
    """The demo's flipping router with a seeded coin, so that a test gets the same runs."""
    from payment_router import route  # examples/, on the path below

    coin = random.Random(seed)

    def decide(message: str) -> str:
        label = route(message)
        if label == "card_security":
            return coin.choice(["card_security", "merchant_dispute"])
        return label

    return decide


def test_a_sequential_run_needs_a_median_of_a_tenth_of_the_fixed_calls(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    suite = verdictgate.load_suite(SUITE)
    fixed_calls = verdictgate.plan_run(suite, verdictgate.Policy()).calls  # 856
    calls = []
    for seed in range(15):
        assessment = verdictgate.run(seeded_flipping_router(seed), suite, sequential=True)
        assert assessment.status is Status.REJECTED
        assert "target_stochastic" in assessment.reason_codes
        calls.append(assessment.trials.received)
    calls.sort()
    assert calls[7] <= 0.15 * fixed_calls, calls


def test_the_stable_router_qualifies(cli) -> None:
    report = run(cli, "stable_router", "--sequential")
    assert report["status"] == "qualified"
    assert report["stability"]["pooled"]["result"] == "deterministic"


def test_what_a_sequential_run_cannot_be_is_refused_before_any_call() -> None:
    suite = verdictgate.load_suite(SUITE)
    called: list[str] = []
    for options in ({"repeats": 4}, {"quality_gate": True}, {"max_pairs": 0}):
        with pytest.raises(PlanError):
            verdictgate.run(called.append, suite, sequential=True, **options)
    assert called == []


def test_a_route_target_beyond_the_rules_reach_is_refused_before_any_call(cli, write) -> None:
    suite = verdictgate.load_suite(SUITE)
    wide = json.loads(Path(SUITE).read_text())
    wide["contract"]["targets"] = {"card_security": 0.3}
    path = write("wide.json", wide)
    called: list[str] = []
    with pytest.raises(PlanError, match="target"):
        verdictgate.run(called.append, verdictgate.load_suite(path), sequential=True)
    assert called == [] and suite.contract.targets  # the bundled suite keeps its own
    trials = write("t.jsonl", [{"case": "c", "trial": 0, "outcome": "decision", "verdict": "x"}])
    result = cli("assess", "--trials", trials, "--suite", path, "--sequential")
    assert result.exit_code == 2 and "target below 0.25" in result.stderr


def test_plan_beyond_the_sequential_rules_reach(cli) -> None:
    result = cli("plan", "--tolerance", "0.3", "--format", "json")
    assert result.exit_code == 0 and "sequential" not in report_of(result)["pairs_needed_by_method"]


def test_an_undecided_sequential_run_can_be_continued(cli, tmp_path) -> None:
    first_file, all_file = str(tmp_path / "first.jsonl"), str(tmp_path / "all.jsonl")
    first = run(
        cli, "stable_router", "--sequential", "--max-pairs", "24", "--trials-out", first_file
    )
    assert first["status"] == "inconclusive" and first["trials"]["received"] == 12 * 24
    resumed = run(
        cli, "stable_router", "--sequential", "--resume", first_file, "--trials-out", all_file
    )
    assert resumed["status"] == "qualified" and resumed["run"]["id"] != first["run"]["id"]
    assert resumed["trials"]["received"] == resumed["sequential"]["calls_used"] == 4608
    assert len(Path(all_file).read_text().splitlines()) == 4608  # every trial, old and new


def test_continuing_calls_only_the_rounds_after_the_stored_ones(monkeypatch, tmp_path) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from payment_router import route

    suite = verdictgate.load_suite(SUITE)
    calls: list[str] = []
    first = verdictgate.run(route, suite, sequential=True, max_pairs=24)
    stored = [
        verdictgate.Trial(c.case, i, c.verdict, first.run.id, c.route)
        for c in first.cases
        for i in range(c.trials)
    ]
    again = verdictgate.run(
        lambda text: calls.append(text) or route(text), suite, sequential=True, resume=stored
    )
    assert again.status is Status.QUALIFIED and again.run.id != first.run.id
    assert len(calls) == again.trials.received - len(stored) == 4608 - 288


def test_what_cannot_be_continued_is_refused_before_any_call(cli, tmp_path) -> None:
    decided = str(tmp_path / "decided.jsonl")
    run(cli, "flipping_router", "--sequential", "--trials-out", decided)
    result = cli(
        "run",
        "--agent",
        f"{EXAMPLES / 'payment_router.py'}:stable_router",
        "--suite",
        SUITE,
        "--sequential",
        "--resume",
        decided,
    )
    assert result.exit_code == 2 and "already decided" in result.stderr
    short = str(tmp_path / "short.jsonl")
    run(cli, "stable_router", "--sequential", "--max-pairs", "24", "--trials-out", short)
    lines = Path(short).read_text().splitlines()
    Path(short).write_text("\n".join(lines[:-1]) + "\n")  # the last round lacks one trial
    for options in (("--sequential",), ()):
        result = cli(
            "run",
            "--agent",
            f"{EXAMPLES / 'payment_router.py'}:stable_router",
            "--suite",
            SUITE,
            "--resume",
            short,
            *options,
        )
        assert result.exit_code == 2, result.stderr
    assert (
        "complete round"
        in cli(
            "run",
            "--agent",
            f"{EXAMPLES / 'payment_router.py'}:stable_router",
            "--suite",
            SUITE,
            "--resume",
            short,
            "--sequential",
        ).stderr
    )
