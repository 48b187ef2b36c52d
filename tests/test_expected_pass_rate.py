"""A pass rate whose pass is the case's expected decision (`--pass-when expected`)."""

from __future__ import annotations

import pytest

from conftest import codes_of, report_of, stable_answers, suite_document, trial_records
from verdictgate import Policy, Suite, assess
from verdictgate.engine import assess_declared
from verdictgate.evidence import Evidence
from verdictgate.otel.span_decoding import run_declaration
from verdictgate.otel.spans import run_attributes
from verdictgate.policy import PassWhen
from verdictgate.suite import Case, Contract
from verdictgate.trial_model import Isolation, Trial


def wrong_deny_records() -> list[dict]:
    """Every case answers its own route on every trial, but case `deny-0` always says `review`:
    stable, and wrong."""
    answers = stable_answers(pairs_per_case=20)
    answers["deny-0"] = ["review"] * len(answers["deny-0"])
    return trial_records(answers)


def test_a_stable_wrong_route_qualifies_by_default(write, cli):
    trials, suite = write("t.jsonl", wrong_deny_records()), write("s.json", suite_document())
    result = cli("assess", "--trials", trials, "--suite", suite, "--format", "json")
    report = report_of(result)
    assert result.exit_code == 0 and report["status"] == "qualified"
    assert report["policy"]["pass_when"] == "evaluator" and report["pass_rate"]["judged"] == 0


@pytest.mark.parametrize("where", ["option", "suite"])
def test_a_stable_wrong_route_is_unreliable_when_passes_are_expected_decisions(write, cli, where):
    suite = suite_document() | ({"pass_when": "expected"} if where == "suite" else {})
    asked = ["--pass-when", "expected"] if where == "option" else []
    trials, suite_path = write("t.jsonl", wrong_deny_records()), write("s.json", suite)
    result = cli(
        "assess",
        "--trials",
        trials,
        "--suite",
        suite_path,
        "--pass-rate",
        "0.7",
        *asked,
        "--format",
        "json",
    )
    report = report_of(result)
    assert result.exit_code == 1 and codes_of(report) == {"route_pass_rate_unreliable"}
    rates = report["pass_rate"]
    assert report["policy"]["pass_when"] == "expected"
    assert (rates["passed"], rates["judged"], rates["result"]) == (200, 240, "reliable")
    assert rates["routes"]["deny"] | {"ci_low": 0, "ci_high": 0} == {
        "passed": 40,
        "judged": 80,
        "required": 0.7,
        "ci_low": 0,
        "ci_high": 0,
        "result": "unreliable",
        "unreliable_level": rates["routes"]["deny"]["unreliable_level"],
    }
    assert rates["routes"]["approve"]["result"] == "reliable"
    by_case = {case["case"]: case for case in report["cases"]}
    assert (by_case["deny-0"]["passed"], by_case["deny-0"]["verdict"]) == (0, "review")


def test_the_text_and_html_reports_name_the_rate_of_expected_decisions(write, cli):
    trials, suite = write("t.jsonl", wrong_deny_records()), write("s.json", suite_document())
    policy = ["--pass-rate", "0.7", "--pass-when", "expected"]
    text = cli("assess", "--trials", trials, "--suite", suite, *policy).stdout
    assert "pass rate (expected decisions)" in text and "200 of 240 passed" in text
    html = cli("assess", "--trials", trials, "--suite", suite, *policy, "--format", "html").stdout
    assert "pass rate (expected decisions)" in html
    plain = cli("assess", "--trials", trials, "--suite", suite, "--pass-rate", "0.7").stdout
    assert "expected decisions" not in plain


def test_an_evaluator_verdict_does_not_count_when_passes_are_expected_decisions():
    cases = (Case("c", "input c", "approve"),)
    trials = [Trial("c", i, "deny", passed=True) for i in range(80)]
    suite = Suite(cases=cases)
    by_evaluator = assess(trials, suite, Policy(pass_rate=0.5))
    by_expected = assess(trials, suite, Policy(pass_rate=0.5, pass_when=PassWhen.EXPECTED))
    assert (by_evaluator.passes.passed, by_evaluator.passes.judged) == (80, 80)
    assert (by_expected.passes.passed, by_expected.passes.judged) == (0, 80)


def test_errors_and_cases_without_an_expected_decision_are_not_judged():
    named = [Trial("named", i, "approve") for i in range(6)]
    errors = [Trial("named", i, None, error_type="timeout") for i in range(6, 8)]
    unnamed = [Trial("unnamed", i, "approve") for i in range(8)]
    suite = Suite(cases=(Case("named", "input", "approve"), Case("unnamed", "other")))
    policy = Policy(pass_rate=0.5, pass_when=PassWhen.EXPECTED)
    assessment = assess(named + errors + unnamed, suite, policy)
    assert (assessment.passes.passed, assessment.passes.judged) == (6, 6)


def test_a_path_whose_tied_steps_may_be_the_expected_one_is_not_judged():
    suite = Suite(cases=(Case("c", "input", "search > book"),))
    tied = [Trial("c", i, ("book", "search"), tied_steps=((0, 2),)) for i in range(4)]
    ordered = [Trial("c", i, ("search", "book")) for i in range(4, 8)]
    wrong = [Trial("c", i, ("book", "pay"), tied_steps=((0, 2),)) for i in range(8, 12)]
    assessment = assess(
        tied + ordered + wrong, suite, Policy(pass_rate=0.5, pass_when=PassWhen.EXPECTED)
    )
    assert (assessment.passes.passed, assessment.passes.judged) == (4, 8)


def test_the_run_span_carries_what_passes_so_a_receiver_judges_alike():
    suite = Suite(
        cases=(Case("a", "in a", "approve"), Case("d", "in d", "deny")),
        contract=Contract(allowed=frozenset({"approve", "deny"})),
    )
    policy = Policy(pass_rate=0.5, pass_when=PassWhen.EXPECTED)
    attributes = run_attributes("r", suite, policy, 40, Isolation.FRESH_SESSION)
    declaration = run_declaration(attributes)
    assert declaration.policy.pass_when is PassWhen.EXPECTED
    trials = [
        Trial(case, i, "approve", "r", expected=expected)
        for case, expected in (("a", "approve"), ("d", "deny"))
        for i in range(20)
    ]
    received = assess_declared(Evidence(trials), declaration)
    assert received.passes.route_rates["deny"].result.value == "unreliable"
    by_default = run_attributes("r", suite, Policy(), 40, Isolation.FRESH_SESSION)
    assert run_declaration(by_default).policy.pass_when is PassWhen.EVALUATOR


def test_an_unknown_pass_when_names_its_field(write, cli):
    trials = write("t.jsonl", wrong_deny_records())
    suite = write("s.json", suite_document() | {"pass_when": "judge"})
    result = cli("assess", "--trials", trials, "--suite", suite)
    assert result.exit_code == 2 and "pass_when" in result.stderr
    assert "evaluator or expected" in result.stderr


def test_pass_when_without_a_pass_rate_is_a_usage_error(write, cli):
    """What passes means nothing without a rate to judge: said, not silently ignored."""
    trials = write("t.jsonl", wrong_deny_records())
    result = cli("assess", "--trials", trials, "--pass-when", "expected")
    assert result.exit_code == 2 and "give --pass-rate too" in result.stderr
    judged = cli("assess", "--trials", trials, "--pass-when", "expected", "--pass-rate", "0.7")
    assert judged.exit_code != 2
