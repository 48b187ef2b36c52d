"""A run's rejecting verdicts judged together: Holm's step-down across its tests.

A run is rejected as soon as one of its change-rate tests says stochastic: its claim's test
(the pooled change rate, or the case-level one under a claim about new inputs) and each
route's; and as soon as one of its pass-rate tests says unreliable: the pooled one and each
route's. Each test alone holds its false rejection to alpha, but six routes at their
tolerance would give six chances. Holm's step-down orders a family's tests by their p-values
and holds the k-th (from 0) to alpha / (m - k), stopping at the first that does not reject at
its level, so the chance that any test whose null holds (a change rate at or below its
tolerance, a pass rate at or above the rate required) rejects stays within alpha, however
the tests depend on each other (the pooled test shares every route's trials). A test rejects
at a level by its own method's rule, so one test alone is judged exactly as before.

The other side needs no correction: a run qualifies only when each test it must pass says
deterministic (the pooled one and every targeted route's; the pass rates' say reliable), and a
wrong qualification needs one of those whose null is false to say so, which each does with
chance at most alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol, TypeVar


class RejectingTest(Protocol):
    """A test whose rejecting side can be judged at any level: a frozen dataclass with `result`
    and `level` fields, naming which result rejects and which one it falls back to."""

    @property
    def REJECTS(self) -> Enum:
        """The result that rejects the run (a class constant of each test)."""
        ...

    @property
    def UNDECIDED(self) -> Enum:
        """The result a rejection falls back to when it is not earned at its level."""
        ...

    @property
    def result(self) -> Enum: ...

    @property
    def level(self) -> float | None: ...

    def rejection_p_value(self) -> float:
        """The smallest level at which it would reject (orders the family)."""
        ...

    def rejects_at(self, level: float) -> bool:
        """Whether its method's rule rejects when that side is held to `level`."""
        ...


@dataclass(frozen=True)
class Adjusted:
    """What Holm's step-down made of one test: the level its rejecting side was held to (None
    when the step-down stopped before it: an earlier test did not reject, so it cannot), and
    whether it rejects there."""

    level: float | None
    rejects: bool


def holm(tests: Sequence[RejectingTest], alpha: float) -> list[Adjusted]:
    """Each test's adjusted level and verdict, in the order given; ties in p-value keep that
    order, so the same tests give the same answer. Levels are rounded to 15 significant
    digits (alpha / k to the digits it is written with)."""
    order = sorted(range(len(tests)), key=lambda i: tests[i].rejection_p_value())
    adjusted: list[Adjusted] = [Adjusted(None, False)] * len(tests)
    for rank, i in enumerate(order):
        level = float(f"{alpha / (len(tests) - rank):.15g}")
        rejects = tests[i].rejects_at(level)
        adjusted[i] = Adjusted(level, rejects)
        if not rejects:
            break
    return adjusted


Test = TypeVar("Test", bound=RejectingTest)


def judged_together(tests: Sequence[Test], alpha: float) -> list[Test]:
    """The tests with their rejecting side held to Holm's levels: each carries its level, and
    a rejection it does not earn there becomes undecided."""
    return [
        replace(  # type: ignore[type-var]  # every member is a frozen dataclass
            test,
            level=a.level,
            result=test.UNDECIDED if test.result is test.REJECTS and not a.rejects else test.result,
        )
        for test, a in zip(tests, holm(tests, alpha), strict=True)
    ]
