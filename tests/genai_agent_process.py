"""An agent process for test_frameworks_genai.py: a Pydantic AI agent or an app on the OpenAI
client (openai-v2 and the GenAI utility's `execute_tool` spans), each call inside a
`verdictgate.trial` span of its harness, every span exported over OTLP/gRPC to ENDPOINT in
small batches (one trial's spans arrive in several requests).

    python genai_agent_process.py SOURCE ENDPOINT RUN REPEATS
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import verdictgate
from framework_support import Script, openai_genai_factory, pydantic_ai_factory

PYDANTIC_AI_SCRIPT = {
    "I was charged twice": ["billing"],
    "My password does not work": ["support", "support", "billing", "support"],
    "Thanks!": ["none"],
}
OPENAI_SCRIPT = {
    "I was charged twice": [["refund"]],
    "Your service is a disgrace": [["escalate"], ["escalate"], ["escalate"], ["refund"]],
    "Where is my order?": [["lookup", "refund"], ["lookup"]],
}
SOURCES: dict[str, tuple[Callable[[Script], Callable[[], Any]], Script, str]] = {
    "pydantic-ai": (pydantic_ai_factory, PYDANTIC_AI_SCRIPT, "agents"),
    "openai-genai": (openai_genai_factory, OPENAI_SCRIPT, "tools"),
}
"""Each source: its factory of agents, its script and the rule its trials are decided by."""


def expected_routes(script: Script) -> dict[str, str]:
    """Each input's expected route: its first scripted one, as text."""
    return {
        text: route if isinstance(route, str) else " > ".join(route)
        for text, (route, *_) in script.items()
    }


def case_ids(script: Script) -> dict[str, str]:
    """Each input's case id: `c0`, `c1`... in the script's order."""
    return {text: f"c{n}" for n, text in enumerate(script)}


def main(source: str, endpoint: str, run: str, repeats: int) -> None:
    factory, script, rule = SOURCES[source]
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_export_batch_size=5, schedule_delay_millis=5)
    )
    trace.set_tracer_provider(provider)  # both record through the global provider
    call = factory(script)()
    expected = expected_routes(script)
    for index in range(repeats):
        for text, case in case_ids(script).items():
            with verdictgate.trial_span(
                run=run,
                case=case,
                index=index,
                decision=rule,
                expected=expected[text],
                suite="support",
            ):
                call(text)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
