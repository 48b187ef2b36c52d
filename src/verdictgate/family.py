"""A run's stochastic verdicts judged together: Holm's step-down across its change-rate tests.

A run is rejected as soon as one of its tests says stochastic: its claim's test (the pooled
change rate, or the case-level one under a claim about new inputs) and each route's. Each test
alone holds a false "stochastic" to alpha, but six routes at their tolerance would give six
chances. Holm's step-down orders the tests by their p-values and holds the k-th (from 0) to
alpha / (m - k), stopping at the first that is not stochastic at its level, so the chance that
any test whose change rate is at or below its tolerance is called stochastic stays within
alpha, however the tests depend on each other (the pooled test shares every route's pairs).
A test is stochastic at a level by its own method's rule, so one test alone is judged exactly
as before.

The deterministic side needs no correction: a run qualifies only when every test says
deterministic, and a wrong qualification needs a test whose change rate is at or above its
tolerance to say so, which each does with chance at most alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from .judgement import Stability


class StochasticTest(Protocol):
    """A test whose stochastic side can be judged at any level: a change rate or the
    case-level verdict (a frozen dataclass with `result` and `level` fields)."""

    @property
    def result(self) -> Stability: ...

    @property
    def level(self) -> float | None: ...

    def stochastic_p_value(self) -> float:
        """The smallest level at which it would say stochastic (orders the family)."""
        ...

    def stochastic_at(self, level: float) -> bool:
        """Whether its method's rule says stochastic at `level`."""
        ...


@dataclass(frozen=True)
class Adjusted:
    """What Holm's step-down made of one test: the level its stochastic side was held to, and
    whether it is stochastic at that level with every test before it."""

    level: float
    stochastic: bool


def holm(tests: Sequence[StochasticTest], alpha: float) -> list[Adjusted]:
    """Each test's adjusted level and verdict, in the order given; ties in p-value keep that
    order, so the same tests give the same answer."""
    order = sorted(range(len(tests)), key=lambda i: tests[i].stochastic_p_value())
    adjusted: list[Adjusted | None] = [None] * len(tests)
    rejecting = True
    for rank, i in enumerate(order):
        level = alpha / (len(tests) - rank)
        rejecting = rejecting and tests[i].stochastic_at(level)
        adjusted[i] = Adjusted(level, rejecting)
    return [a for a in adjusted if a is not None]


Test = TypeVar("Test", bound=StochasticTest)


def judged_together(tests: Sequence[Test], alpha: float) -> list[Test]:
    """The tests with their stochastic side held to Holm's levels: each carries its level, and
    a stochastic result it does not earn there becomes undecided."""
    return [
        replace(  # type: ignore[type-var]  # every member is a frozen dataclass
            test,
            level=a.level,
            result=Stability.UNDECIDED
            if test.result is Stability.STOCHASTIC and not a.stochastic
            else test.result,
        )
        for test, a in zip(tests, holm(tests, alpha), strict=True)
    ]
