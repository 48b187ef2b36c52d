"""An agent process for test_frameworks_genai.py: a Pydantic AI agent, an app on the OpenAI
client (openai-v2 and the GenAI utility's `execute_tool` spans), a LangGraph graph or an OpenAI
Agents SDK agent (both through their adapters, instrumented by OpenInference), each call inside
a `verdictgate.trial` span of its harness, every span exported over OTLP/gRPC to ENDPOINT in
small batches (one trial's spans arrive in several requests).

    python genai_agent_process.py SOURCE ENDPOINT RUN REPEATS
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple, cast

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import verdictgate
from framework_support import (
    Script,
    hand_off,
    langgraph_factory,
    langgraph_nodes,
    openai_agents_factory,
    openai_genai_factory,
    pydantic_ai_factory,
)
from verdictgate import NoDecision

TRIAGE_SCRIPT: Script = {
    "I was charged twice": ["billing"],
    "My password does not work": ["support", "support", "billing", "support"],
    "Thanks!": ["none"],
}
"""A triage agent's hand-offs (Pydantic AI and the OpenAI Agents SDK)."""
OPENAI_SCRIPT: Script = {
    "I was charged twice": [["refund"]],
    "Your service is a disgrace": [["escalate"], ["escalate"], ["escalate"], ["refund"]],
    "Where is my order?": [["lookup", "refund"], ["lookup"]],
}
LANGGRAPH_SCRIPT: Script = {
    "Refund my order": ["billing"],
    "Hello there": ["chitchat", "billing"],
    "Is my refund through?": ["billing", "billing", "billing", "chitchat"],
}


class Source(NamedTuple):
    """A framework as these tests run it on `script`: its agent for `verdictgate.run`, the rule
    its trials are decided by and the decision that rule makes of a call's scripted route."""

    agent: Callable[[Script], verdictgate.Agent]
    script: Script
    rule: str
    decision: Callable[[Any], object]


SOURCES = {
    "pydantic-ai": Source(
        lambda script: verdictgate.from_factory(pydantic_ai_factory(script)),
        TRIAGE_SCRIPT,
        "agents",
        hand_off,
    ),
    "openai-genai": Source(
        lambda script: verdictgate.from_factory(openai_genai_factory(script)),
        OPENAI_SCRIPT,
        "tools",
        lambda tools: tuple(tools) if tools else NoDecision("no_tool_selected"),
    ),
    "langgraph": Source(
        lambda script: verdictgate.from_langgraph(langgraph_factory(script)),
        LANGGRAPH_SCRIPT,
        "nodes",
        langgraph_nodes,
    ),
    "openai-agents": Source(
        lambda script: verdictgate.from_openai_agents(openai_agents_factory(script)),
        TRIAGE_SCRIPT,
        "agents",
        hand_off,
    ),
}


def expected_routes(script: Script) -> dict[str, str]:
    """Each input's expected route: its first scripted one, as text."""
    return {
        text: route if isinstance(route, str) else " > ".join(route)
        for text, (route, *_) in script.items()
    }


def case_ids(script: Script) -> dict[str, str]:
    """Each input's case id: `c0`, `c1`... in the script's order."""
    return {text: f"c{n}" for n, text in enumerate(script)}


def call(agent: verdictgate.Agent, text: str) -> None:
    """One call of a fresh instance of `agent` (when it makes them), awaited if it is async."""
    answer = agent.instance()(text)
    if agent.is_async:
        asyncio.run(cast(Coroutine[Any, Any, object], answer))


def main(source: str, endpoint: str, run: str, repeats: int) -> None:
    chosen = SOURCES[source]
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_export_batch_size=5, schedule_delay_millis=5)
    )
    trace.set_tracer_provider(provider)  # every source records through the global provider
    agent = chosen.agent(chosen.script)
    expected = expected_routes(chosen.script)
    for index in range(repeats):
        for text, case in case_ids(chosen.script).items():
            with verdictgate.trial_span(
                run=run,
                case=case,
                index=index,
                decision=chosen.rule,
                expected=expected[text],
                suite="support",
            ):
                call(agent, text)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
