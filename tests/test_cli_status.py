"""Every status and reason code reached through the CLI, with its exit code."""

from __future__ import annotations

import json

import pytest

from conftest import ROUTES, stable_answers, suite_document, trial_records


def flipping(route: str, other: str, pairs: int = 13) -> list[str]:
    return [route, other] * pairs


def answers_with(**overrides) -> dict[str, list]:
    answers = stable_answers()
    answers.update(overrides)
    return answers


CASES = {
    "qualified": (stable_answers(), {}, [], 0, set()),
    "stochastic route": (
        answers_with(
            **{"deny-0": flipping("deny", "review"), "deny-1": flipping("deny", "review")}
        ),
        {},
        [],
        1,
        {"pooled_stochastic", "route_stochastic"},
    ),
    "stochastic target": (
        answers_with(**{"deny-0": flipping("deny", "review")}),
        {"targets": {"deny": 0.01}},
        [],
        1,
        {"target_stochastic"},
    ),
    "missing intended": (
        stable_answers(),
        {"allowed": [*ROUTES, "escalate"]},
        [],
        1,
        {"contract_missing_intended"},
    ),
    "missing observed": (
        answers_with(**{"review-0": ["approve"] * 26, "review-1": ["approve"] * 26}),
        {},
        [],
        1,
        {"contract_missing_observed"},
    ),
    "unknown decision": (
        answers_with(**{"deny-0": ["escalate"] * 26}),
        {},
        [],
        1,
        {"contract_unknown_decision"},
    ),
    "under-cased": (
        stable_answers(),
        {"minimum_cases": {"deny": 3}},
        [],
        1,
        {"contract_under_cased"},
    ),
    "dominant": (
        {case: ["approve"] * 26 for case in stable_answers()},
        {},
        [],
        1,
        {"dominant_decision", "contract_missing_observed"},
    ),
    "shared session": (
        stable_answers(),
        {},
        ["--isolation", "shared-session"],
        1,
        {"shared_session"},
    ),
    "pooled undecided": (stable_answers(pairs_per_case=2), {}, [], 3, {"pooled_undecided"}),
    "target undecided": (
        stable_answers(),
        {"targets": {"deny": 0.01}},
        [],
        3,
        {"target_undecided"},
    ),
    "errors": (answers_with(**{"deny-0": ["deny"] * 25 + [None]}), {}, [], 3, {"incomplete"}),
    "missing trials": (answers_with(**{"deny-0": ["deny"] * 20}), {}, [], 3, {"incomplete"}),
    "no repeats": (
        answers_with(**{"deny-0": ["deny"]}),
        {},
        [],
        3,
        {"no_repeats", "incomplete"},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_status_reason_and_exit_code(name, write, cli):
    answers, contract, flags, exit_code, codes = CASES[name]
    trials = write("trials.jsonl", trial_records(answers))
    suite = write("suite.json", suite_document(**contract))
    result = cli("assess", "--trials", trials, "--suite", suite, "--format", "json", *flags)
    assert result.exit_code == exit_code, result.output
    report = json.loads(result.stdout)
    assert report["status"] == {0: "qualified", 1: "rejected", 3: "inconclusive"}[exit_code]
    assert codes <= {reason["code"] for reason in report["reasons"]}
    if exit_code == 0:
        assert report["reasons"] == []
    assert report["next_steps"] and all(isinstance(step, str) for step in report["next_steps"])


def test_integrity_conflict(write, cli):
    records = trial_records(stable_answers())
    records.append({**records[0], "verdict": "deny"})  # same identity, another answer
    result = cli("assess", "--trials", write("t.jsonl", records), "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["trials"]["conflicts"] == 1
    assert "integrity_conflict" in {r["code"] for r in report["reasons"]}


def test_rejected_beats_inconclusive_and_every_reason_is_listed(write, cli):
    answers = answers_with(
        **{"deny-0": flipping("deny", "review"), "approve-0": ["approve"] * 25 + [None]}
    )
    result = cli(
        "assess",
        "--trials",
        write("t.jsonl", trial_records(answers)),
        "--suite",
        write("s.json", suite_document()),
        "--format",
        "json",
    )
    report = json.loads(result.stdout)
    codes = [reason["code"] for reason in report["reasons"]]
    assert result.exit_code == 1 and report["status"] == "rejected"
    assert "route_stochastic" in codes and "incomplete" in codes
    assert codes.index("route_stochastic") < codes.index("incomplete")


def judged(records: list[dict], failing_every: int | None) -> list[dict]:
    """Mark records passed, failing one in `failing_every` (None: all pass)."""
    for number, record in enumerate(records):
        record["passed"] = failing_every is None or number % failing_every != 0
    return records


@pytest.mark.parametrize(
    ("failing_every", "pairs", "exit_code", "code"),
    [(None, 13, 0, None), (3, 13, 1, "pass_rate_unreliable"), (None, 2, 3, "pass_rate_undecided")],
)
def test_pass_rate_reliability(write, cli, failing_every, pairs, exit_code, code):
    records = judged(trial_records(stable_answers(pairs_per_case=pairs)), failing_every)
    suite = {**suite_document(), "pass_rate": 0.9}
    result = cli(
        "assess",
        "--trials",
        write("t.jsonl", records),
        "--suite",
        write("s.json", suite),
        "--format",
        "json",
    )
    report = json.loads(result.stdout)
    assert report["pass_rate"]["required"] == 0.9 and report["policy"]["pass_rate"] == 0.9
    assert report["pass_rate"]["judged"] == len(records)
    codes = {reason["code"] for reason in report["reasons"]}
    if code is None:
        assert result.exit_code == 0 and report["pass_rate"]["result"] == "reliable"
    else:
        assert code in codes and result.exit_code == exit_code


def test_a_required_pass_rate_without_evaluator_verdicts_is_undecided(write, cli):
    trials = write("t.jsonl", trial_records(stable_answers()))
    result = cli("assess", "--trials", trials, "--pass-rate", "0.9", "--format", "json")
    report = json.loads(result.stdout)
    assert result.exit_code == 3 and "pass_rate_undecided" in {r["code"] for r in report["reasons"]}
