"""Strands Agents: a new agent per trial; the decision from its tool spans (by default)."""

from __future__ import annotations

from collections.abc import Callable

from ..assessment import Isolation
from ..decision_rules import DecisionRule
from ..otel.trial_capture import attach_capture
from ..runner.agent import Agent
from .verdicts import read_verdict


def from_strands(
    factory: Callable[[], Callable[[str], object]],
    *,
    decision: str = "tools",
    verdict_key: str | None = None,
) -> Agent:
    """An agent for `run` that builds a Strands agent with `factory()` for every trial
    (fresh-instance) and calls it with the case input.

    The decision is read from the spans Strands emits (rule `decision`, by default the tools it
    called, in order); with `verdict_key`, from that field of the agent's structured output
    instead. Strands records through the global tracer provider: one is installed first when
    none is set, before `factory` runs.
    """
    rule = None if verdict_key is not None else DecisionRule.parse(decision)
    attach_capture()

    def instance() -> Callable[[str], object]:
        agent = factory()

        def call(text: str) -> object:
            result = agent(text)
            if verdict_key is not None:
                return read_verdict(getattr(result, "structured_output", None), verdict_key)
            return str(result)

        return call

    return Agent(instance(), Isolation.FRESH_INSTANCE, instance, decision=rule)
