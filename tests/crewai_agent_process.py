"""A CrewAI crew on a scripted model, run by verdictgate in the environment CrewAI needs
(`make crewai`: `.venv-crewai`, apart from the dev one: crewAI 1.15 requires openai<3, mcp<2
and pydantic<2.13). For test_frameworks_crewai.py, two ways:

    python crewai_agent_process.py in-process RUN REPEATS
        `verdictgate.run(from_crewai(...))`; prints the trials as JSON lines
    python crewai_agent_process.py serve RUN REPEATS ENDPOINT
        each kickoff inside a `verdictgate.trial` span, below it by `crewai_below_current_span`,
        every span exported over OTLP/gRPC

A `support` agent whose model calls the tools the script names for the call, one a turn, then
answers.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

os.environ["CREWAI_TRACING_ENABLED"] = "false"  # nothing leaves for crewAI's own service
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"  # nor its anonymous telemetry

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import verdictgate
from harness_lines import Printed, scripted_suite

SCRIPT = {
    "I was charged twice": [["refund"]],
    "Your service is a disgrace": [["escalate"], ["escalate"], ["escalate"], ["refund"]],
    "Where is my order?": [["lookup", "refund"], ["lookup"]],
}
CASES = {text: f"c{n}" for n, text in enumerate(SCRIPT)}


class Turns:
    """The n-th call on each input gets the script's n-th route (thread-safe)."""

    def __init__(self) -> None:
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def route(self, text: str) -> list[str]:
        with self._lock:
            n = self._calls[text] = self._calls.get(text, -1) + 1
        return SCRIPT[text][n % len(SCRIPT[text])]


@tool("refund")
def refund(account: str) -> str:
    """Refund a charge."""
    return "refunded"


@tool("escalate")
def escalate(account: str) -> str:
    """Hand the case to a person."""
    return "escalated"


@tool("lookup")
def lookup(account: str) -> str:
    """Look an account up."""
    return "found"


def crew_factory(turns: Turns) -> Any:
    """A factory of crews whose one agent calls the tools its input's route names (its model
    reads the input from the task's description, `{request}`)."""

    plans: dict[int, list[str]] = {}  # each model's tools still to call, by the model's id

    class ScriptedModel(BaseLLM):
        def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
            if id(self) not in plans:
                text = next(t for t in SCRIPT if t in str(messages))
                plans[id(self)] = list(turns.route(text))
            if plan := plans[id(self)]:
                name = plan.pop(0)
                return f'Thought: use {name}\nAction: {name}\nAction Input: {{"account": "a-1"}}'
            return "Thought: done\nFinal Answer: handled"

        def supports_function_calling(self) -> bool:
            return False

    def build() -> Any:
        model = ScriptedModel(model="scripted")
        plans.pop(id(model), None)  # a new model plans afresh (an id may be reused)
        agent = Agent(
            role="support",
            goal="Route requests.",
            backstory="A router.",
            llm=model,
            tools=[refund, escalate, lookup],
            verbose=False,
        )
        task = Task(description="{request}", expected_output="a route", agent=agent)
        return Crew(agents=[agent], tasks=[task], verbose=False)

    return build


def expected_route(text: str) -> str:
    return " > ".join(SCRIPT[text][0])


def in_process(run: str, repeats: int) -> None:
    suite = scripted_suite(CASES, expected_route)

    agent = verdictgate.from_crewai(crew_factory(Turns()), inputs_of=lambda t: {"request": t})
    verdictgate.run(agent, suite, repeats=repeats, sink=Printed(), run_id=run)


def through_serve(run: str, repeats: int, endpoint: str) -> None:
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_export_batch_size=5, schedule_delay_millis=5)
    )
    build = crew_factory(Turns())
    for index in range(repeats):
        for text, case in CASES.items():
            with (
                verdictgate.trial_span(
                    run=run,
                    case=case,
                    index=index,
                    decision="tools",
                    expected=expected_route(text),
                    suite="support",
                ),
                verdictgate.crewai_below_current_span(  # shut down with its session
                    BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True))
                ),
            ):
                build().kickoff(inputs={"request": text})
    provider.shutdown()


if __name__ == "__main__":
    mode, run_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "in-process":
        in_process(run_id, count)
    else:
        through_serve(run_id, count, sys.argv[4])
