"""What the telemetry cannot order is not evidence: tool paths whose spans started in the same
millisecond (the OpenTelemetry JS SDK's stamps) are judged by the contract in any order of
their tied steps, and a rerun pair that agrees only up to that order is neither an agreement
nor a flip."""

from __future__ import annotations

import itertools
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verdictgate import (
    Claim,
    Contract,
    Evidence,
    Isolation,
    Policy,
    Stability,
    Status,
    Suite,
    Trial,
    assess,
)
from verdictgate.admission import RULE_OF
from verdictgate.curtailment import can_still_qualify
from verdictgate.decision_rules import DecisionRule
from verdictgate.engine import assess_in_rounds, decided_round
from verdictgate.otel.span_decoding import run_declaration
from verdictgate.otel.spans import run_attributes
from verdictgate.reports import render_markdown, render_text
from verdictgate.reports.html import render_html
from verdictgate.reports.json_report import report_document
from verdictgate.span_facts import SpanFacts
from verdictgate.stats import Method, pairs_needed
from verdictgate.suite import Case
from verdictgate.ties import matches_route

ROOT = "00000000000000ff"
MS = 1_000_000
REFUND = ("lookup_order", "issue_refund")
STABLE = "lookup_order > issue_refund"


def called(case: str, index: int, tools: tuple[str, ...], tied: bool, ids: random.Random):
    """The trial of an agent that called `tools` in that order, its spans 2 ms apart or all in
    one millisecond (`tied`), with random span ids, its path derived as the receiver does."""
    spans = [SpanFacts(f"{1:016x}", ROOT, 0, agent="router")]
    for step, tool in enumerate(tools):
        start = 5 * MS if tied else (5 + 2 * step) * MS
        spans.append(SpanFacts(f"{ids.randrange(2, 1 << 60):016x}", ROOT, start, tool=tool))
    derived = DecisionRule.parse("tools").derive(spans, ROOT)
    return Trial(case, index, derived.decision, "r", tied_steps=derived.tied_steps)


def refund_suite(refund_cases: int, escalate_cases: int, *allowed: str) -> Suite:
    cases = [Case(f"refund-{n}", None, STABLE) for n in range(refund_cases)]
    cases += [Case(f"escalate-{n}", None, "escalate") for n in range(escalate_cases)]
    return Suite("s", "p", tuple(cases), Contract({*(allowed or (STABLE,)), "escalate"}))


def test_a_stable_order_the_contract_allows_is_not_rejected_when_some_trials_tie() -> None:
    """lookup_order then issue_refund, always; in three cases one trial's two spans started in
    the same millisecond, which canonical order names issue_refund > lookup_order. That name
    was outside the contract (rejected); the contract now reads it in either order, and the
    three pairs that agree only up to it are left out of the change rate (at a 20% tolerance,
    which they would not breach even as flips)."""
    ids = random.Random(3)
    trials = []
    for n in range(10):
        trials += [called(f"refund-{n}", i, REFUND, n < 3 and i == 5, ids) for i in range(8)]
        trials += [called(f"escalate-{n}", i, ("escalate",), False, ids) for i in range(8)]
    assessment = assess(trials, refund_suite(10, 10), Policy(tolerance=0.2))
    assert assessment.status is Status.QUALIFIED, assessment.reasons
    assert assessment.coverage.unknown == ()
    assert assessment.coverage.observed == ("escalate", STABLE)
    assert (assessment.pooled.pairs, assessment.pooled.flips) == (77, 0)
    assert assessment.ambiguous_pairs == 3
    assert "3 rerun pairs equal only up to the order of tied steps" in assessment.headline
    document = report_document(assessment)
    assert document["stability"]["pooled"]["ambiguous_pairs"] == 3
    routes = {route["route"]: route for route in document["stability"]["routes"]}
    assert (routes[STABLE]["pairs"], routes[STABLE]["ambiguous_pairs"]) == (37, 3)
    assert sum(case["ambiguous_pairs"] for case in document["cases"]) == 3
    assert {case["case"] for case in document["cases"] if case["ambiguous_pairs"]} == {
        "refund-0",
        "refund-1",
        "refund-2",
    }
    assert "unordered" in render_text(assessment) and "unordered" in render_html(assessment)
    assert f"| {STABLE} | 10 | 37 | 0 | 3 |" in render_markdown(assessment)


def test_a_coin_flip_order_whose_spans_always_tie_is_never_qualified() -> None:
    """Each trial calls the two tools in either order, by a coin, always in one millisecond:
    canonical order reads one path, so the run showed 0 flips in 82 pairs and qualified. No
    pair of them can be ordered now: none is counted, and the run says why and what to
    record."""
    ids, coin = random.Random(5), random.Random(11)
    trials = [
        called(f"c{n}", i, REFUND if coin.random() < 0.5 else REFUND[::-1], True, ids)
        for n in range(10)
        for i in range(16)
    ]
    trials += [called(f"e{n}", i, ("escalate",), False, ids) for n in range(2) for i in range(2)]
    assessment = assess(trials)
    assert assessment.status is Status.INCONCLUSIVE
    assert (assessment.pooled.pairs, assessment.ambiguous_pairs) == (2, 80)
    assert assessment.reason_codes[0] == "ambiguous_order"
    assert RULE_OF["ambiguous_order"].effect is Status.INCONCLUSIVE
    assert assessment.reasons[0].message.startswith("80 rerun pairs could not be ordered")
    assert assessment.headline.startswith("Inconclusive: 80 rerun pairs could not be ordered")
    step = next(s for s in assessment.next_steps if "started in the same instant" in s)
    assert "finer than a millisecond" in step and "end one tool span before" in step
    assert sum("started in the same instant" in s for s in assessment.next_steps) == 1
    assert report_document(assessment)["stability"]["pooled"]["ambiguous_pairs"] == 80


pattern = st.lists(  # per case, per trial: (its two spans tied, the coin's order)
    st.lists(st.tuples(st.booleans(), st.booleans()), min_size=2, max_size=12),
    min_size=1,
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(pattern, st.integers(0, 2**32 - 1))
def test_a_coin_flip_order_counts_only_the_pairs_its_telemetry_orders(cases, seed) -> None:
    """Any mix of tied and untied trials of a coin-flip order: a pair in which a trial tied is
    ambiguous, whatever the coin said; the change rate is that of the untied pairs alone, so
    the run is never qualified on a tied pair, and one whose every pair tied never is."""
    ids = random.Random(seed)
    trials = [
        called(f"c{n}", i, REFUND[::-1] if reverse else REFUND, tied, ids)
        for n, row in enumerate(cases)
        for i, (tied, reverse) in enumerate(row)
    ]
    pairs = [(row[i], row[i + 1]) for row in cases for i in range(0, len(row) - 1, 2)]
    untied = [(a, b) for a, b in pairs if not (a[0] or b[0])]
    assessment = assess(trials, policy=Policy(tolerance=0.2))
    assert assessment.ambiguous_pairs == len(pairs) - len(untied)
    assert assessment.pooled.pairs == len(untied)
    assert assessment.pooled.flips == sum(a[1] != b[1] for a, b in untied)
    alone = assess(
        [t for t in trials if not t.tied_steps], policy=Policy(tolerance=0.2)
    ).pooled  # the same untied pairs, once the tied trials are gone
    assert (assessment.pooled.pairs, assessment.pooled.flips) == (alone.pairs, alone.flips)
    if not untied:
        assert assessment.status is not Status.QUALIFIED
        assert "ambiguous_order" in assessment.reason_codes


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([0.5, 0.9, 1.0]), st.integers(0, 2**32 - 1))
def test_a_coin_flip_order_mostly_tied_is_never_qualified(tie_chance, seed) -> None:
    """With 90% of trials tied the old comparison qualified a coin flip 74.5% of the time (and
    always when all were tied); counted on its ordered pairs alone it never qualifies."""
    rng = random.Random(seed)
    trials = [
        called(
            f"c{n}",
            i,
            REFUND[::-1] if rng.random() < 0.5 else REFUND,
            rng.random() < tie_chance,
            rng,
        )
        for n in range(20)
        for i in range(20)
    ]
    trials += [called(f"e{n}", i, ("escalate",), False, rng) for n in range(4) for i in range(20)]
    assessment = assess(trials)
    assert assessment.status is not Status.QUALIFIED


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(st.booleans(), min_size=2, max_size=10), min_size=2, max_size=4),
    st.integers(0, 2**32 - 1),
)
def test_ties_never_reject_a_stable_agent(tied_by_case, seed) -> None:
    """A stable agent within its contract, whichever of its trials tied: no flip, nothing
    outside the contract or unreached, never rejected."""
    ids = random.Random(seed)
    trials = [
        called(f"refund-{n}", i, REFUND, tied, ids)
        for n, row in enumerate(tied_by_case)
        for i, tied in enumerate(row)
    ]
    trials += [
        called(f"escalate-{n}", i, ("escalate",), False, ids)
        for n in range(len(tied_by_case))
        for i in range(2)
    ]
    suite = refund_suite(len(tied_by_case), len(tied_by_case))
    assessment = assess(trials, suite, Policy(tolerance=0.2))
    assert assessment.status is not Status.REJECTED, assessment.reasons
    assert assessment.pooled.flips == 0 and assessment.coverage.satisfied


def test_a_tied_path_two_allowed_orders_fit_reaches_neither_and_misses_neither() -> None:
    """The contract allows both orders and every trial tied: which one the agent took is not
    known, so neither route is shown reached (that was a rejection: no trial reached
    lookup_order > issue_refund) nor missing; the run is inconclusive."""
    ids = random.Random(1)
    reverse = " > ".join(REFUND[::-1])
    trials = [called("refund-0", i, REFUND, True, ids) for i in range(4)]
    trials += [called("escalate-0", i, ("escalate",), False, ids) for i in range(4)]
    suite = refund_suite(1, 1, STABLE, reverse)
    suite = Suite("s", "p", (*suite.cases, Case("refund-1", None, reverse)), suite.contract)
    trials += [called("refund-1", i, REFUND[::-1], True, ids) for i in range(4)]
    assessment = assess(trials, suite)
    assert assessment.status is Status.INCONCLUSIVE, assessment.reasons
    assert assessment.coverage.unordered == (reverse, STABLE)
    assert assessment.coverage.missing_observed == () and not assessment.coverage.satisfied
    assert "ambiguous_order" in assessment.reason_codes
    assert report_document(assessment)["coverage"]["unordered"] == [reverse, STABLE]
    assert "| contract | ⚠️ undecided |" in render_markdown(assessment)


paths = st.lists(st.sampled_from("abc"), min_size=1, max_size=5).map(tuple)


@st.composite
def tied_path(draw, length: int | None = None):
    """A path and tied ranges within it, in order and apart, of two steps or more."""
    path = (
        draw(paths)
        if length is None
        else tuple(draw(st.sampled_from("abc")) for _ in range(length))
    )
    cuts = sorted(draw(st.sets(st.integers(0, len(path)), max_size=4)))
    ranges = tuple(
        (a, b) for a, b in itertools.pairwise(cuts) if b - a >= 2 and draw(st.booleans())
    )
    return path, ranges


def orders(path: tuple[str, ...], ranges) -> set[tuple[str, ...]]:
    """Every path the tied ranges allow, enumerated."""
    found = {path}
    for start, end in ranges:
        found = {
            p[:start] + perm + p[end:]
            for p in found
            for perm in itertools.permutations(p[start:end])
        }
    return found


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_pair_is_ambiguous_exactly_when_some_orders_of_its_ties_make_one_path(data) -> None:
    """Against every order enumerated: a pair with a tie of two different steps is ambiguous
    when some order of each trial's ties makes them equal (overlapping ranges included), else
    a flip; and a tied path is a route exactly when some order of it is."""
    a, ranges_a = data.draw(tied_path())
    b, ranges_b = data.draw(tied_path(len(a)) if data.draw(st.booleans()) else tied_path())
    assessment = assess(
        [Trial("c", 0, a, tied_steps=ranges_a), Trial("c", 1, b, tied_steps=ranges_b)]
    )
    unordered = any(len(set(p[s:e])) > 1 for p, r in ((a, ranges_a), (b, ranges_b)) for s, e in r)
    meet = bool(orders(a, ranges_a) & orders(b, ranges_b))
    want = (int(meet), int(not meet)) if unordered else (0, int(a != b))
    assert (assessment.ambiguous_pairs, assessment.pooled.flips) == want
    route = " > ".join(b)
    assert matches_route(a, ranges_a, route) == (b in orders(a, ranges_a))


def test_pairs_that_tie_are_not_counted_on_to_qualify_a_curtailed_run() -> None:
    """A plan of 36 pairs would qualify at 10% with none changing (35 needed); two are already
    left out for ties, so at most 34 can count: the run can no longer qualify."""
    suite = Suite("s", "p", (Case("c", None, STABLE),), Contract({STABLE}))
    policy = Policy(tolerance=0.1)
    ids = random.Random(2)
    tied = assess([called("c", i, REFUND, i < 3, ids) for i in range(4)], suite, policy)
    assert tied.ambiguous_pairs == 2
    assert not can_still_qualify(tied, suite, {"c": 36}, policy)
    untied = assess([called("c", i, REFUND, False, ids) for i in range(4)], suite, policy)
    assert can_still_qualify(untied, suite, {"c": 36}, policy)


def test_the_sequential_rule_never_stops_on_pairs_it_cannot_order() -> None:
    """Judged round by round by the sequential rule, a coin-flip order whose spans always tie
    reaches no decision at any round (none of its pairs counts), and a stable one with a tie
    in its first round stops qualified on the pairs it can count."""
    suite = Suite("s", "p", (Case("c"),))
    declaration = run_declaration(
        run_attributes(
            "r",
            suite,
            Policy(tolerance=0.1, method=Method.SEQUENTIAL),
            400,
            Isolation.FRESH_SESSION,
        )
    )
    ids, coin = random.Random(4), random.Random(9)
    flipping = [
        called("c", i, REFUND if coin.random() < 0.5 else REFUND[::-1], True, ids)
        for i in range(400)
    ]
    judged, rounds = assess_in_rounds(Evidence(flipping), declaration)
    assert (rounds, judged.status, judged.pooled.pairs) == (200, Status.INCONCLUSIVE, 0)
    assert judged.ambiguous_pairs == 200 and "ambiguous_order" in judged.reason_codes
    stable = [called("c", i, REFUND, i == 0, ids) for i in range(400)]
    judged, rounds = assess_in_rounds(Evidence(stable), declaration)
    assert judged.status is Status.QUALIFIED
    assert (judged.pooled.pairs, judged.ambiguous_pairs) == (rounds - 1, 1)


def test_a_targeted_route_left_undecided_by_its_tied_pairs_is_named() -> None:
    """A targeted route whose pairs mostly tie: the run is inconclusive, the reason names the
    route, and the step asking for more pairs says the tied ones count as changes there (the
    pooled rate, shown on its countable pairs, is shown only if they agreed)."""
    ids = random.Random(6)
    suite = Suite(
        "s",
        "p",
        (Case("refund", None, STABLE), Case("escalate", None, "escalate")),
        Contract({STABLE, "escalate"}, targets={STABLE: 0.2}),
    )
    trials = [called("refund", i, REFUND, i % 4 < 2 or i >= 8, ids) for i in range(40)]
    trials += [called("escalate", i, ("escalate",), False, ids) for i in range(80)]
    assessment = assess(trials, suite, Policy(tolerance=0.1))
    route = next(r for r in assessment.routes if r.route == STABLE)
    assert (route.change.pairs, route.ambiguous_pairs) == (2, 18)
    assert "ambiguous_order" in assessment.reason_codes
    reason = next(r for r in assessment.reasons if r.code == "ambiguous_order")
    assert f"without them route {STABLE} is not decided" in reason.message
    assert "the pooled change rate is shown below 10% only if they agreed" in reason.message
    assert any(f"route {STABLE}" in s and "(18 so far)" in s for s in assessment.next_steps)


@pytest.mark.parametrize("claim", list(Claim))
def test_coin_flips_whose_spans_always_tie_never_qualify_beside_stable_cases(claim) -> None:
    """20 cases call the two tools in either order by a coin, always in one millisecond (none
    of their pairs can be ordered), beside 40 stable cases that never tie. Left out, the
    coin-flip pairs hid every flip: the countable pairs show the pooled change rate and the
    case-level one below 10%, and the run qualified under either claim. Counted as flips they
    show neither: inconclusive (never rejected: no flip was seen), saying why."""
    ids, coin = random.Random(7), random.Random(13)
    trials = [
        called(f"coin-{n}", i, REFUND if coin.random() < 0.5 else REFUND[::-1], True, ids)
        for n in range(20)
        for i in range(4)
    ]
    trials += [called(f"stable-{n}", i, REFUND, False, ids) for n in range(40) for i in range(4)]
    assessment = assess(trials, policy=Policy(tolerance=0.1, claim=claim))
    assert (assessment.pooled.pairs, assessment.pooled.flips) == (80, 0)
    assert assessment.ambiguous_pairs == 40
    claimed = assessment.pooled if claim is Claim.TESTED else assessment.population
    assert claimed.result is Stability.DETERMINISTIC  # on the countable pairs alone
    assert assessment.status is Status.INCONCLUSIVE
    assert assessment.reason_codes == ("ambiguous_order",)
    message = assessment.reasons[0].message
    assert message.startswith("40 rerun pairs could not be ordered")
    shown = (
        "the pooled change rate is shown below 10%"
        if claim is Claim.TESTED
        else "new inputs are shown to change below 10%"
    )
    assert f"{shown} only if they agreed (counted as changes: " in message
    assert any("finer than a millisecond" in step for step in assessment.next_steps)
    document = report_document(assessment)
    worst = document["stability"]["pooled"]["worst_case"]
    assert (worst["pairs"], worst["flips"]) == (120, 40)
    assert worst["result"] != "deterministic"
    assert document["population"]["worst_case"]["result"] != "deterministic"
    assert document["population"]["worst_case"]["cases"] == 60


def test_a_stable_agent_with_a_few_ties_is_qualified_once_they_could_not_hide_flips() -> None:
    """A stable agent, one trial of each of three cases tied. Over 80 pairs, those three as
    flips would keep the pooled change rate from being shown below 10%: inconclusive, never
    rejected, naming them and what to do (record the order; or collect the pairs that show it
    even so). With those pairs collected the run is qualified, its headline saying why."""

    def run(trials_per_case: int):
        ids = random.Random(8)
        trials = []
        for n in range(10):
            trials += [
                called(f"refund-{n}", i, REFUND, n < 3 and i == 1, ids)
                for i in range(trials_per_case)
            ]
            trials += [
                called(f"escalate-{n}", i, ("escalate",), False, ids)
                for i in range(trials_per_case)
            ]
        return assess(trials, refund_suite(10, 10), Policy(tolerance=0.1))

    few = run(8)
    pairs = 20 * 8 // 2
    assert (few.pooled.pairs, few.ambiguous_pairs) == (pairs - 3, 3)
    assert few.pooled.result is Stability.DETERMINISTIC  # it qualified before
    assert few.status is Status.INCONCLUSIVE and few.reason_codes == ("ambiguous_order",)
    assert few.reasons[0].message.startswith("3 rerun pairs could not be ordered")
    assert (
        "the pooled change rate is shown below 10% only if they agreed "
        f"(counted as changes: 3 of {pairs} pairs changed" in few.reasons[0].message
    )
    assert any("finer than a millisecond" in step for step in few.next_steps)
    step = next(s for s in few.next_steps if s.startswith("Collect"))
    assert "counts as a change here (3 so far)" in step
    found = re.search(r"for the pooled change rate \(\d+ calls, about (\d+) more trials", step)
    assert found is not None
    enough = run(8 + int(found.group(1)))
    assert enough.status is Status.QUALIFIED, enough.reasons
    assert enough.ambiguous_pairs == 3
    assert "counted as changes, the run would still be qualified" in enough.headline
    worst = report_document(enough)["stability"]["pooled"]["worst_case"]
    assert (worst["flips"], worst["result"]) == (3, "deterministic")


# per case: a coin flip (else stable), its route, its trials, which of them tied, the coin's bits
mixes = st.lists(
    st.tuples(
        st.sampled_from([False, False, False, True]),
        st.sampled_from([None, None, "other", "targeted"]),
        st.integers(2, 24),
        st.sets(st.integers(0, 23), max_size=3),
        st.integers(0, 2**24 - 1),
    ),
    min_size=1,
    max_size=16,
)


@settings(max_examples=200, deadline=None)
@given(mixes, st.sampled_from(list(Method)), st.sampled_from(list(Claim)))
def test_a_qualified_run_stays_qualified_when_its_unordered_pairs_are_flips(
    cases, method, claim
) -> None:
    """Any mix of stable and coin-flip cases, routes (one with its own target) and ties, under
    every method and claim: a run qualified beside its pairs that could not be ordered is
    qualified still when each of those is a real flip (the same trials, none tied, the second
    of each such pair in the other order), one held back by them alone is not, and ties never
    reject a stable agent."""
    recorded, as_flips = [], []
    for n, (coin, route, length, ties, bits) in enumerate(cases):
        tied = [i in ties for i in range(length)]
        paths = [
            tuple(sorted(REFUND)) if tied[i] else REFUND[::-1] if coin and bits >> i & 1 else REFUND
            for i in range(length)
        ]
        for i, path in enumerate(paths):
            ranges = ((0, 2),) if tied[i] else ()
            recorded.append(Trial(f"c{n}", i, path, "r", route, tied_steps=ranges))
            if i % 2 and (tied[i] or tied[i - 1]):
                path = REFUND if paths[i - 1] != REFUND else REFUND[::-1]
            as_flips.append(Trial(f"c{n}", i, path, "r", route))
    recorded += [Trial("escalate", i, "escalate", "r") for i in range(2)]  # never one decision
    as_flips += recorded[-2:]
    tolerance = 0.24 if method is Method.SEQUENTIAL else 0.35
    policy = Policy(tolerance=tolerance, method=method, claim=claim, dominance_threshold=1.0)
    suite = Suite("s", "p", (), Contract(targets={"targeted": 0.24}))
    judged = assess(recorded, suite, policy, planned_trials=len(recorded))
    flipped = assess(as_flips, suite, policy, planned_trials=len(as_flips))
    if judged.status is Status.QUALIFIED:
        assert flipped.status is Status.QUALIFIED, flipped.reasons
    if judged.reason_codes == ("ambiguous_order",):  # qualified on the countable pairs alone
        assert flipped.status is not Status.QUALIFIED
    if not any(coin for coin, *_ in cases):
        assert judged.status is not Status.REJECTED, judged.reasons


def test_a_sequential_run_never_stops_qualified_on_a_round_whose_worst_case_is_not() -> None:
    """Judged round by round by the sequential rule, a stable agent whose first three rounds
    tied does not stop where its countable pairs first show it below 10%, but only at the first
    round where they would with those three as flips."""
    suite = Suite("s", "p", (Case("c"),))
    declaration = run_declaration(
        run_attributes(
            "r",
            suite,
            Policy(tolerance=0.1, method=Method.SEQUENTIAL),
            400,
            Isolation.FRESH_SESSION,
        )
    )
    ids = random.Random(12)
    evidence = Evidence([called("c", i, REFUND, i < 6 and i % 2 == 0, ids) for i in range(400)])
    judged, rounds = assess_in_rounds(evidence, declaration)
    assert judged.status is Status.QUALIFIED and judged.ambiguous_pairs == 3
    assert rounds > 3 + pairs_needed(0.1, method=Method.SEQUENTIAL)
    assert report_document(judged)["stability"]["pooled"]["worst_case"]["result"] == "deterministic"
    assert decided_round(evidence, declaration, 1, rounds - 1) is None
    before, _ = assess_in_rounds(evidence.prefix(2 * (rounds - 1)), declaration)
    assert before.reason_codes == ("ambiguous_order",)


def test_a_curtailed_run_can_no_longer_qualify_once_its_worst_case_cannot() -> None:
    """A plan a few pairs over what 10% needs, none changing, keeps enough countable pairs
    after two ties; but those two, counted as flips, keep it from showing 10%: it can no longer
    qualify. A plan large enough for two flips still can."""
    suite = Suite("s", "p", (Case("c", None, STABLE),), Contract({STABLE}))
    policy = Policy(tolerance=0.1)
    ids = random.Random(2)
    tied = assess([called("c", i, REFUND, i < 3, ids) for i in range(4)], suite, policy)
    assert tied.ambiguous_pairs == 2
    assert not can_still_qualify(tied, suite, {"c": pairs_needed(0.1) + 4}, policy)
    assert can_still_qualify(tied, suite, {"c": 3 * pairs_needed(0.1)}, policy)
