"""The report's case-level verdict: a claim about inputs not tested, with the case as the unit."""

from __future__ import annotations

from conftest import report_of, stable_answers, suite_document, trial_records


def test_six_cases_of_thirteen_pairs_are_too_few_for_a_claim_about_new_inputs(cli, write):
    answers = stable_answers(pairs_per_case=13, cases_per_route=2)  # 6 cases
    flaky = answers["approve-0"]
    for pair in range(8):  # 8 of its 13 pairs flip
        flaky[2 * pair + 1] = "deny"
    suite = write("suite.json", suite_document(cases_per_route=2))
    trials = write("trials.jsonl", trial_records(answers))
    report = report_of(cli("assess", "--trials", trials, "--suite", suite, "--format", "json"))
    assert report["population"]["cases"] == 6
    assert report["population"]["result"] == "undecided"
    assert report["population"]["cases_needed"] == 76
    assert report["population"]["e_stoch"] < 40 and report["population"]["e_det"] < 40
    clean = write("clean.jsonl", trial_records(stable_answers(13, 2)))
    calm = report_of(cli("assess", "--trials", clean, "--suite", suite, "--format", "json"))
    assert calm["population"]["result"] == "undecided"  # 6 cases, however many pairs
    assert calm["stability"]["pooled"]["result"] == "deterministic"  # the tested cases: shown


def test_enough_cases_that_never_flip_certify_new_inputs(cli, write):
    document = suite_document(cases_per_route=26)  # 78 cases
    suite = write("suite.json", document)
    trials = write("trials.jsonl", trial_records(stable_answers(pairs_per_case=1,
                                                                cases_per_route=26)))  # fmt: skip
    report = report_of(cli("assess", "--trials", trials, "--suite", suite, "--format", "json"))
    assert (report["population"]["cases"], report["population"]["result"]) == (78, "deterministic")
