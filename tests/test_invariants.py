"""Invariants: a blocking failure in 1 of 200 trials rejects; a warning is reported everywhere."""

from __future__ import annotations

import json

import pytest

import verdictgate
from verdictgate import Case, Contract, Invariant, Status, Suite
from verdictgate.reports import RENDERERS

ROUTES = ("approve", "deny", "review", "escalate", "hold")
SUITE = Suite(
    "gate",
    "approval_gate",
    tuple(
        Case(f"{route}-case", f"ticket T-{n}: please {route}", route)
        for n, route in enumerate(ROUTES)
    ),
    Contract(set(ROUTES)),
)


def agent(text: str) -> str:
    return next(route for route in ROUTES if route in text)


def once_in_200() -> Invariant:
    calls = {"n": 0}

    def mentions_the_ticket(output, given) -> bool:  # holds unless it is the 137th call
        calls["n"] += 1
        return calls["n"] != 137 and given.split(":")[0].split()[-1] in f"{given}"

    return mentions_the_ticket


@pytest.mark.parametrize(
    ("severity", "status"), [("block", Status.REJECTED), ("warn", Status.QUALIFIED)]
)
def test_one_failure_in_200_trials(severity, status):
    invariant = Invariant("mentions_ticket", once_in_200(), severity)
    assessment = verdictgate.run(agent, SUITE, repeats=40, invariants=[invariant])
    assert assessment.trials.received == 200
    assert assessment.status is status, assessment.headline
    counts = assessment.invariants.failed if severity == "block" else assessment.invariants.warned
    assert counts == {"mentions_ticket": 1}
    if severity == "block":
        assert assessment.reason_codes == ("invariant_blocked",)
        assert "mentions_ticket in 1 trials" in assessment.reasons[0].message
    else:
        for fmt, render in RENDERERS.items():
            assert "mentions_ticket" in render(assessment), fmt  # the warning is in every output


def test_a_check_that_raises_has_failed_and_only_names_leave_the_process():
    def explodes(output, given):
        raise ValueError(f"secret {given}")

    assessment = verdictgate.run(
        agent, SUITE, repeats=2, invariants=[Invariant("no_crash", explodes)]
    )
    assert assessment.invariants.failed == {"no_crash": 10}
    assert "secret" not in RENDERERS["json"](assessment)


def test_invariants_travel_on_decision_spans_and_in_trial_files(tmp_path, cli):
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    processor = verdictgate.EvidenceProcessor()
    provider.add_span_processor(processor)

    @verdictgate.decision_point(
        "gate",
        tracer_provider=provider,
        invariants=[
            Invariant("short", lambda out, given: len(out) < 5, "warn"),
            Invariant("known", lambda out, _: out in ROUTES),
        ],
    )
    def decide(text: str) -> str:
        return agent(text)

    for index in range(2):
        for case in SUITE.cases:
            with verdictgate.trial(run="r", case=case.id, index=index, expected=case.expected):
                decide(case.input)
    provider.shutdown()  # ends the canary run (no run span)
    assessment = processor.assessment("r")
    long_routes = [route for route in ROUTES if len(route) >= 5]
    assert assessment.invariants.warned == {"short": 2 * len(long_routes)}
    assert assessment.invariants.failed == {}

    from verdictgate.trials_file import TrialWriter

    path = tmp_path / "t.jsonl"
    trials = [
        verdictgate.Trial(
            route, i, route, "r", route, invariants_failed=("known",) if i == 3 else ()
        )
        for route in ROUTES
        for i in range(4)
    ]
    with open(path, "wb") as stream:
        writer = TrialWriter(stream)
        for trial in trials:
            writer.add(trial)
    report = json.loads(cli("assess", "--trials", str(path), "--format", "json").stdout)
    assert report["invariants"]["failed"] == {"known": len(ROUTES)}
    assert "invariant_blocked" in {r["code"] for r in report["reasons"]}


def test_a_judge_runs_only_where_invariants_held_and_feeds_the_pass_rate():
    judged = []

    def judge(output, given) -> bool:
        judged.append(output)
        return output != "hold"  # the judge dislikes one route

    blocks_escalate = Invariant("not_escalate", lambda output, given: output != "escalate")
    policy = verdictgate.Policy(pass_rate=0.45)  # 60 of 100: shown above 45%, not above 50%
    assessment = verdictgate.run(
        agent, SUITE, policy, repeats=20, invariants=[blocks_escalate], judge=judge
    )
    assert len(judged) == 80 and "escalate" not in judged  # the 20 blocked trials skipped the judge
    assert assessment.passes.skipped == 20
    # a blocked trial fails whatever a judge would have said: 60 of 100 pass
    assert (assessment.passes.passed, assessment.passes.judged) == (60, 100)
    assert assessment.pass_rate.result.value == "reliable"
    assert "invariant_blocked" in assessment.reason_codes
