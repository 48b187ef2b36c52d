"""The report's case-level verdict: a claim about inputs not tested, with the case as the unit."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import codes_of, report_of, stable_answers, suite_document, trial_records
from verdictgate import Claim, Contract, Policy, Suite
from verdictgate.assessment import Isolation
from verdictgate.otel import conventions as names
from verdictgate.otel.span_decoding import run_declaration
from verdictgate.otel.spans import run_attributes
from verdictgate.sequential.rule import sequential_policy

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ROUTES = ("approve", "deny", "review")


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
    trials = write(
        "trials.jsonl", trial_records(stable_answers(pairs_per_case=1, cases_per_route=26))
    )
    report = report_of(cli("assess", "--trials", trials, "--suite", suite, "--format", "json"))
    assert (report["population"]["cases"], report["population"]["result"]) == (78, "deterministic")


def test_the_claim_says_which_verdict_gates_the_status(cli, write):
    suite = write("suite.json", suite_document(cases_per_route=2))
    trials = write("trials.jsonl", trial_records(stable_answers(13, 2)))  # 6 cases, 78 pairs
    tested = report_of(cli("assess", "--trials", trials, "--suite", suite, "--format", "json"))
    assert (tested["status"], tested["policy"]["claim"]) == ("qualified", "tested")
    assert "the tested cases' change rate" in tested["headline"]
    result = cli(
        "assess", "--trials", trials, "--suite", suite, "--claim", "population", "--format", "json"
    )
    population = report_of(result)
    assert result.exit_code == 3  # inconclusive: six cases say little about new inputs
    assert (population["status"], population["policy"]["claim"]) == ("inconclusive", "population")
    assert codes_of(population) == {"population_undecided"}
    assert any("76 cases" in step for step in population["next_steps"])
    junit = cli(
        "assess", "--trials", trials, "--suite", suite, "--claim", "population", "--format", "junit"
    ).stdout
    pooled = junit[junit.index('name="stability.pooled"') :]
    assert pooled.index("<skipped") < pooled.index("</testcase>")  # reported, not gating


def test_a_population_claim_qualifies_on_enough_cases_and_rejects_on_flaky_ones(cli, write):
    document = suite_document(cases_per_route=26)  # 78 cases
    document["claim"] = "population"
    suite = write("suite.json", document)
    calm = write("calm.jsonl", trial_records(stable_answers(pairs_per_case=1, cases_per_route=26)))
    report = report_of(cli("assess", "--trials", calm, "--suite", suite, "--format", "json"))
    assert (report["status"], report["policy"]["claim"]) == ("qualified", "population")
    assert report["headline"].startswith("Qualified: 78 cases, 0 changed; new inputs")
    answers = stable_answers(pairs_per_case=2, cases_per_route=26)
    for case in list(answers)[::3]:  # a third of the cases flip in both their pairs
        route = answers[case][0]
        answers[case][1] = answers[case][3] = "deny" if route != "deny" else "approve"
    flaky = write("flaky.jsonl", trial_records(answers))
    rejected = report_of(cli("assess", "--trials", flaky, "--suite", suite, "--format", "json"))
    assert rejected["population"]["result"] == "stochastic"
    assert "population_stochastic" in codes_of(rejected)
    assert "pooled_stochastic" not in codes_of(rejected)  # the pooled verdict is not the claim
    document["claim"] = "everyone"
    bad = cli("assess", "--trials", calm, "--suite", write("bad.json", document))
    assert bad.exit_code == 2 and "claim" in bad.stderr


def test_the_run_span_carries_the_claim_and_a_sequential_run_refuses_a_population_claim(cli):
    suite = Suite("gate", "approval_gate", (), Contract(frozenset(ROUTES)))
    policy = Policy(claim=Claim.POPULATION)
    attributes = run_attributes("r1", suite, policy, 10, Isolation.UNKNOWN)
    assert attributes[names.CLAIM] == "population"
    assert run_declaration(attributes).policy.claim is Claim.POPULATION
    del attributes[names.CLAIM]  # a run span from before the claim existed
    assert run_declaration(attributes).policy.claim is Claim.TESTED
    with pytest.raises(ValueError, match="sized in advance"):
        sequential_policy(policy, suite)
    result = cli(
        "run",
        "--agent",
        f"{EXAMPLES / 'payment_router.py'}:stable_router",
        "--suite",
        str(EXAMPLES / "payment_suite.json"),
        "--sequential",
        "--claim",
        "population",
    )
    assert result.exit_code == 2 and "sized in advance" in result.stderr


def split_into_two_runs(answers: dict[str, list[str]]) -> list[dict]:
    """The same trials as two runs: each case's first half of pairs in run a, the rest in b."""
    records = []
    for case, decisions in answers.items():
        half = len(decisions) // 4 * 2
        records += trial_records({case: decisions[:half]}, run="a")
        records += trial_records({case: decisions[half:]}, run="b")
    return records


def test_a_case_in_two_runs_is_one_case_with_more_pairs(cli, write):
    """40 cases of 26 pairs, one flip among them: inconclusive for new inputs (40 cases) whether
    the 1,040 pairs came as one run or as two; counting (run, case) would certify 80 cases."""
    document = suite_document(cases_per_route=14)
    document["cases"] = document["cases"][:40]
    suite = write("suite.json", {**document, "claim": "population"})
    answers = dict(list(stable_answers(pairs_per_case=26, cases_per_route=14).items())[:40])
    answers["approve-0"][1] = "deny"  # one flip in run a: that case's rate is 1 / 26, not 1 / 13
    one = write("one.jsonl", trial_records(answers))
    two = write("two.jsonl", split_into_two_runs(answers))
    reports = [
        report_of(cli("assess", "--trials", path, "--suite", suite, "--format", "json"))
        for path in (one, two)
    ]
    assert reports[0]["population"] == reports[1]["population"]
    assert reports[0]["population"]["cases"] == 40 and reports[0]["status"] == "inconclusive"
    assert len(reports[1]["cases"]) == 80  # each (run, case) is still listed on its own
    assert sum(c["pairs"] for c in reports[1]["cases"]) == 1040
