"""A Google ADK agent on a scripted model, run by verdictgate in the environment ADK needs
(`make adk`: `.venv-adk`, apart from the dev one, as ADK 2.13 requires OpenTelemetry 1.44 or
earlier). For test_frameworks_adk.py, two ways:

    python adk_agent_process.py in-process RULE RUN REPEATS
        `verdictgate.run` with RULE; prints the trials as JSON lines
    python adk_agent_process.py serve RULE RUN REPEATS ENDPOINT
        each call inside a `verdictgate.trial` span, every span exported over OTLP/gRPC

A `triage` agent transfers to the agent the script names (`billing`, which calls `refund`, or
`support`, which calls `lookup`) or, for `none`, answers itself.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models import LlmCapabilities
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import verdictgate
from harness_lines import Printed, scripted_suite

SCRIPT = {
    "I was charged twice": ["billing"],
    "My password does not work": ["support", "support", "billing", "support"],
    "Thanks!": ["none"],
}
CASES = {text: f"c{n}" for n, text in enumerate(SCRIPT)}
SPECIALIST_TOOL = {"billing": "refund", "support": "lookup"}


class Turns:
    """The n-th call on each input gets the script's n-th route (thread-safe)."""

    def __init__(self) -> None:
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def route(self, text: str) -> str:
        with self._lock:
            n = self._calls[text] = self._calls.get(text, -1) + 1
        return SCRIPT[text][n % len(SCRIPT[text])]


class ScriptedModel(BaseLlm):
    """Calls what `first_call(prompt)` names in its first turn (a function name and its
    arguments, or None), then answers with text."""

    first_call: Callable[[str], tuple[str, dict[str, Any]] | None]

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        text = last.parts[0].text if last.role == "user" and last.parts else None
        call = self.first_call(text) if text else None
        if call is None:
            parts = [types.Part(text="Done.")]
        else:
            parts = [types.Part(function_call=types.FunctionCall(name=call[0], args=call[1]))]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def refund(account: str) -> str:
    """Refund a charge."""
    return "refunded"


def lookup(account: str) -> str:
    """Look an account up."""
    return "found"


def factory(turns: Turns) -> Callable[[], Callable[[str], None]]:
    """A factory of callables that run a new triage agent and its specialists on one input."""

    def transfer(text: str) -> tuple[str, dict[str, Any]] | None:
        route = turns.route(text)
        return None if route == "none" else ("transfer_to_agent", {"agent_name": route})

    def build() -> Callable[[str], None]:
        specialists = [
            LlmAgent(
                name=name,
                description=f"Handles {name} requests.",
                model=ScriptedModel(
                    model="scripted", first_call=lambda _, t=tool: (t, {"account": "a-1"})
                ),
                tools=[refund if tool == "refund" else lookup],
            )
            for name, tool in SPECIALIST_TOOL.items()
        ]
        triage = LlmAgent(
            name="triage",
            model=ScriptedModel(model="scripted", first_call=transfer),
            sub_agents=specialists,
        )
        runner = InMemoryRunner(agent=triage, app_name="support")

        def call(text: str) -> None:
            session = asyncio.run(
                runner.session_service.create_session(app_name="support", user_id="u")
            )
            message = types.Content(role="user", parts=[types.Part(text=text)])
            for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
                pass

        return call

    return build


def expected_route(text: str) -> str:
    return SCRIPT[text][0]


def in_process(rule: str, run: str, repeats: int) -> None:
    suite = scripted_suite(CASES, expected_route)

    provider = TracerProvider()
    trace.set_tracer_provider(provider)  # ADK records through the global provider
    agent = verdictgate.from_factory(factory(Turns()))
    verdictgate.run(agent, suite, repeats=repeats, sink=Printed(), decision=rule, run_id=run)


def through_serve(rule: str, run: str, repeats: int, endpoint: str) -> None:
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_export_batch_size=5, schedule_delay_millis=5)
    )
    trace.set_tracer_provider(provider)
    call = factory(Turns())()
    for index in range(repeats):
        for text, case in CASES.items():
            with verdictgate.trial_span(
                run=run,
                case=case,
                index=index,
                decision=rule,
                expected=expected_route(text),
                suite="support",
            ):
                call(text)
    provider.shutdown()


if __name__ == "__main__":
    mode, rule, run_id, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if mode == "in-process":
        in_process(rule, run_id, count)
    else:
        through_serve(rule, run_id, count, sys.argv[5])
