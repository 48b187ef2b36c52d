"""Trials whose decision the spans of an agent framework make, read in a receiver.

An agent in another process exports its framework's spans (Strands, LangGraph, the OpenAI
Agents SDK) through a collector; the harness that called it exports a `verdictgate.trial` span
in the same trace, around the call. The receiver keeps the name facts of the framework spans and
the trial span's identity (`TrialMark`), never content; once the trial span has arrived and the
trace has been quiet for a settle time, the rule on the trial span derives its decision from the
spans below it, and the trial is stored like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from ..decision_rules import DecisionRule, Derived
from ..errors import VerdictgateError
from ..evidence import MAX_TRIAL_INDEX
from ..otel import conventions as names
from ..span_facts import SpanFacts, children_index, descendants
from ..trial_model import Trial
from ..wire_types import AttributeValue

TRIAL_MARK_KEYS = (
    names.RUN_ID,
    names.CASE_ID,
    names.TRIAL,
    names.CASE_EXPECTED,
    names.SUITE,
    names.POINT,
    names.DECISION_RULE,
    names.ERROR_TYPE,
)
"""What a trial span is read for; nothing else of it is decoded."""


class TrialMark(msgspec.Struct, frozen=True, gc=False):
    """A harness's trial span: which trial the framework spans below it decide, and how."""

    trace_id: str
    span_id: str
    run: str
    case: str
    index: int
    rule: str
    expected: str | None = None
    suite: str | None = None
    point: str | None = None
    latency_ms: float | None = None
    error_type: str | None = None
    """The harness's call failed (the trial span's `error.type`): an error trial whatever the
    spans below say."""


class FrameworkSpan(msgspec.Struct, frozen=True, gc=False):
    """The name facts of one framework span, with its trace."""

    trace_id: str
    facts: SpanFacts


def trial_mark(
    trace_id: str, span_id: str, attributes: Mapping[str, AttributeValue], latency_ms: float | None
) -> TrialMark:
    """The mark a trial span's attributes make; ValueError names what is wrong."""
    run, case, index = (attributes.get(k) for k in (names.RUN_ID, names.CASE_ID, names.TRIAL))
    if type(run) is not str or not run:
        raise ValueError(f"{names.RUN_ID} must be a non-empty string")
    if type(case) is not str or not case:
        raise ValueError(f"{names.CASE_ID} must be a non-empty string")
    if type(index) is not int or not 0 <= index <= MAX_TRIAL_INDEX:
        raise ValueError(f"{names.TRIAL} must be an integer in 0..{MAX_TRIAL_INDEX}")
    text = attributes.get(names.DECISION_RULE)
    if type(text) is not str:
        raise ValueError(f"{names.DECISION_RULE} must name a decision rule")
    try:
        rule = DecisionRule.parse(text)
    except VerdictgateError as error:
        raise ValueError(str(error)) from None
    if rule.key is not None:
        raise ValueError(
            "attribute rules are derived in process (`run --decision`); a receiver keeps names only"
        )
    optional = {}
    for key, field in (
        (names.CASE_EXPECTED, "expected"),
        (names.SUITE, "suite"),
        (names.POINT, "point"),
        (names.ERROR_TYPE, "error_type"),
    ):
        value = attributes.get(key)
        if value is not None and type(value) is not str:
            raise ValueError(f"{key} must be a string")
        optional[field] = value
    return TrialMark(
        trace_id, span_id, run, case, index, str(rule), latency_ms=latency_ms, **optional
    )


def settled_trials(
    marks: Iterable[TrialMark], facts: list[SpanFacts]
) -> tuple[list[Trial], dict[str, list[str]]]:
    """The trials of one trace that settle, each mark decided by the spans below it (`facts`:
    those spans, or more of the trace), and the span ids below each mark (the spans indexed
    once, so settling costs what they are, not that times the trials)."""
    children = children_index(facts)
    trials, below = [], {}
    for mark in marks:
        rule = DecisionRule.parse(mark.rule)
        subtree = descendants(children, mark.span_id)
        below[mark.span_id] = [fact.span_id for fact in subtree]
        derived = rule.derive(subtree, mark.span_id)
        if mark.error_type is not None:
            derived = Derived(None, mark.error_type)
        trials.append(
            Trial(
                mark.case,
                mark.index,
                derived.decision,
                mark.run,
                expected=mark.expected,
                error_type=derived.error_type,
                latency_ms=mark.latency_ms,
                tied_steps=derived.tied_steps,
            )
        )
    return trials, below
