"""One trial of a bounded decision, and the key its decision compares by."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Outcome(str, Enum):
    """How a trial ended."""

    DECISION = "decision"
    NO_DECISION = "no_decision"
    ERROR = "error"


@dataclass(frozen=True)
class NoDecision:
    """An agent's explicit refusal to decide, with a short machine reason (e.g. `refused`)."""

    reason: str = "unspecified"

    def __str__(self) -> str:
        return f"no_decision:{self.reason}"


Decision = str | tuple[str, ...] | NoDecision
"""A decision key: a label, an ordered tool path, or a no-decision with its reason."""


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


@dataclass(frozen=True)
class Trial:
    """One call of the decision point: identity (run, case, index), what it decided, what was meant.

    `decision` is None exactly when the trial errored; `error_type` then names the error.
    `case` is an explicit case id or an input fingerprint, never raw input.
    """

    case: str
    index: int
    decision: Decision | None
    run: str = "run"
    expected: str | None = None
    error_type: str | None = None
    passed: bool | None = None
    """An evaluator's verdict on the trial (e.g. promptfoo or DeepEval `success`), if any."""
    invariants_failed: tuple[str, ...] = ()
    invariants_warned: tuple[str, ...] = ()
    """Names of the blocking and warning invariants this trial's output broke."""
    latency_ms: float | None = None
    evaluation_skipped: bool = False
    """An expensive tier (semantic, judge) was skipped because a cheaper one failed."""

    @property
    def outcome(self) -> Outcome:
        return outcome_of(self.decision)
