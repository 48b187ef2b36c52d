"""The OpenAI Agents SDK: a new agent per trial; the decision from its hand-off spans."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from ..assessment import Isolation
from ..decision_rules import DecisionRule
from ..otel.trial_capture import attach_capture
from ..runner.agent import Agent
from .instrumentation import instrument_once
from .verdicts import read_verdict

if TYPE_CHECKING:  # the SDK comes with the `openai-agents` extra
    from agents import Agent as SdkAgent
    from agents import RunConfig

_Context = TypeVar("_Context")


def from_openai_agents(
    agent_factory: Callable[[], SdkAgent[_Context]],
    *,
    decision: str = "agents",
    verdict_key: str | None = None,
    run_config: RunConfig | None = None,
) -> Agent:
    """An agent for `run` that builds an Agents SDK agent with `agent_factory()` for every trial
    (fresh-instance) and runs it with `Runner.run(agent, text, run_config=run_config)`.

    The decision is read from the spans OpenInference makes of the run (rule `decision`, by
    default the agents handed off to after the first, in order); with `verdict_key`, from that
    field of the final output instead. The SDK is instrumented with OpenInference against the
    global tracer provider (installed first when none is set) unless it already is; its
    processor then replaces the SDK's own trace export, so nothing is sent to OpenAI.
    """
    rule = None if verdict_key is not None else DecisionRule.parse(decision)
    attach_capture()
    _instrument()

    def instance() -> Callable[[str], Awaitable[object]]:
        agent = agent_factory()

        async def call(text: str) -> object:
            from agents import Runner

            result = await Runner.run(agent, text, run_config=run_config)
            if verdict_key is not None:
                return read_verdict(result.final_output, verdict_key)
            return result.final_output

        return call

    return Agent(instance(), Isolation.FRESH_INSTANCE, instance, decision=rule)


def _instrument() -> None:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    instrument_once(OpenAIAgentsInstrumentor())
