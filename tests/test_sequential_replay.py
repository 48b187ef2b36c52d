"""`assess --sequential`: stored trials replayed round by round under the sequential rule."""

from __future__ import annotations

import json

from conftest import report_of, stable_answers, suite_document, trial_records


def test_a_flipping_case_is_rejected_after_a_few_rounds(cli, write) -> None:
    answers = stable_answers(pairs_per_case=40, cases_per_route=2)  # 6 cases x 40 pairs
    for pair in range(40):
        answers["approve-0"][2 * pair + 1] = "deny"  # every pair of one case flips
    suite = write("suite.json", suite_document(cases_per_route=2))
    trials = write("trials.jsonl", trial_records(answers))
    result = cli("assess", "--trials", trials, "--suite", suite, "--sequential", "--format", "json")
    report = report_of(result)
    assert (result.exit_code, report["status"]) == (1, "rejected")
    stop = report["sequential"]
    assert stop["rounds"] < 10 and stop["calls_used"] == 12 * stop["rounds"]
    assert stop["calls_avoided"] == 480 - stop["calls_used"]
    assert report["policy"]["method"] == "sequential"
    assert "not made" in result.stderr


def test_a_stable_run_qualifies_once_the_pooled_e_value_certifies(cli, write) -> None:
    suite = write("suite.json", suite_document(cases_per_route=2))
    trials = write("trials.jsonl", trial_records(stable_answers(40, 2)))
    result = cli("assess", "--trials", trials, "--suite", suite, "--sequential", "--format", "json")
    report = report_of(result)
    assert report["status"] == "qualified"
    assert report["sequential"]["rounds"] == 13  # 78 pooled pairs: the first round >= 76
    assert report["sequential"]["calls_avoided"] == 480 - 156
    fixed = report_of(cli("assess", "--trials", trials, "--suite", suite, "--format", "json"))
    assert "sequential" not in fixed and fixed["status"] == "qualified"


def test_too_few_rounds_to_decide_say_so(cli, write) -> None:
    suite = write("suite.json", suite_document(cases_per_route=2))
    trials = write("trials.jsonl", trial_records(stable_answers(5, 2)))
    result = cli("assess", "--trials", trials, "--suite", suite, "--sequential", "--format", "json")
    stop = json.loads(result.stdout)["sequential"]
    assert result.exit_code == 3 and stop["calls_avoided"] == 0
    assert stop["reason"] == "every one of the 60 calls made" and stop["rounds"] == 5
