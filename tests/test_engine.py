"""The engine: pairing, de-duplication, routes, coverage, dominance, completeness, status."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verdictgate import (
    Contract,
    Evidence,
    NoDecision,
    Policy,
    Stability,
    Status,
    Suite,
    Trial,
    assess,
)
from verdictgate.suite import Case


def trials_for(
    case: str, decisions: list, expected: str | None = None, run: str = "r"
) -> list[Trial]:
    return [Trial(case, i, d, run, expected) for i, d in enumerate(decisions)]


def test_pairs_follow_trial_index_not_arrival_order():
    # indices 0,1 agree and 2,3 agree; arrival order interleaves them so neighbours differ
    trials = [
        Trial("c", 0, "a"),
        Trial("c", 2, "b"),
        Trial("c", 1, "a"),
        Trial("c", 3, "b"),
    ]
    assessment = assess(trials)
    assert (assessment.pooled.pairs, assessment.pooled.flips) == (2, 0)


def test_trailing_odd_trial_and_errors_leave_partners_unpaired():
    trials = trials_for("c", ["a", "a", None, "a", "b"])
    assessment = assess(trials)
    assert assessment.pooled.pairs == 1  # (0,1); (2,3) has an error; 4 has no partner
    assert assessment.trials.errors == 1


def test_no_decision_equals_only_the_same_reason_and_tool_paths_compare_in_order():
    trials = (
        trials_for(
            "n",
            [
                NoDecision("refused"),
                NoDecision("refused"),
                NoDecision("refused"),
                NoDecision("other"),
            ],
        )
        + trials_for("t", [("a", "b"), ("a", "b"), ("a", "b"), ("b", "a")])
        + trials_for("l", ["a > b", ("a", "b")])
    )
    assessment = assess(trials)
    by_case = {c.case: c for c in assessment.cases}
    assert (by_case["n"].pairs, by_case["n"].flips) == (2, 1)
    assert (by_case["t"].pairs, by_case["t"].flips) == (2, 1)
    assert by_case["l"].flips == 1  # a label is never equal to a tool path
    assert "no_decision:refused" in assessment.coverage.observed
    assert "a > b" in assessment.coverage.observed


def test_duplicates_are_harmless_and_conflicts_are_counted_once_per_identity():
    evidence = Evidence(
        [
            Trial("c", 0, "a"),
            Trial("c", 0, "a"),
            Trial("c", 1, "a"),
            Trial("c", 1, "b"),
            Trial("c", 1, None),
        ]
    )
    assert evidence.duplicates == 1
    assert evidence.conflicts == 1
    assessment = assess(evidence)
    assert assessment.trials.conflicts == 1
    assert assessment.pooled.flips == 0  # the first record of trial 1 counts
    assert "integrity_conflict" in assessment.reason_codes
    assert assessment.status is Status.REJECTED


def test_suite_expected_wins_over_the_trials_expected_route():
    suite = Suite(
        cases=(Case("c", expected="deny"),), contract=Contract(frozenset({"deny", "approve"}))
    )
    trials = trials_for("c", ["deny"] * 4, expected="approve")
    assessment = assess(trials, suite)
    assert [route.route for route in assessment.routes] == ["deny"]


def test_route_targets_flip_pairs_and_ordering():
    suite = Suite(
        cases=(Case("x", expected="a"), Case("y", expected="b")),
        contract=Contract(
            frozenset({"a", "b", "c"}), required=frozenset({"a", "b"}), targets={"a": 0.01}
        ),
    )
    trials = trials_for("x", ["a", "c"] * 13) + trials_for("y", ["b", "b", "b", "a"] * 3)
    assessment = assess(trials, suite)
    route_a, _ = assessment.routes
    assert route_a.targeted and route_a.change.tolerance == 0.01
    assert route_a.change.result is Stability.STOCHASTIC
    assert [(p.routes, p.count) for p in assessment.flip_pairs] == [
        (("a", "c"), 13),
        (("a", "b"), 3),
    ]
    assert {"target_stochastic", "route_stochastic"} <= set(assessment.reason_codes)


def test_coverage_lists():
    contract = Contract(
        frozenset({"a", "b", "c", "d"}),
        critical=frozenset({"d"}),
        minimum_cases={"a": 2},
        allowed_no_decisions=frozenset({"refused"}),
    )
    suite = Suite(cases=(Case("1", expected="a"), Case("2", expected="b")), contract=contract)
    trials = trials_for("1", ["a", "a"]) + trials_for("2", ["zzz", NoDecision("refused")])
    coverage = assess(trials, suite).coverage
    assert coverage.intended == {"a": 1, "b": 1, "c": 0, "d": 0}
    assert coverage.missing_intended == ("c", "d")
    assert coverage.missing_observed == ("b", "c", "d")
    assert coverage.unknown == ("zzz",)
    assert coverage.under_cased == ("a",)
    assert coverage.critical_missing == ("d",)
    assert not coverage.satisfied


def test_dominance_uses_each_cases_first_decision():
    trials = [t for n in range(9) for t in trials_for(f"c{n}", [None, "a", "b", "b"])]
    trials += trials_for("odd", ["b", "b"])
    dominance = assess(trials).dominance
    assert (
        dominance.verdict == "a" and dominance.share == pytest.approx(0.9) and dominance.collapsed
    )


def test_missing_planned_trials_make_the_run_incomplete():
    suite = Suite(cases=(Case("1"), Case("2")))
    trials = trials_for("1", ["a"] * 4)
    assessment = assess(trials, suite)
    assert assessment.trials.expected == 8 and assessment.trials.missing == 4
    assert "incomplete" in assessment.reason_codes


decisions = st.one_of(
    st.sampled_from(["a", "b", "c"]),
    st.just(None),
    st.builds(NoDecision, st.sampled_from(["refused", "no_tool"])),
    st.lists(st.sampled_from(["search", "pay"]), min_size=1, max_size=3).map(tuple),
)
identities = st.tuples(
    st.sampled_from(["r1", "r2"]), st.sampled_from([f"c{i}" for i in range(6)]), st.integers(0, 9)
)
trial_sets = st.dictionaries(
    identities, st.tuples(decisions, st.sampled_from(["a", "b", None])), max_size=60
).map(
    lambda table: [
        Trial(case, index, decision, run, expected)
        for (run, case, index), (decision, expected) in table.items()
    ]
)


def _consistent_expected(trials: list[Trial]) -> list[Trial]:
    """One expected route per (run, case), as a harness would record it."""
    routes: dict = {}
    return [
        Trial(t.case, t.index, t.decision, t.run, routes.setdefault((t.run, t.case), t.expected))
        for t in trials
    ]


@settings(max_examples=200)
@given(trial_sets, st.randoms(use_true_random=False), st.lists(st.integers(0, 59), max_size=40))
def test_assessment_is_unchanged_by_arrival_order_and_duplicate_retries(
    trials, rng, retry_positions
):
    trials = _consistent_expected(trials)
    reference = assess(trials)
    shuffled = list(trials)
    if trials:
        shuffled += [trials[position % len(trials)] for position in retry_positions]
    rng.shuffle(shuffled)
    again = assess(shuffled)
    assert again.trials.duplicates == len(shuffled) - len(trials)
    assert replace(again, trials=replace(again.trials, duplicates=0)) == reference
    assert again.trials.conflicts == 0


def test_simulated_agents_at_the_tolerance_are_rarely_certified_deterministic():
    """The rule's promise: a true change rate >= t is certified deterministic in <= 5% of runs."""
    rng = random.Random(20261130)
    tolerance, runs, cases = 0.05, 2000, 6
    policy = Policy(tolerance=tolerance)
    repeats = 2 * -(-72 // cases)  # the runner's sizing: 2 * ceil(pairs_needed / cases)
    for true_rate_scale, limit in ((1.0, 0.05), (1.5, 0.05)):
        true_rate = tolerance * true_rate_scale
        q = 0.5 * (1 - (1 - 2 * true_rate) ** 0.5)  # per-trial switch chance: 2q(1-q) = true rate
        assert 2 * q * (1 - q) == pytest.approx(true_rate)
        certified = 0
        for run_number in range(runs):
            trials = [
                Trial(f"c{case}", index, "alt" if rng.random() < q else "main", f"run{run_number}")
                for case in range(cases)
                for index in range(repeats)
            ]
            if assess(trials, policy=policy).pooled.result is Stability.DETERMINISTIC:
                certified += 1
        rate = certified / runs
        print(
            f"true change rate {true_rate:.3f}: certified deterministic in {rate:.2%} of {runs} runs"
        )
        assert rate <= limit


def test_the_least_independent_declared_isolation_counts():
    from verdictgate import Isolation

    def trials(run: str, isolation: Isolation) -> list[Trial]:
        return [
            Trial(f"c{n}", i, "a", run, "a", isolation=isolation)
            for n in range(3)
            for i in range(60)
        ]

    fresh = assess(trials("r1", Isolation.FRESH_INSTANCE))
    assert fresh.run.isolation is Isolation.FRESH_INSTANCE  # read from the records
    mixed = assess(trials("r1", Isolation.FRESH_INSTANCE) + trials("r2", Isolation.SHARED_SESSION))
    assert (
        mixed.run.isolation is Isolation.SHARED_SESSION and "shared_session" in mixed.reason_codes
    )
    flipped = trials("r1", Isolation.SHARED_SESSION)[:1] + trials("r1", Isolation.FRESH_SESSION)[1:]
    assert assess(flipped).run.isolation is Isolation.SHARED_SESSION  # whatever the line order


def test_a_run_whose_trials_mostly_errored_leads_with_the_errors():
    """An agent that raises on every call: the headline and the first next step are about its
    errors, not about collecting more pairs (a run with one error keeps its usual order)."""
    from verdictgate import Trial, assess

    errored = [
        Trial(f"c{c}", i, None, "r", "approve", error_type="RuntimeError")
        for c in range(6)
        for i in range(4)
    ]
    failing = assess(errored)
    assert failing.headline.startswith("Inconclusive: 24 trials errored (RuntimeError x24)")
    assert failing.reasons[0].code == "incomplete"
    assert failing.next_steps[0].startswith("Fix what failed")
    one_error = [Trial(f"c{c}", i, "approve", "r", "approve") for c in range(6) for i in range(4)]
    one_error[0] = Trial("c0", 0, None, "r", "approve", error_type="RuntimeError")
    assert assess(one_error).reasons[0].code != "incomplete"


def test_decisions_that_are_json_documents_lead_with_the_decision_path_step():
    """Outputs read whole (promptfoo's JSON text without --decision-path): the first next step
    names --decision-path; plain unknown labels get no such step."""
    from verdictgate import Case, Contract, Suite, Trial, assess

    routes = ["billing", "tech"]
    suite = Suite(
        "s",
        "p",
        tuple(Case(f"c{i}", f"in {i}", r) for i, r in enumerate(routes)),
        Contract(set(routes)),
    )
    whole = [
        Trial(f"c{i}", k, json.dumps({"route": r}), "r", r)
        for i, r in enumerate(routes)
        for k in range(4)
    ]
    steps = assess(whole, suite).next_steps
    assert steps[0].startswith('2 decisions are JSON documents (such as {"route": "billing"})')
    assert "--decision-path" in steps[0]
    plain = [Trial(f"c{i}", k, "other", "r", r) for i, r in enumerate(routes) for k in range(4)]
    assert not any("--decision-path" in step for step in assess(plain, suite).next_steps)


def test_steps_for_json_outputs_never_say_fix_the_agent_or_allow_them():
    """Seven routes whose outputs were read whole: no step asks to fix the agent or to add a
    document to the contract, and the routes not reached as read are one step naming them."""
    from verdictgate import Case, Contract, Suite, Trial, assess

    routes = ["billing", "cancel", "downgrade", "login", "refund", "tech", "upgrade"]
    suite = Suite(
        "s", "p", tuple(Case(f"c{i}", f"in {i}", r) for i, r in enumerate(routes)), Contract(routes)
    )
    whole = [
        Trial(f"c{i}", k, json.dumps({"route": r, "reply": "Done."}), "r", r)
        for i, r in enumerate(routes)
        for k in range(4)
    ]
    steps = assess(whole, suite).next_steps
    assert "--decision-path" in steps[0]
    assert not [step for step in steps if "fix the agent" in step or "add it to the" in step]
    assert [step for step in steps if "No trial returned" in step] == [
        "No trial returned billing, cancel, downgrade, login, refund, tech, upgrade as read, but "
        "the decisions were whole JSON outputs: with the route read from inside them "
        "(--decision-path), see which routes are reached."
    ]
    assert any(
        step.startswith("Leave the agent and the contract as they are for the 7") for step in steps
    )
    mixed = [
        *whole,
        Trial("c0", 4, "other", "r", "billing"),
        Trial("c0", 5, "other", "r", "billing"),
    ]
    assert any(
        "returned other, which the contract does not allow: fix the agent" in step
        for step in assess(mixed, suite).next_steps
    )


def test_a_rejected_run_keeps_its_rejecting_reason_first_however_many_trials_errored():
    from verdictgate import Case, Contract, Suite, Trial, assess

    suite = Suite("s", "p", (Case("c0", "in", "approve"),), Contract({"approve"}))
    trials = [Trial("c0", i, None, "r", "approve", error_type="RuntimeError") for i in range(6)]
    trials += [Trial("c0", 6, "other", "r", "approve"), Trial("c0", 7, "other", "r", "approve")]
    rejected = assess(trials, suite)
    assert rejected.status.value == "rejected"
    assert rejected.reasons[0].code != "incomplete"
    assert "incomplete" in rejected.reason_codes
