"""The assertion tiers on one answer, cheapest first: invariants, then the semantic tier, then a
judge. A tier runs only when every cheaper one passed; what it skipped is counted."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..trial_model import Answer
from .invariants import Invariant, evaluate
from .semantic import SemanticCheck

logger = logging.getLogger(__name__)

Judge = Callable[[Answer, Answer], bool]
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
    error: str | None = None
    """`tier:ExceptionClass` when the semantic tier or the judge raised: an infrastructure
    fault, so the trial is an error trial, not a failed one (`passed` is then None)."""


@dataclass(frozen=True)
class Tiers:
    """The tiers a run asks for; with none, `check` finds nothing and decides nothing."""

    invariants: tuple[Invariant, ...] = ()
    semantic: SemanticCheck | None = None
    judge: Judge | None = None
    _logged: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _logged_lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def check(self, answer: object, given: str | None, case: str | None = None) -> TierOutcome:
        """Run the tiers on `answer` (to input `given`, of suite case `case`), cheapest first.

        A semantic or judge call that raises is a fault of that tier, not a verdict on the
        answer: the outcome carries `error` (`semantic:Class` or `judge:Class`, never the
        message) and no verdict, and the fault is logged once per error type."""
        failed, warned = evaluate(self.invariants, answer, given) if self.invariants else ((), ())
        if failed:
            expensive = self.semantic is not None or self.judge is not None
            return TierOutcome(failed, warned, False, skipped=expensive)
        similarity = None
        if self.semantic is not None:
            try:
                similarity = self.semantic.similarity(case or "", answer)
            except Exception as error:
                return self._fault("semantic", error, warned)
            if similarity is None or similarity < self.semantic.threshold:
                return TierOutcome((), warned, False, similarity, skipped=self.judge is not None)
        if self.judge is not None:
            try:
                passed = bool(self.judge(answer, given))
            except Exception as error:
                return self._fault("judge", error, warned, similarity)
            return TierOutcome((), warned, passed, similarity)
        checked = bool(self.invariants) or self.semantic is not None
        return TierOutcome((), warned, True if checked else None, similarity)

    def _fault(
        self, tier: str, error: Exception, warned: tuple[str, ...], similarity: float | None = None
    ) -> TierOutcome:
        """The outcome of a tier that raised, logged the first time its error type is seen."""
        error_type = f"{tier}:{type(error).__name__}"
        with self._logged_lock:
            first = error_type not in self._logged
            self._logged.add(error_type)
        if first:  # the type only: an exception message may quote the input or the output
            logger.warning(
                "the %s tier raised %s: its trials are recorded as errors (%s), not as failures; "
                "logged once per error type",
                tier,
                type(error).__name__,
                error_type,
            )
        return TierOutcome((), warned, None, similarity, error=error_type)
