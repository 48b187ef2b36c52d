"""Agents under test: how they are called, loaded and what their answers mean."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from ..assessment import Isolation
from ..decision_rules import DecisionRule


@dataclass(frozen=True)
class Agent:
    """A decision point to call with a case input, and how its reruns are isolated.

    With `factory` set, a fresh instance is built for every trial (isolation fresh-instance).
    With `decision`, each trial's decision is derived from the agent framework's spans under
    that rule, unless `run` is given one; the answer then only goes to the assertion tiers.
    """

    call: Callable[[str], object]
    isolation: Isolation = Isolation.UNKNOWN
    factory: Callable[[], Callable[[str], object]] | None = None
    decision: DecisionRule | None = None

    @property
    def is_async(self) -> bool:
        """Whether calls return awaitables (an `async def` agent)."""
        return inspect.iscoroutinefunction(self.call) or inspect.iscoroutinefunction(
            getattr(self.call, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )

    def instance(self) -> Callable[[str], object]:
        """The callable to use for one trial."""
        return self.factory() if self.factory is not None else self.call


def from_callable(
    function: Agent | Callable[[str], object], *, isolation: Isolation | str = Isolation.UNKNOWN
) -> Agent:
    """Wrap a sync or async callable `input -> decision` as an Agent."""
    if isinstance(function, Agent):
        return function
    if not callable(function):
        raise TypeError(f"an agent must be callable, got {type(function).__name__}")
    return Agent(function, Isolation(isolation))


def from_factory(
    factory: Callable[[], Callable[[str], object]], *, fresh_instance: bool = True
) -> Agent:
    """An Agent built by `factory()`; with `fresh_instance`, a new one for every trial."""
    first = factory()
    if not callable(first):
        raise TypeError(f"the factory must return a callable agent, got {type(first).__name__}")
    if fresh_instance:
        return Agent(first, Isolation.FRESH_INSTANCE, factory)
    return Agent(first)
