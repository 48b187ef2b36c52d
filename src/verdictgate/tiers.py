"""The assertion tiers on one answer, cheapest first: invariants, then the semantic tier, then a
judge. A tier runs only when every cheaper one passed; what it skipped is counted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .invariants import Invariant, evaluate
from .semantic import SemanticCheck

Judge = Callable[[Any, Any], bool]
"""`judge(output, input) -> bool`: the expensive check, e.g. a model grading the answer."""


@dataclass(frozen=True)
class TierOutcome:
    """What the tiers found on one answer; only names, a number and flags leave the process."""

    failed: tuple[str, ...] = ()
    """Blocking invariants the answer broke."""
    warned: tuple[str, ...] = ()
    """Warning invariants the answer broke."""
    passed: bool | None = None
    """Whether the trial passed (no blocking failure, and every evaluator that ran passed);
    None when no tier was asked for."""
    similarity: float | None = None
    """The semantic tier's cosine similarity, when it ran and could compare."""
    skipped: bool = False
    """An expensive tier (semantic or judge) was asked for but skipped: a cheaper one failed."""


@dataclass(frozen=True)
class Tiers:
    """The tiers a run asks for; with none, `check` finds nothing and decides nothing."""

    invariants: tuple[Invariant, ...] = ()
    semantic: SemanticCheck | None = None
    judge: Judge | None = None

    def check(self, answer: Any, given: Any, case: str | None = None) -> TierOutcome:
        """Run the tiers on `answer` (to input `given`, of suite case `case`), cheapest first.
        A semantic or judge call that raises fails the trial."""
        failed, warned = evaluate(self.invariants, answer, given) if self.invariants else ((), ())
        if failed:
            expensive = self.semantic is not None or self.judge is not None
            return TierOutcome(failed, warned, False, skipped=expensive)
        similarity = None
        if self.semantic is not None:
            try:
                similarity = self.semantic.similarity(case or "", answer)
            except Exception:
                similarity = None
            if similarity is None or similarity < self.semantic.threshold:
                return TierOutcome((), warned, False, similarity, skipped=self.judge is not None)
        if self.judge is not None:
            try:
                passed = bool(self.judge(answer, given))
            except Exception:
                passed = False
            return TierOutcome((), warned, passed, similarity)
        checked = bool(self.invariants) or self.semantic is not None
        return TierOutcome((), warned, True if checked else None, similarity)
