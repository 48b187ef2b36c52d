"""What the EvidenceProcessor keeps of an ended span until its worker reads it: the attributes
it reads, never the span (an SDK `ReadableSpan` of a decision holds about 3 KiB)."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from ..wire_types import Attributes, AttributeValue
from . import conventions as names

CASE_KEYS = (
    names.RUN_ID,
    names.SUITE,
    names.POINT,
    names.CASE_ID,
    names.CASE_EXPECTED,
    names.CASE_ALIASES,
    names.CASE_KEY_ID,
    names.OUTCOME,
    names.VERDICT,
    names.TOOLS,
    names.NO_DECISION_REASON,
    names.ERROR_TYPE,
    names.PASSED,
    names.EVALUATION_SKIPPED,
    names.TIED_STEPS,
    names.INVARIANT_FAILED,
    names.INVARIANT_WARNED,
)
"""The attributes a decision's trial is read from, but its index: the values the trials of one
case with one answer have in common."""

SHARED_KEPT = 4096
"""How many distinct `CASE_KEYS` values a reader keeps to share (it then starts afresh)."""

Shared = tuple[AttributeValue | None, ...]
"""The values of `CASE_KEYS` on one span, None where absent."""

Decided = tuple[Shared, AttributeValue | None, int]
"""An ended decision span's facts: its `CASE_KEYS` values, its trial index, and its duration in
nanoseconds (a plain tuple: the cheapest to build on the caller's thread)."""


def plain(attributes: Attributes) -> dict[str, AttributeValue]:
    """Span attributes as a plain dict (one copy; reading the SDK's mapping key by key is
    slower)."""
    if attributes is None:
        return {}
    copy_ = getattr(attributes, "copy", None)
    return copy_() if copy_ is not None else dict(attributes)


class DecisionReader:
    """Reads ended decision spans into their facts on the caller's thread: one copy of the
    attributes and a lookup of the values it reads, which the spans of one case with one answer
    share (a new string per call, as a trial scope makes, is kept once, not once a trial)."""

    def __init__(self) -> None:
        self._shared: dict[Shared, Shared] = {}

    def facts(self, span: ReadableSpan) -> Decided:
        """The facts the worker reads of `span`."""
        attributes = plain(span.attributes)
        values = tuple(map(attributes.get, CASE_KEYS))
        shared = self._shared
        if len(shared) >= SHARED_KEPT:
            shared.clear()
        index, elapsed = attributes.get(names.TRIAL), (span.end_time or 0) - (span.start_time or 0)
        try:
            return shared.setdefault(values, values), index, elapsed
        except TypeError:  # a list among them (a span made by hand): kept, not shared
            return values, index, elapsed


def attributes_of(facts: Decided) -> dict[str, AttributeValue]:
    """The attributes a decision span's facts kept, as the span had them."""
    shared, index, _ = facts
    attributes: dict[str, AttributeValue] = {
        key: value for key, value in zip(CASE_KEYS, shared, strict=True) if value is not None
    }
    if index is not None:
        attributes[names.TRIAL] = index
    return attributes
