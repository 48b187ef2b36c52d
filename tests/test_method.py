"""`--method exact|wilson`: the rule that judges change rates, from every command and the suite,
named in the report, carried on the run span."""

from __future__ import annotations

from conftest import report_of, stable_answers, suite_document, trial_records
from verdictgate.assessment import Isolation
from verdictgate.otel import conventions as names
from verdictgate.otel.span_decoding import run_declaration
from verdictgate.otel.spans import run_attributes
from verdictgate.policy import Policy
from verdictgate.stats import Method, clopper_pearson_interval, wilson_interval
from verdictgate.suite import Contract, Suite

ROUTES = ("approve", "deny", "review")


def two_flips_in_eleven_pairs() -> dict[str, list[str]]:
    """One case whose 11 pairs flip twice: stochastic by Wilson alone, undecided by the exact
    rule."""
    answers = ["approve"] * 22
    answers[1] = answers[3] = "deny"
    return {"approve-0": answers}


def test_assess_judges_by_the_method_asked_for(cli, write) -> None:
    suite = write("suite.json", suite_document(cases_per_route=1))
    trials = write("trials.jsonl", trial_records(two_flips_in_eleven_pairs()))
    by = {}
    for method in ("wilson", "exact"):
        result = cli(
            "assess", "--trials", trials, "--suite", suite, "--method", method, "--format", "json"
        )
        report = report_of(result)
        pooled = report["stability"]["pooled"]
        by[method] = (report["policy"]["method"], pooled["ci_low"], pooled["ci_high"])
    assert by == {
        "wilson": ("wilson", *wilson_interval(2, 11)),
        "exact": ("exact", *clopper_pearson_interval(2, 11)),
    }


def test_a_suite_names_its_method_and_the_option_overrides_it(cli, write) -> None:
    document = suite_document(cases_per_route=1)
    document["method"] = "exact"
    suite = write("suite.json", document)
    trials = write("trials.jsonl", trial_records(stable_answers(cases_per_route=1)))
    report = report_of(cli("assess", "--trials", trials, "--suite", suite, "--format", "json"))
    assert report["policy"]["method"] == "exact"
    overridden = cli(
        "assess", "--trials", trials, "--suite", suite, "--method", "wilson", "--format", "json"
    )
    assert report_of(overridden)["policy"]["method"] == "wilson"
    document["method"] = "bayes"
    result = cli("assess", "--trials", trials, "--suite", write("bad.json", document))
    assert result.exit_code == 2 and "method" in result.stderr


def test_plan_shows_every_rule(cli) -> None:
    report = report_of(cli("plan", "--method", "exact", "--format", "json"))
    assert (report["method"], report["pairs_needed"]) == ("exact", 72)
    assert report["pairs_needed_by_method"] == {"wilson": 73, "exact": 72, "sequential": 76}
    assert "by the exact rule; wilson: 73" in cli("plan").stdout  # the default rule, then others


def test_the_run_span_carries_the_method() -> None:
    suite = Suite("gate", "approval_gate", (), Contract(frozenset(ROUTES)))
    attributes = run_attributes("r1", suite, Policy(method=Method.EXACT), 10, Isolation.UNKNOWN)
    assert attributes[names.METHOD] == "exact"
    assert run_declaration(attributes).policy.method is Method.EXACT
    del attributes[names.METHOD]  # a run span that does not say: judged by the default rule
    assert run_declaration(attributes).policy.method is Method.EXACT
