"""Infrastructure faults (a judge or embedding that raises, a relation check that raises) are
error trials or errored relations: the run is incomplete, never rejected for them. And coverage
without a declared contract requires nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import verdictgate
from conftest import codes_of, report_of, suite_document
from otel_support import MemoryTelemetry
from verdictgate import Status, Suite
from verdictgate.assessment import RelationResult
from verdictgate.otel import conventions as names
from verdictgate.otel.span_decoding import decode_results, run_declaration
from verdictgate.reports.checks import CheckResult, checks
from verdictgate.suite import Case, Contract
from verdictgate.tiers.relations import Relation
from verdictgate.tiers.semantic import SemanticCheck
from verdictgate.trial_model import Trial

ROUTES = ("approve", "deny", "review")
SECRET = "do-not-log-this-message"

AGENTS = f'''
def router():
    """Answers the route named in the request, with a short reply."""
    def answer(text):
        route = next(r for r in ("approve", "deny", "review") if r in text.lower())
        return {{"verdict": route, "text": "reply about " + route}}
    return answer

def lowercase_crasher():
    """Routes by keyword, but crashes on an all-lower-case request (the `case` relation)."""
    def answer(text):
        if text == text.lower():
            raise RuntimeError("{SECRET}: " + text)
        return next(r for r in ("approve", "deny", "review") if r in text.lower())
    return answer

def judge_down(output, given):
    raise ConnectionError("{SECRET}: cannot grade " + str(given))

def judge_flaky_on_deny(output, given):
    if output["verdict"] == "deny":
        raise TimeoutError("{SECRET}")
    return True
'''


@pytest.fixture
def agents(tmp_path: Path) -> str:
    path = tmp_path / "fault_agents.py"
    path.write_text(AGENTS)
    return str(path)


def gate_suite(inputs: str = "please {route} request {n}", contract: bool = True) -> Suite:
    return Suite(
        name="gate",
        point="approval_gate",
        cases=tuple(
            Case(f"{route}-{n}", inputs.format(route=route, n=n), route)
            for route in ROUTES
            for n in range(2)
        ),
        contract=Contract(frozenset(ROUTES)) if contract else Contract(),
    )


def keyword_gate(text: str) -> str:
    return next(route for route in ROUTES if route in text.lower())


def fault_records(caplog, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and r.levelno == logging.WARNING]


# -- the judge ------------------------------------------------------------------------------


def test_a_judge_that_is_down_makes_every_trial_an_error_not_a_failure(
    cli, agents, title_suite, caplog, tmp_path
):
    caplog.set_level(logging.WARNING, logger="verdictgate")
    trials = str(tmp_path / "trials.jsonl")
    result = cli(
        "run",
        "--agent",
        f"{agents}:router",
        "--suite",
        title_suite,
        "--judge",
        f"{agents}:judge_down",
        "--trials-out",
        trials,
        "--format",
        "json",
    )
    report = report_of(result)
    assert result.exit_code == 3 and report["status"] == "inconclusive"
    assert codes_of(report) == {"incomplete", "pooled_undecided"}  # no contract_*, no rejection
    # the contract routes are not shown reached, but a judge fault is no evidence against them
    assert report["coverage"]["missing_observed"] == ["approve", "deny", "review"]
    assert report["trials"]["errors"] == report["trials"]["received"] == 144
    assert report["trials"]["error_types"] == {"judge:ConnectionError": 144}
    assert report["pass_rate"]["judged"] == 0 and report["pass_rate"]["passed"] == 0
    records = fault_records(caplog, "verdictgate.tiers.cascade")
    assert len(records) == 1  # 144 faults, one line
    message = records[0].getMessage()
    assert "judge" in message and "ConnectionError" in message
    assert SECRET not in caplog.text and "request" not in message.lower()
    assert SECRET not in result.stdout
    junit = cli("assess", "--trials", trials, "--suite", title_suite, "--format", "junit")
    assert junit.exit_code == 3  # the trials file keeps the fault's error type
    assert "judge:ConnectionError x144" in junit.stdout
    assert '<testcase classname="verdictgate.approval_gate" name="contract">\n      <error' in (
        junit.stdout
    )


def test_a_judge_that_raises_on_some_calls_errors_only_those_trials(
    cli, agents, title_suite, caplog
):
    caplog.set_level(logging.WARNING, logger="verdictgate")
    result = cli(
        "run",
        "--agent",
        f"{agents}:router",
        "--suite",
        title_suite,
        "--judge",
        f"{agents}:judge_flaky_on_deny",
        "--format",
        "json",
    )
    report = report_of(result)
    assert result.exit_code == 3 and report["status"] == "inconclusive"
    assert codes_of(report) == {"incomplete", "pooled_undecided"}  # deny unreached: not a verdict
    assert report["trials"]["error_types"] == {"judge:TimeoutError": 48}  # 2 deny cases x 24
    assert (report["pass_rate"]["passed"], report["pass_rate"]["judged"]) == (96, 96)
    by_case = {case["case"]: case for case in report["cases"]}
    assert by_case["deny-0"]["errors"] == 24 and by_case["approve-0"]["errors"] == 0
    assert [r.getMessage() for r in fault_records(caplog, "verdictgate.tiers.cascade")] == [
        "the judge tier raised TimeoutError: its trials are recorded as errors "
        "(judge:TimeoutError), not as failures; logged once per error type"
    ]


def test_the_quality_gate_does_not_reject_first_answers_the_judge_could_not_grade():
    def down(output, given):
        raise ConnectionError(SECRET)

    calls = []

    def gate(text: str) -> str:
        calls.append(text)
        return keyword_gate(text)

    assessment = verdictgate.run(gate, gate_suite(), quality_gate=True, judge=down)
    assert assessment.quality_failed == ()
    assert "quality_failed" not in assessment.reason_codes
    assert assessment.status is Status.INCONCLUSIVE and "incomplete" in assessment.reason_codes
    assert len(calls) == assessment.trials.errors == 144  # it went on to the repeats
    assert dict(assessment.trials.error_types) == {"judge:ConnectionError": 144}


def test_the_quality_gate_still_stops_on_a_judged_failure_next_to_a_fault():
    def judge(output, given):
        if output == "approve":
            raise ConnectionError(SECRET)
        return output != "deny"  # deny answers are judged bad

    assessment = verdictgate.run(keyword_gate, gate_suite(), quality_gate=True, judge=judge)
    assert assessment.quality_failed == ("deny-0", "deny-1")
    assert assessment.status is Status.REJECTED and assessment.trials.received == 6
    assert dict(assessment.trials.error_types) == {"judge:ConnectionError": 2}


def test_each_tiers_instance_logs_each_error_type_once(caplog):
    caplog.set_level(logging.WARNING, logger="verdictgate.tiers.cascade")
    kinds = iter([ConnectionError, ConnectionError, ValueError, ConnectionError, ValueError])

    def judge(output, given):
        raise next(kinds)(SECRET)

    tiers = verdictgate.tiers.cascade.Tiers(judge=judge)
    outcomes = [tiers.check("approve", "input text") for _ in range(5)]
    assert [o.error for o in outcomes] == [
        "judge:ConnectionError",
        "judge:ConnectionError",
        "judge:ValueError",
        "judge:ConnectionError",
        "judge:ValueError",
    ]
    assert all(o.passed is None for o in outcomes)
    messages = [r.getMessage() for r in fault_records(caplog, "verdictgate.tiers.cascade")]
    assert len(messages) == 2
    assert "ConnectionError" in messages[0] and "ValueError" in messages[1]
    assert SECRET not in caplog.text and "input text" not in caplog.text


# -- the semantic tier ------------------------------------------------------------------------


def bag_of_words(texts):
    vocabulary = ["approve", "deny", "review", "reply", "about"]
    return [[float(word in text.split()) for word in vocabulary] for text in texts]


def test_a_semantic_tier_whose_embedding_raises_makes_error_trials(caplog):
    caplog.set_level(logging.WARNING, logger="verdictgate.tiers.cascade")

    def broken_embed(texts):
        raise RuntimeError(SECRET)

    suite = gate_suite()
    references = {case.id: f"reply about {case.expected}" for case in suite.cases}
    judged = []
    semantic = SemanticCheck(0.5, references, broken_embed)
    assessment = verdictgate.run(
        lambda text: {"verdict": keyword_gate(text), "text": f"reply about {keyword_gate(text)}"},
        suite,
        semantic=semantic,
        judge=lambda output, given: judged.append(output) or True,
    )
    assert dict(assessment.trials.error_types) == {"semantic:RuntimeError": 144}
    assert judged == []  # a faulted semantic tier does not go on to the judge
    assert assessment.status is Status.INCONCLUSIVE and "incomplete" in assessment.reason_codes
    assert assessment.passes.judged == 0 and assessment.passes.skipped == 0
    assert len(fault_records(caplog, "verdictgate.tiers.cascade")) == 1
    assert SECRET not in caplog.text


def test_a_semantic_embedding_that_fails_on_some_texts_errors_only_those():
    def embed(texts):
        if any("review" in text for text in texts):
            raise OSError(SECRET)
        return bag_of_words(texts)

    suite = gate_suite()
    references = {case.id: f"reply about {case.expected}" for case in suite.cases}
    assessment = verdictgate.run(
        lambda text: {"verdict": keyword_gate(text), "text": f"reply about {keyword_gate(text)}"},
        suite,
        semantic=SemanticCheck(0.5, references, embed),
    )
    assert dict(assessment.trials.error_types) == {"semantic:OSError": 48}
    assert (assessment.passes.passed, assessment.passes.judged) == (96, 96)
    assert assessment.status is Status.INCONCLUSIVE
    assert not set(assessment.reason_codes) & {"pass_rate_unreliable", "quality_failed"}


def test_a_semantic_miss_is_still_a_failure_not_an_error():
    check = SemanticCheck(0.5, {"c": "reply about approve"}, bag_of_words)
    outcome = verdictgate.tiers.cascade.Tiers(semantic=check).check("deny", "in", "c")
    assert (outcome.passed, outcome.error) == (False, None)


# -- relations --------------------------------------------------------------------------------


def test_a_relation_whose_transform_raises_is_errored_not_violated_nor_vacuous(caplog):
    caplog.set_level(logging.WARNING, logger="verdictgate.runner.suite_run")

    def explode(text: str) -> str:
        raise ValueError(SECRET + text)

    suite = gate_suite("Please {route} request {n}")
    assessment = verdictgate.run(keyword_gate, suite, relations=[Relation("explode", explode)])
    (result,) = assessment.relations
    assert result == RelationResult("explode", (), (), ROUTES)
    assert result.status == "errored"
    codes = set(assessment.reason_codes)
    assert "incomplete" in codes and not codes & {"relation_violated", "relations_vacuous"}
    assert assessment.status is Status.INCONCLUSIVE and assessment.trials.errors == 0
    incomplete = next(r.message for r in assessment.reasons if r.code == "incomplete")
    assert incomplete == "relation checks errored: explode on approve, deny, review"
    assert any("relation checks errored" in step for step in assessment.next_steps)
    relations_check = next(c for c in checks(assessment) if c.name == "relations")
    assert relations_check.result is CheckResult.UNDECIDED
    records = fault_records(caplog, "verdictgate.runner.suite_run")
    assert len(records) == 1 and "transform" in records[0].getMessage()
    assert "ValueError" in records[0].getMessage() and SECRET not in caplog.text


def test_an_agent_that_raises_only_on_the_transformed_input_errors_the_relation(
    cli, agents, title_suite, caplog
):
    caplog.set_level(logging.WARNING, logger="verdictgate")
    result = cli(
        "run",
        "--agent",
        f"{agents}:lowercase_crasher",
        "--suite",
        title_suite,
        "--repeats",
        "26",
        "--relation",
        "case",
        "--relation",
        "punctuation",
        "--format",
        "json",
    )
    report = report_of(result)
    assert result.exit_code == 3 and report["status"] == "inconclusive"
    codes = codes_of(report)
    assert "incomplete" in codes and not codes & {"relation_violated", "relations_vacuous"}
    assert report["trials"]["errors"] == 0  # the trials themselves were fine
    assert report["relations"] == [
        {
            "name": "case",
            "status": "errored",
            "violated": [],
            "held": [],
            "errored": ["approve", "deny", "review"],
        },
        {
            "name": "punctuation",
            "status": "not_exercised",
            "violated": [],
            "held": [],
            "errored": [],
        },
    ]
    records = fault_records(caplog, "verdictgate.runner.suite_run")
    assert [r.getMessage() for r in records] == [
        "relation case: the agent raised RuntimeError, so the relation is errored there, "
        "not violated; logged once per error type"
    ]
    assert SECRET not in caplog.text
    text = cli(
        "run",
        "--agent",
        f"{agents}:lowercase_crasher",
        "--suite",
        title_suite,
        "--repeats",
        "26",
        "--relation",
        "case",
        "--format",
        "text",
    )
    assert text.exit_code == 3
    assert "errored (could not be checked on approve, deny, review)" in text.stdout
    junit = cli(
        "run",
        "--agent",
        f"{agents}:lowercase_crasher",
        "--suite",
        title_suite,
        "--repeats",
        "26",
        "--relation",
        "case",
        "--format",
        "junit",
    )
    assert 'name="relations"' in junit.stdout and 'type="inconclusive"' in junit.stdout


def test_a_violation_still_wins_over_an_errored_case():
    def flaky(text: str) -> str:
        if text == "please deny request 0":
            raise RuntimeError(SECRET)
        if text == "please approve request 0":
            return "review"  # changed its mind on the lowered input
        return keyword_gate(text)

    suite = gate_suite("Please {route} request {n}")
    assessment = verdictgate.run(flaky, suite, relations=["case"])
    (result,) = assessment.relations
    assert (result.violated, result.held, result.errored) == (("approve",), ("review",), ("deny",))
    assert result.status == "violated"
    assert assessment.status is Status.REJECTED and "relation_violated" in assessment.reason_codes


def test_a_relation_on_cases_whose_first_answer_errored_is_errored_not_vacuous():
    def down(output, given):
        raise ConnectionError(SECRET)

    suite = gate_suite("Please {route} request {n}")
    assessment = verdictgate.run(keyword_gate, suite, relations=["case"], judge=down)
    (result,) = assessment.relations
    assert result.status == "errored" and result.errored == ROUTES
    assert "relations_vacuous" not in assessment.reason_codes
    assert assessment.status is Status.INCONCLUSIVE


def test_relation_status_precedence():
    assert RelationResult("r", ("a",), ("b",), ("c",)).status == "violated"
    assert RelationResult("r", (), ("b",), ("c",)).status == "errored"
    assert RelationResult("r", (), ("b",)).status == "held"
    assert RelationResult("r").status == "not_exercised"


def test_errored_relations_round_trip_through_the_run_span():
    results = [
        RelationResult("case", ("deny",), ("approve",), ("review",)),
        RelationResult("explode", (), (), ("approve", "deny")),
        RelationResult("whitespace"),
    ]

    def router(text: str) -> str:  # `case` holds on approve, breaks on deny, raises on review
        if text == text.lower() and "review" in text:
            raise ConnectionError(SECRET)
        return "approve" if text == text.lower() else keyword_gate(text)

    def explode(text: str) -> str:  # raises on approve and deny; leaves review as it is
        if "review" in text:
            return text
        raise ValueError(SECRET)

    memory = MemoryTelemetry()
    relations = ["case", Relation("explode", explode), "whitespace"]
    suite = gate_suite("Please {route} request {n}")
    assessment = verdictgate.run(router, suite, relations=relations, telemetry=memory.telemetry)
    memory.telemetry.shutdown()
    (run_span,) = [s for s in memory.spans.get_finished_spans() if s.name == names.RUN_SPAN]
    attributes = dict(run_span.attributes)
    assert list(attributes[names.RELATIONS_ERRORED]) == [
        "case=review",
        "explode=approve",
        "explode=deny",
    ]
    assert assessment.relations == tuple(results)  # as the processor read the run span
    declared = run_declaration(attributes)
    assert declared.relations == tuple(results)
    assert [r.status for r in declared.relations] == ["violated", "errored", "not_exercised"]
    # a run span written before `errored` existed still reads
    old = {k: v for k, v in attributes.items() if k != names.RELATIONS_ERRORED}
    assert run_declaration(old).relations[1] == RelationResult("explode")
    assert decode_results(("x",), (), (), ("x=a",)) == (RelationResult("x", (), (), ("a",)),)


# -- coverage without a declared contract -----------------------------------------------------


def stable_trials(answers: dict[str, str], pairs: int = 13) -> list[Trial]:
    return [
        Trial(case, index, answer, "r1")
        for case, answer in answers.items()
        for index in range(2 * pairs)
    ]


def test_without_a_contract_unreached_intended_routes_are_not_required():
    suite = gate_suite(contract=False)
    # the review cases never get review: with no contract declared, nothing is required
    answers = {
        case.id: "deny" if case.expected == "review" else case.expected for case in suite.cases
    }
    assessment = verdictgate.assess(stable_trials(answers), suite)
    assert not [code for code in assessment.reason_codes if code.startswith("contract_")]
    assert assessment.status is Status.QUALIFIED, assessment.reason_codes
    coverage = assessment.coverage
    assert (coverage.declared, coverage.required, dict(coverage.intended)) == (False, (), {})
    assert (coverage.missing_intended, coverage.missing_observed, coverage.unknown) == ((), (), ())
    assert coverage.observed == ("approve", "deny") and coverage.satisfied
    assert [route.route for route in assessment.routes] == list(ROUTES)  # still from the cases
    assert "no contract was declared" in assessment.headline
    assert "required routes were reached" not in assessment.headline


def test_without_a_contract_minimum_cases_and_critical_routes_require_nothing():
    suite = Suite(
        name="gate",
        cases=gate_suite().cases,
        contract=Contract(critical=frozenset({"escalate"}), minimum_cases={"escalate": 3}),
    )
    answers = {case.id: case.expected for case in suite.cases}
    assessment = verdictgate.assess(stable_trials(answers), suite)
    assert assessment.coverage.under_cased == () and assessment.coverage.critical_missing == ()
    assert assessment.status is Status.QUALIFIED, assessment.reason_codes


def test_with_a_declared_contract_unreached_routes_still_reject():
    suite = gate_suite()
    answers = {
        case.id: "deny" if case.expected == "review" else case.expected for case in suite.cases
    }
    assessment = verdictgate.assess(stable_trials(answers), suite)
    assert "contract_missing_observed" in assessment.reason_codes
    assert assessment.coverage.missing_observed == ("review",)
    assert assessment.status is Status.REJECTED


def test_a_qualified_headline_with_a_contract_names_the_required_routes():
    suite = gate_suite()
    assessment = verdictgate.assess(stable_trials({c.id: c.expected for c in suite.cases}), suite)
    assert assessment.status is Status.QUALIFIED
    assert assessment.headline.endswith("and all 3 required routes were reached.")


def test_assess_without_a_contract_through_the_cli(cli, write):
    document = suite_document()
    del document["contract"]
    records = [
        {
            "run": "r1",
            "case": case["id"],
            "trial": t,
            "outcome": "decision",
            "verdict": "deny" if case["expected"] == "review" else case["expected"],
        }
        for case in document["cases"]
        for t in range(26)
    ]
    result = cli(
        "assess",
        "--trials",
        write("t.jsonl", records),
        "--suite",
        write("s.json", document),
        "--format",
        "json",
    )
    report = report_of(result)
    assert result.exit_code == 0 and report["status"] == "qualified", report["reasons"]
    assert report["coverage"]["required"] == [] and report["coverage"]["missing_observed"] == []
    assert "no contract was declared" in report["headline"]
