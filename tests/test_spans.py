"""Span attribute encoding and decoding round-trip; bad attributes raise ValueError only."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verdictgate import Contract, Isolation, NoDecision, Policy, Suite, Trial
from verdictgate.otel import conventions as names
from verdictgate.otel.span_decoding import run_declaration, trial_from_attributes
from verdictgate.otel.spans import (
    decision_attributes,
    flat_ranges,
    run_attributes,
    trial_attributes,
)

labels = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
    min_size=1,
    max_size=10,
)
routes = st.frozensets(labels.filter(lambda s: "=" not in s), max_size=4)


@st.composite
def contracts(draw):
    allowed = draw(routes)
    subset = (
        st.frozensets(st.sampled_from(sorted(allowed)), max_size=len(allowed))
        if allowed
        else st.just(frozenset())
    )
    return Contract(
        allowed=allowed,
        required=draw(subset),
        critical=draw(subset),
        targets=draw(st.dictionaries(st.sampled_from(sorted(allowed)), st.floats(0.001, 0.5)))
        if allowed
        else {},
        minimum_cases=draw(st.dictionaries(st.sampled_from(sorted(allowed)), st.integers(0, 9)))
        if allowed
        else {},
        allowed_no_decisions=draw(routes),
    )


@given(
    contracts(),
    st.floats(0.001, 0.5),
    st.floats(0.5, 0.999),
    st.integers(0, 10**6),
    st.sampled_from(list(Isolation)),
)
def test_run_attributes_round_trip(contract, tolerance, confidence, planned, isolation):
    policy = Policy(tolerance=tolerance, confidence=confidence)
    suite = Suite("suite name", "point", (), contract, tolerance)
    declared = run_declaration(run_attributes("run-9", suite, policy, planned, isolation))
    assert declared.suite == suite and declared.policy == policy
    assert (declared.planned_trials, declared.isolation, declared.planned_cases) == (
        planned,
        isolation,
        0,
    )


verdicts = labels.filter(str.strip)  # a blank label is not a decision
decisions = st.one_of(
    verdicts,
    st.none(),
    st.builds(NoDecision, labels),
    st.lists(verdicts, min_size=1, max_size=3).map(tuple),
)


@given(labels, st.integers(0, 10**6), decisions, labels, st.none() | labels, labels)
def test_decision_attributes_round_trip(case, index, decision, run, expected, error_type):
    attributes = {
        names.RUN_ID: run,
        names.CASE_ID: case,
        names.TRIAL: index,
        **({names.CASE_EXPECTED: expected} if expected else {}),
        **decision_attributes(decision, error_type),
    }
    trial = trial_from_attributes(attributes)
    assert trial == Trial(
        case, index, decision, run, expected, error_type if decision is None else None
    )


attribute_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    labels,
    st.lists(labels, max_size=3),
    st.lists(st.integers(-2, 5), max_size=5),
)
keys = st.sampled_from(
    [
        names.RUN_ID,
        names.CASE_ID,
        names.TRIAL,
        names.OUTCOME,
        names.VERDICT,
        names.TOOLS,
        names.TOLERANCE,
        names.CONFIDENCE,
        names.CONTRACT_TARGETS,
        names.CONTRACT_ALLOWED,
        names.ISOLATION,
        names.PLAN_TRIALS,
        names.TIED_STEPS,
        names.CASE_ALIASES,
        names.CASE_KEY_ID,
    ]
)


@settings(max_examples=500)
@given(st.dictionaries(keys, attribute_values))
def test_arbitrary_attributes_decode_or_raise_value_error(attributes):
    for decode in (trial_from_attributes, run_declaration):
        with contextlib.suppress(ValueError):
            decode(attributes)


@given(
    st.lists(verdicts, min_size=2, max_size=5).flatmap(
        lambda path: st.tuples(st.just(tuple(path)), st.integers(0, len(path) - 2))
    )
)
def test_tied_steps_round_trip_and_bad_ones_are_refused(path_and_start) -> None:
    path, start = path_and_start
    trial = Trial("c", 0, path, "r", tied_steps=((start, start + 2),))
    attributes = {
        names.RUN_ID: "r",
        names.CASE_ID: "c",
        names.TRIAL: 0,
        **decision_attributes(path),
        names.TIED_STEPS: flat_ranges(trial.tied_steps),
    }
    assert trial_from_attributes(attributes) == trial
    for bad in ([start], [start, len(path) + 1], [start + 1, start], "0,2"):
        with pytest.raises(ValueError, match=names.TIED_STEPS):
            trial_from_attributes({**attributes, names.TIED_STEPS: bad})


names_of_inputs = st.lists(labels.filter(str.strip), max_size=16, unique=True)


@given(
    labels.filter(str.strip),
    names_of_inputs,
    st.none() | st.text("0123456789abcdef", min_size=16, max_size=16),
)
def test_a_case_s_further_names_and_key_id_round_trip_and_bad_ones_are_refused(
    case, aliases, key
) -> None:
    trial = Trial(case, 0, "a", "r", aliases=tuple(sorted(set(aliases) - {case})), key_id=key)
    attributes = trial_attributes(trial)
    assert trial_from_attributes(attributes) == trial
    twice = {**attributes, names.CASE_ALIASES: [*aliases[:7], case, *aliases[:7]]}
    once = tuple(sorted(set(aliases[:7]) - {case}))
    assert trial_from_attributes(twice).aliases == once  # each once, the case left out
    for bad in ([" "], ["a"] * 17, [1], "x" * 4097):
        with pytest.raises(ValueError, match=names.CASE_ALIASES):
            trial_from_attributes({**attributes, names.CASE_ALIASES: bad})
    for bad in ("0123", "0123456789ABCDEF", 7, ["0123456789abcdef"]):
        with pytest.raises(ValueError, match=names.CASE_KEY_ID):
            trial_from_attributes({**attributes, names.CASE_KEY_ID: bad})
