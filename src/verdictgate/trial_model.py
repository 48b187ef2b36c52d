"""One trial of a bounded decision (the record every source produces), and its decision key."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

import msgspec

from .errors import InvalidDecision, LabelOutOfBounds


class Outcome(str, Enum):
    """How a trial ended."""

    DECISION = "decision"
    NO_DECISION = "no_decision"
    ERROR = "error"


class Isolation(str, Enum):
    """How reruns of a case were kept apart; a shared session makes them dependent."""

    FRESH_SESSION = "fresh-session"
    FRESH_INSTANCE = "fresh-instance"
    SHARED_SESSION = "shared-session"
    UNKNOWN = "unknown"


class NoDecision(msgspec.Struct, frozen=True, gc=False):
    """An agent's explicit refusal to decide, with a short machine reason (e.g. `refused`)."""

    reason: str = "unspecified"

    def __str__(self) -> str:
        return f"no_decision:{self.reason}"


Decision = str | tuple[str, ...] | NoDecision
"""A decision key: a label, an ordered tool path, or a no-decision with its reason."""

NO_TOOL_SELECTED = NoDecision("no_tool_selected")
"""What an empty tool path decides: no tool was chosen."""


MAX_LABEL = 4096
"""Longest label, tool name or no-decision reason a decision holds, from every source (a
receiver's string attributes have the same limit)."""
MAX_PATH_STEPS = 256
"""Most steps a decided path holds, from every source (a receiver's array attributes have the
same limit)."""
MAX_ALIASES = 16
"""Most further names of its input a trial carries (`Trial.aliases`)."""

Answer = Any  # boundary: user code
"""An agent's answer (or the input it was given) as a function of the user's receives it: a
`verdict=` reader, an invariant's or a judge's check, a semantic tier's `text=`. `Any`, so that a
function typed for its own agent (`def check(output: str, given: str) -> bool`) is accepted;
verdictgate itself holds an answer as `object`, and reads a decision out of it with
`decision_from_value`."""


def decision_from_value(value: object) -> Decision:
    """The one rule that turns a raw value into a decision key: a string that is not blank is a
    label; a list or tuple of such strings is an ordered tool path, and an empty one is the
    no-decision `no_tool_selected`; a NoDecision is itself; a mapping decides by its `verdict`
    or its `tools`, or is `{kind: no_decision, reason}`. Anything else raises InvalidDecision;
    a label no source may carry (`bounded_label`, or a path of more than MAX_PATH_STEPS steps),
    LabelOutOfBounds."""
    if isinstance(value, str):
        if not value.strip():
            raise InvalidDecision("an empty label is not a decision")
        return bounded_label(value, "a label")
    if isinstance(value, NoDecision):
        return value
    if isinstance(value, (list, tuple)):
        if not value:
            return NO_TOOL_SELECTED
        if not all(isinstance(step, str) and step.strip() for step in value):
            raise InvalidDecision("a tool path holds non-empty tool names only")
        if len(value) > MAX_PATH_STEPS:
            raise LabelOutOfBounds(
                f"a tool path holds at most {MAX_PATH_STEPS} names, got {len(value)} steps"
            )
        return tuple(bounded_label(step, "a tool name") for step in value)
    if isinstance(value, Mapping):
        if value.get("kind") == "no_decision":
            return no_decision(value.get("reason", "unspecified"))
        for key in ("verdict", "tools"):
            if value.get(key) is not None:
                return decision_from_value(value[key])
        raise InvalidDecision(
            "a mapping decides by its `verdict`, its `tools`, or {kind: no_decision, reason}"
        )
    raise InvalidDecision(f"a {type(value).__name__} is not a decision")


def no_decision(reason: object) -> NoDecision:
    """The no-decision of a reason: InvalidDecision unless it is a string that is not blank
    and a label may hold it (`bounded_label`)."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidDecision("a no-decision's reason is a string that is not blank")
    return NoDecision(bounded_label(reason, "a no-decision's reason"))


def bounded_label(text: str, what: str) -> str:
    """`text` when a label may hold it: at most MAX_LABEL characters, no NUL, no lone surrogate
    (what every door and store takes alike); else LabelOutOfBounds naming `what` it is."""
    if len(text) > MAX_LABEL:
        raise LabelOutOfBounds(f"{what} is at most {MAX_LABEL} characters, got {len(text)}")
    if "\x00" in text:
        raise LabelOutOfBounds(f"{what} holds a NUL character")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise LabelOutOfBounds(f"{what} holds a lone surrogate") from None
    return text


def decision_text(decision: Decision) -> str:
    """Show a decision key: `label`, `a > b > c` or `no_decision:<reason>`."""
    if isinstance(decision, tuple):
        return " > ".join(decision)
    return str(decision)


def outcome_of(decision: Decision | None) -> Outcome:
    """The outcome a decision key stands for (None is an error)."""
    if decision is None:
        return Outcome.ERROR
    if isinstance(decision, NoDecision):
        return Outcome.NO_DECISION
    return Outcome.DECISION


TiedSteps = tuple[tuple[int, int], ...]
"""Ranges [start, end) of a path's steps whose spans started in the same instant."""


class _TrialIdentity(msgspec.Struct, frozen=True, gc=False):
    """Who the trial is and what it decided (positional: `Trial(case, index, decision, run)`)."""

    case: str
    index: int
    decision: Decision | None
    run: str = "run"
    expected: str | None = None
    error_type: str | None = None


class Trial(_TrialIdentity, frozen=True, gc=False, kw_only=True):
    """One call of the decision point, as every source records it: identity (run, case, index),
    what it decided, what was meant, and what the assertion tiers found.

    `decision` is None exactly when the trial errored; `error_type` then names the error.
    `case` is an explicit case id or an input fingerprint, never raw input. The fields after
    `error_type` are keyword-only.
    """

    passed: bool | None = None
    """An evaluator's verdict on the trial (e.g. promptfoo or DeepEval `success`), if any."""
    invariants_failed: tuple[str, ...] = ()
    invariants_warned: tuple[str, ...] = ()
    """Names of the blocking and warning invariants this trial's output broke."""
    latency_ms: float | None = None
    evaluation_skipped: bool = False
    """An expensive tier (semantic, judge) was skipped because a cheaper one failed."""
    isolation: Isolation | None = None
    """How the run kept reruns apart, where the source knows it (a run's declaration)."""
    tied_steps: TiedSteps = ()
    """Ranges [start, end) of steps of its path whose spans started in the same instant: their
    order there is canonical, not observed (`decision_rules`); a pair compares them unordered."""
    aliases: tuple[str, ...] = ()
    """Further names of the same input (each an explicit case id or an input fingerprint,
    never input text): every trial named by any of them is one case (`case_names`)."""
    key_id: str | None = None
    """The id of the key this trial's `hmac-sha256:` names were made with
    (`fingerprints.key_id`), where its source knows it: names under two keys are told apart."""

    @property
    def outcome(self) -> Outcome:
        return outcome_of(self.decision)


def tied_steps_of(ranges: object, decision: Decision | None) -> TiedSteps:
    """Tied ranges [start, end) as a trial holds them: ValueError unless each is a pair of
    whole numbers, 0 <= start, start + 2 <= end <= the path's length (a tie holds two steps
    at least), in order and apart."""
    length = len(decision) if isinstance(decision, tuple) else 0
    checked: list[tuple[int, int]] = []
    if not isinstance(ranges, (list, tuple)):
        raise ValueError("must be a list of [start, end] ranges")
    for item in ranges:
        if (
            not isinstance(item, (list, tuple))
            or len(item) != 2
            or not all(type(bound) is int for bound in item)
            or not (checked[-1][1] if checked else 0) <= item[0] < item[1] - 1 < length
        ):
            raise ValueError(
                f"must be [start, end] ranges in order within the {length}-step path, got "
                f"{item!r:.40}"
            )
        checked.append((item[0], item[1]))
    return tuple(checked)


def aliases_of(names: object, case: str) -> tuple[str, ...]:
    """Further names of a case's input as a trial holds them: sorted, each once, the case itself
    left out. ValueError unless a list of at most MAX_ALIASES strings, each not blank and of at
    most MAX_LABEL characters."""
    if not isinstance(names, (list, tuple)) or len(names) > MAX_ALIASES:
        raise ValueError(f"must be a list of at most {MAX_ALIASES} names")
    for name in names:
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_LABEL:
            raise ValueError(
                f"each is a case id or fingerprint of at most {MAX_LABEL} characters, got "
                f"{name!r:.40}"
            )
    return tuple(sorted(set(names) - {case}))
