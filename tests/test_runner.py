"""The live runner: sizing, budgets, answers of every kind, errors, timeouts, concurrency, async."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import verdictgate
from verdictgate import Isolation, NoDecision, PlanError, Policy, Stability, Status, Suite, plan_run
from verdictgate.suite import Case, Contract

ROUTES = ("approve", "deny", "review")


def gate_suite(cases_per_route: int = 2, **contract) -> Suite:
    return Suite(
        name="gate",
        point="approval_gate",
        cases=tuple(
            Case(f"{route}-{n}", f"please {route} request {n}", route)
            for route in ROUTES
            for n in range(cases_per_route)
        ),
        contract=Contract(frozenset(ROUTES), **contract),
    )


def keyword_gate(text: str) -> str:
    return next(route for route in ROUTES if route in text)


def test_repeats_are_sized_from_the_tolerance_and_route_targets():
    suite = gate_suite(targets={"deny": 0.01})
    plan = plan_run(suite, Policy(tolerance=0.05))
    assert plan.repeats["approve-0"] == 2 * -(-72 // 6) == 24
    assert plan.repeats["deny-0"] == 2 * -(-368 // 2) == 368
    assert plan.calls == 4 * 24 + 2 * 368


def test_a_stable_gate_qualifies_and_every_call_is_a_trial():
    calls = []

    def gate(text: str) -> str:
        calls.append(text)
        return keyword_gate(text)

    assessment = verdictgate.run(
        verdictgate.from_callable(gate, isolation="fresh-session"), gate_suite()
    )
    assert assessment.status is Status.QUALIFIED, assessment.headline
    assert len(calls) == assessment.trials.received == assessment.trials.expected == 6 * 24
    assert assessment.pooled.pairs == 72 and assessment.run.isolation is Isolation.FRESH_SESSION


def test_an_unaffordable_plan_is_refused_before_any_call():
    calls = []
    with pytest.raises(PlanError, match="budget is 100"):
        verdictgate.run(lambda text: calls.append(text) or "approve", gate_suite(), budget=100)
    assert calls == []


def test_explicit_repeats_and_budget_cap():
    assessment = verdictgate.run(keyword_gate, gate_suite(), repeats=4, budget=24)
    assert assessment.trials.received == 24
    assert assessment.pooled.result is Stability.UNDECIDED
    assert "pooled_undecided" in assessment.reason_codes


def test_run_options_are_one_object_and_keywords_replace_their_fields():
    options = verdictgate.RunOptions(repeats=4, budget=24, run_id="opts")
    assessment = verdictgate.run(keyword_gate, gate_suite(), None, options)
    assert assessment.trials.received == 24 and assessment.run.id == "opts"
    again = verdictgate.run(keyword_gate, gate_suite(), None, options, repeats=2, run_id="kw")
    assert again.trials.received == 12 and again.run.id == "kw"
    with pytest.raises(TypeError, match="repeat"):
        verdictgate.run(keyword_gate, gate_suite(), repeat=4)  # a misspelt setting is refused


def test_every_kind_of_answer_and_failure_becomes_a_trial():
    answers = {
        "approve": lambda: "approve",
        "deny": lambda: {"verdict": "deny"},
        "review": lambda: ["lookup", "escalate"],
    }

    def agent(text: str):
        route = keyword_gate(text)
        if text.endswith("1") and route == "approve":
            raise ValueError("boom")
        if text.endswith("1") and route == "deny":
            return 42
        if text.endswith("1") and route == "review":
            return NoDecision("refused")
        return answers[route]()

    assessment = verdictgate.run(agent, gate_suite(), repeats=2)
    assert assessment.trials.errors == 4
    assert dict(assessment.trials.error_types) == {"ValueError": 2, "invalid_return": 2}
    assert assessment.trials.no_decisions == 2
    assert "lookup > escalate" in assessment.coverage.observed
    assert "incomplete" in assessment.reason_codes and assessment.status is Status.REJECTED


def test_a_slow_call_times_out_as_an_error_trial():
    def agent(text: str) -> str:
        if text == "please deny request 0":
            threading.Event().wait(5)
        return keyword_gate(text)

    assessment = verdictgate.run(agent, gate_suite(), repeats=2, timeout=0.05, concurrency=3)
    assert dict(assessment.trials.error_types) == {"timeout": 2}
    assert assessment.trials.received == 12


def test_calls_run_concurrently():
    in_flight, peak, lock = [0], [0], threading.Lock()

    def agent(text: str) -> str:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.01)
        with lock:
            in_flight[0] -= 1
        return keyword_gate(text)

    verdictgate.run(agent, gate_suite(), repeats=4, concurrency=4)
    assert peak[0] > 1


def test_async_agents_with_concurrency_and_timeout():
    in_flight, peak = [0], [0]

    async def agent(text: str) -> str:
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(10 if text == "please review request 1" else 0.001)
        in_flight[0] -= 1
        return keyword_gate(text)

    assessment = verdictgate.run(agent, gate_suite(), repeats=2, concurrency=5, timeout=0.05)
    assert 1 < peak[0] <= 5
    assert dict(assessment.trials.error_types) == {"timeout": 2}


def test_fresh_instance_builds_one_agent_per_trial():
    built = []

    def factory():
        built.append(1)
        return keyword_gate

    agent = verdictgate.from_factory(factory)
    assessment = verdictgate.run(agent, gate_suite(), repeats=2)
    assert assessment.run.isolation is Isolation.FRESH_INSTANCE
    assert len(built) == 1 + 12  # one to check the factory, then one per trial


def test_shared_session_is_never_admitted():
    agent = verdictgate.from_callable(keyword_gate, isolation="shared-session")
    assessment = verdictgate.run(agent, gate_suite())
    assert assessment.status is Status.REJECTED and "shared_session" in assessment.reason_codes


def test_the_sink_receives_every_trial_in_flight():
    received = []

    class Sink:
        def add(self, trial):
            received.append(trial)

    assessment = verdictgate.run(keyword_gate, gate_suite(), repeats=2, sink=Sink())
    assert len(received) == assessment.trials.received == 12
    assert {t.case for t in received} == {c.id for c in gate_suite().cases}


def test_cases_without_input_cannot_be_run():
    suite = Suite(cases=(Case("only-an-id", expected="approve"),))
    with pytest.raises(PlanError, match="without an input"):
        verdictgate.run(keyword_gate, suite)


def test_the_progress_bar_draws_on_stderr(capsys):
    assessment = verdictgate.run(keyword_gate, gate_suite(), repeats=2, progress=True)
    assert assessment.trials.received == 12
    assert capsys.readouterr().out == ""  # the bar never touches stdout, where reports go


def test_the_quality_gate_stops_before_paying_for_repeats():
    calls = []

    def wrong_on_review(text: str) -> str:
        calls.append(text)
        return "approve" if "review" in text else keyword_gate(text)

    assessment = verdictgate.run(wrong_on_review, gate_suite(), quality_gate=True)
    assert len(calls) == 6  # one call per case, then it stopped
    assert assessment.status is Status.REJECTED and assessment.reason_codes[0] == "quality_failed"
    assert assessment.quality_failed == ("review-0", "review-1")
    assert assessment.trials.expected == 6 and "incomplete" not in assessment.reason_codes


def test_the_quality_gate_lets_a_correct_agent_through():
    assessment = verdictgate.run(keyword_gate, gate_suite(), quality_gate=True)
    assert assessment.status is Status.QUALIFIED and assessment.trials.received == 144


def test_metamorphic_relations_violated_held_and_vacuous():
    def case_sensitive(text: str) -> str:
        return "review" if text.islower() and "deny" in text else keyword_gate(text.lower())

    suite = Suite(
        "gate",
        "approval_gate",
        tuple(
            Case(f"{route}-{n}", f"Please {route.upper()} request {n}.", route)
            for route in ROUTES
            for n in range(2)
        ),
        Contract(frozenset(ROUTES)),
    )
    broken = verdictgate.run(case_sensitive, suite, relations=["case", "punctuation"])
    results = {r.name: r for r in broken.relations}
    assert results["case"].status == "violated" and results["case"].violated == ("deny",)
    assert results["punctuation"].status == "held"
    assert broken.status is Status.REJECTED and "relation_violated" in broken.reason_codes
    robust = verdictgate.run(
        lambda text: keyword_gate(text.lower()), suite, relations=["case", "punctuation"]
    )
    assert {r.status for r in robust.relations} == {"held"} and robust.status is Status.QUALIFIED
    vacuous = verdictgate.run(
        keyword_gate, gate_suite(), relations=["whitespace"]
    )  # inputs already normal
    assert vacuous.relations[0].status == "not_exercised"
    assert "relations_vacuous" in vacuous.reason_codes and vacuous.status is Status.REJECTED


def test_the_keywords_of_run_are_the_fields_of_run_options():
    """`run(agent, suite, concurrency=4)`: RunSettings types those keywords, one for each field
    of RunOptions, of the field's type."""
    from dataclasses import fields

    from verdictgate.runner.run_options import RunOptions, RunSettings

    settings = {
        name: getattr(kind, "__forward_arg__", kind)
        for name, kind in RunSettings.__annotations__.items()
    }
    assert settings == {field.name: field.type for field in fields(RunOptions)}
