"""Curtailment: a run stops as soon as no outcome of the calls left could qualify it, says so,
and counts the calls it avoided."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verdictgate
from conftest import report_of
from verdictgate import Contract, PlanError, Policy, Status, Suite, Trial, assess
from verdictgate.assessment import Isolation, Stopping
from verdictgate.curtailment import can_still_qualify
from verdictgate.otel import conventions as names
from verdictgate.otel.span_decoding import run_declaration
from verdictgate.otel.spans import run_attributes
from verdictgate.stats import Method, Stability

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SUITE = str(EXAMPLES / "payment_suite.json")
ROUTES = ("approve", "deny")


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


def test_one_flip_in_the_first_pair_stops_a_78_pair_plan() -> None:
    suite = Suite("s", "p", (), Contract(frozenset(ROUTES)))
    policy = Policy(method=Method.EXACT)
    flipped = assess([Trial("c", 0, "approve"), Trial("c", 1, "deny")], suite, policy)
    assert not can_still_qualify(flipped, suite, {"c": 78}, policy)  # P(X <= 1; 78, 5%) = 9%
    agreed = assess([Trial("c", 0, "approve"), Trial("c", 1, "approve")], suite, policy)
    assert can_still_qualify(agreed, suite, {"c": 78}, policy)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.booleans(), min_size=1, max_size=6), min_size=1, max_size=5),
    st.integers(0, 120),
    st.sampled_from([Method.WILSON, Method.EXACT, Method.SEQUENTIAL]),
    st.booleans(),
)
def test_still_qualifying_means_the_agreeing_continuation_qualifies(
    flips_by_case, extra, method, targeted
) -> None:
    """can_still_qualify is true exactly when the best outcome of the calls left (every pair
    agreeing) would show every gating change rate below its tolerance."""
    targets = {"approve": 0.04} if targeted else {}
    suite = Suite(
        "s",
        "p",
        tuple(verdictgate.Case(f"c{n}", None, ROUTES[n % 2]) for n in range(len(flips_by_case))),
        Contract(frozenset(ROUTES), targets=targets),
    )
    policy = Policy(tolerance=0.1, method=method)

    def trials(extra_pairs: int) -> list[Trial]:
        made = []
        for n, flips in enumerate(flips_by_case):
            route = ROUTES[n % 2]
            other = ROUTES[1 - n % 2]
            pairs = [(route, other if flip else route) for flip in flips]
            pairs += [(route, route)] * extra_pairs
            made += [
                Trial(f"c{n}", i, answer)
                for i, answer in enumerate(answer for pair in pairs for answer in pair)
            ]
        return made

    now = assess(trials(0), suite, policy)
    final_pairs = {f"c{n}": len(flips) + extra for n, flips in enumerate(flips_by_case)}
    best = assess(trials(extra), suite, policy)
    gating = [best.pooled] + [route.change for route in best.routes if route.targeted]
    assert can_still_qualify(now, suite, final_pairs, policy) == all(
        change.result is Stability.DETERMINISTIC for change in gating
    )


def test_a_curtailed_run_says_so_and_counts_the_calls_it_avoided(cli) -> None:
    report = run(cli, "flipping_router", "--curtail")
    assert report["status"] == "inconclusive"
    assert "curtailed" in {reason["code"] for reason in report["reasons"]}
    assert report["headline"].startswith("Inconclusive: the run was curtailed")
    stop = report["sequential"]
    assert stop["curtailed"] and stop["calls_used"] == report["trials"]["received"]
    assert stop["calls_used"] + stop["calls_avoided"] == 856  # the fixed plan
    assert stop["calls_used"] <= 0.15 * 856
    assert report["policy"]["method"] == "sequential"  # valid at the stop


def test_a_seeded_curtailed_run_stops_at_the_first_flip(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from payment_router import route

    coin = random.Random(3)
    answers: list[str] = []

    def decide(message: str) -> str:
        label = route(message)
        if label == "card_security":
            label = coin.choice(["card_security", "merchant_dispute"])
        answers.append(label)
        return label

    assessment = verdictgate.run(decide, verdictgate.load_suite(SUITE), curtail=True)
    assert assessment.stopping == Stopping(856, True)
    card = next(r for r in assessment.routes if r.route == "card_security")
    assert card.change.flips >= 1 and assessment.trials.received == len(answers)
    earlier = assessment.trials.received - 24  # the round before the last had no flip
    assert earlier >= 0 and card.change.pairs == assessment.trials.received // 12


def test_a_stable_run_is_not_curtailed(cli) -> None:
    report = run(cli, "stable_router", "--curtail")
    assert report["status"] == "qualified" and report["policy"]["method"] == "exact"
    assert report["sequential"] == {
        "stopped_at_pairs": 428,
        "calls_used": 856,
        "calls_avoided": 0,
        "curtailed": False,
        "reason": "every one of the 856 calls made",
    }


def test_a_budget_or_plan_that_could_never_qualify_is_refused_before_any_call(cli) -> None:
    """A budget of 8 rounds gives card_security 16 pairs: its 1% target needs hundreds that
    agree, so no outcome could qualify the run. Such a run is refused, not paid for."""
    result = cli(
        "run",
        "--agent",
        f"{EXAMPLES / 'payment_router.py'}:stable_router",
        "--suite",
        SUITE,
        "--sequential",
        "--budget",
        "200",
    )
    assert result.exit_code == 2 and "could not qualify" in result.stderr
    for options in (
        ("--curtail", "--repeats", "3"),
        ("--sequential", "--budget", "10"),
        ("--sequential", "--curtail", "--max-pairs", "24"),
    ):
        result = cli(
            "run",
            "--agent",
            f"{EXAMPLES / 'payment_router.py'}:stable_router",
            "--suite",
            SUITE,
            *options,
        )
        assert result.exit_code == 2, (options, result.stdout)
        assert "\n" not in result.stderr.strip()  # one line, no traceback


def test_a_budget_curtails_a_sequential_run_once_it_cannot_qualify_within_it(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from payment_router import route

    coin = random.Random(5)

    def decide(message: str) -> str:
        label = route(message)
        return coin.choice([label, "merchant_dispute"]) if label == "card_security" else label

    suite = verdictgate.load_suite(SUITE)
    budget = 24 * 400  # 400 rounds: card_security's 800 pairs qualify it only with no flip
    assessment = verdictgate.run(decide, suite, sequential=True, budget=budget)
    assert assessment.stopping is not None and assessment.stopping.sized_for == budget
    assert assessment.stopping.curtailed and assessment.status is Status.INCONCLUSIVE
    assert assessment.trials.received < 0.15 * budget
    decided = verdictgate.run(decide, suite, sequential=True)  # no budget: on to a rejection
    assert decided.status is Status.REJECTED and not decided.stopping.curtailed


def test_what_cannot_be_curtailed_is_refused_before_any_call(cli, write) -> None:
    suite = verdictgate.load_suite(SUITE)
    called: list[str] = []
    for options in (
        {"quality_gate": True},
        {"max_pairs": 10},
        {"relations": ["case"]},
        {"policy": Policy(tolerance=0.3)},
        {"policy": Policy(claim=verdictgate.Claim.POPULATION)},
    ):
        with pytest.raises(PlanError):
            verdictgate.run(called.append, suite, curtail=True, **options)
    assert called == []
    trials = write("t.jsonl", [{"case": "c", "trial": 0, "outcome": "decision", "verdict": "x"}])
    result = cli(
        "snapshot",
        "--trials",
        trials,
        "--suite",
        SUITE,
        "--curtail",
        "--accept-reference",
        "--output",
        write("b.json", {}),
    )
    assert result.exit_code == 2 and "--curtail" in result.stderr


def test_the_run_span_carries_how_the_run_stopped() -> None:
    suite = Suite("s", "p", (), Contract(frozenset(ROUTES)))
    attributes = run_attributes("r", suite, Policy(), 24, Isolation.UNKNOWN)
    assert run_declaration(attributes).stopping is None
    attributes |= {names.PLAN_SIZED_TRIALS: 904, names.CURTAILED: True}
    assert run_declaration(attributes).stopping == Stopping(904, True)
    assert json.dumps(attributes)  # plain values a span can carry
