"""Decisions from the spans of frameworks verdictgate has no adapter for, as they come,
offline: Pydantic AI (its own instrumentation) and an app on the OpenAI client instrumented by
OpenTelemetry's official GenAI instrumentation (`opentelemetry-instrumentation-openai-v2`),
its tool runs in the GenAI utility's `execute_tool` spans. Each is run by `verdictgate.run`
with a rule; each, and LangGraph and the OpenAI Agents SDK through their adapters (tested in
process by test_frameworks.py), is also run by a harness in another process whose spans go to
`verdictgate serve`. The scripts decide every trial, and the derived decisions must match them
exactly, flips included, in process and through the receiver. The `pydantic-ai`,
`openai-genai`, `langgraph` and `openai-agents` extras install them (CI does: missing there,
these tests fail)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import verdictgate
from components import free_port, unavailable
from framework_checks import Collected, run_and_check, stored_trials, suite_of
from framework_support import openai_genai_factory, pydantic_ai_decision, pydantic_ai_factory
from genai_agent_process import OPENAI_SCRIPT, SOURCES, TRIAGE_SCRIPT, case_ids, expected_routes
from receiver_support import start_serve
from verdictgate import NoDecision

EXTRAS = {
    "pydantic_ai": "pydantic-ai",
    "opentelemetry.instrumentation.openai_v2": "openai-genai",
    "opentelemetry.util.genai": "openai-genai",
    "langgraph": "langgraph",
    "openinference.instrumentation.langchain": "langgraph",
    "agents": "openai-agents",
    "openinference.instrumentation.openai_agents": "openai-agents",
}


PYTHON_BOUNDS = {"pydantic_ai": ((3, 11), "pydantic-ai-slim 2.55 and later require Python 3.11")}
"""Frameworks whose releases the extras ask for need a newer Python than the package does."""


def needs(module: str) -> None:
    """Skip (fail in CI) when the framework `module` is not installed; skip, in CI too, on a
    Python older than the framework's releases support."""
    if module in PYTHON_BOUNDS and sys.version_info < PYTHON_BOUNDS[module][0]:
        pytest.skip(PYTHON_BOUNDS[module][1])
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        unavailable(f"{module} is not installed (pip install 'verdictgate[{EXTRAS[module]}]')")


PYDANTIC_AI_ROUTES = {
    "I was charged twice": ["billing"] * 6,
    "My password does not work": ["support", "support", "billing", "support", "support", "support"],
    "Thanks!": ["none"] * 6,
}


@pytest.mark.parametrize("rule", ["tools", "agents"])
def test_pydantic_ai_tools_and_hand_offs_and_a_flipping_route(rule: str) -> None:
    needs("pydantic_ai")
    expected = {
        text: [pydantic_ai_decision(rule, route) for route in routes]
        for text, routes in PYDANTIC_AI_ROUTES.items()
    }
    suite = suite_of(expected_routes(TRIAGE_SCRIPT))
    agent = verdictgate.from_factory(pydantic_ai_factory(TRIAGE_SCRIPT))
    run_and_check(agent, suite, expected, decision=rule)


OPENAI_TOOLS = {
    "I was charged twice": [("refund",)] * 6,
    "Your service is a disgrace": [("escalate",)] * 3 + [("refund",)] + [("escalate",)] * 2,
    "Where is my order?": [("lookup", "refund"), ("lookup",)] * 3,
}


def test_openai_client_with_execute_tool_spans_gives_the_tool_paths() -> None:
    needs("opentelemetry.instrumentation.openai_v2")
    needs("opentelemetry.util.genai")
    suite = suite_of(expected_routes(OPENAI_SCRIPT))
    agent = verdictgate.from_factory(openai_genai_factory(OPENAI_SCRIPT))
    run_and_check(agent, suite, OPENAI_TOOLS, decision="tools")


def test_openai_client_with_chat_spans_only_is_told_what_is_missing() -> None:
    """openai-v2 records `chat` spans and the app runs its tools: without `execute_tool` spans
    every trial is `no_tool_selected`, and the report says which spans are missing and how to
    record them, never to fix the agent."""
    needs("opentelemetry.instrumentation.openai_v2")
    needs("opentelemetry.util.genai")
    suite = suite_of(expected_routes(OPENAI_SCRIPT))
    agent = verdictgate.from_factory(openai_genai_factory(OPENAI_SCRIPT, tool_spans=False))
    expected = {text: [NoDecision("no_tool_selected")] * 6 for text in OPENAI_SCRIPT}
    assessment = run_and_check(agent, suite, expected, decision="tools")
    codes = [reason.code for reason in assessment.reasons]
    assert "no_tool_spans" in codes
    steps = " ".join(assessment.next_steps)
    assert "execute_tool" in steps and "fix the agent" not in steps


REPEATS = 6
NEEDS = {
    "pydantic-ai": ["pydantic_ai"],
    "openai-genai": ["opentelemetry.instrumentation.openai_v2", "opentelemetry.util.genai"],
    "langgraph": ["langgraph", "openinference.instrumentation.langchain"],
    "openai-agents": ["agents", "openinference.instrumentation.openai_agents"],
}


@pytest.mark.parametrize("source", list(SOURCES))
def test_through_serve_the_trials_equal_the_scripted_paths_and_the_in_process_ones(
    source: str, tmp_path: Path
) -> None:
    for module in NEEDS[source]:
        needs(module)
    chosen = SOURCES[source]
    script = chosen.script
    store, port = tmp_path / "store.sqlite", free_port()
    receiver = start_serve(str(store), port, "--settle", "1s")
    try:
        harness = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).parent / "genai_agent_process.py"),
                source,
                f"http://127.0.0.1:{port}",
                "remote",
                str(REPEATS),
            ],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert harness.returncode == 0, harness.stderr[-2000:]
        received = stored_trials(store, "remote", len(script) * REPEATS)
    finally:
        receiver.terminate()
        receiver.wait(10)
    sink = Collected()
    suite = suite_of(expected_routes(script))
    agent = chosen.agent(script)
    verdictgate.run(agent, suite, repeats=REPEATS, sink=sink, decision=chosen.rule)
    in_process = {(t.case, t.index): (t.decision, t.error_type) for t in sink.trials}
    scripted = {  # call `index` on an input takes its script's route `index` (cycling)
        (case, index): (chosen.decision(script[text][index % len(script[text])]), None)
        for text, case in case_ids(script).items()
        for index in range(REPEATS)
    }
    assert received == in_process == scripted
