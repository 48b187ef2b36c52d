"""Decisions derived in process from the spans a framework makes during each call.

The framework here is a stand-in that emits Strands-shaped spans through the global tracer
provider, as Strands does; the real frameworks are exercised in test_frameworks.py.
"""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import verdictgate
from verdictgate import PlanError, Suite, Trial
from verdictgate.otel import conventions as names
from verdictgate.otel.trial_capture import OpenTrial
from verdictgate.suite import Case, Contract


def framework_tracer() -> trace.Tracer:
    return trace.get_tracer("strands.telemetry.tracer")


def strands_like_agent(
    tools_for: dict[str, list[list[str]]], fail_on: str | None = None, agent_fails: bool = False
):
    """An agent whose n-th call on an input calls the n-th scripted tool list, the way Strands
    traces it: invoke_agent > execute_event_loop_cycle > chat, execute_tool (in threads)."""
    calls: dict[str, int] = {}
    lock = threading.Lock()

    def agent(text: str) -> str:
        with lock:
            n = calls[text] = calls.get(text, -1) + 1
        script = tools_for[text]
        tools = script[n % len(script)]
        tracer = framework_tracer()
        with (
            tracer.start_as_current_span(
                "invoke_agent router",
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "router"},
            ) as agent_span,
            tracer.start_as_current_span("execute_event_loop_cycle"),
        ):
            with tracer.start_as_current_span(
                "chat",
                attributes={"gen_ai.operation.name": "chat", "gen_ai.input.messages": text},
            ):
                pass
            context = trace.set_span_in_context(trace.get_current_span())

            def call(tool: str) -> None:
                with tracer.start_as_current_span(
                    f"execute_tool {tool}",
                    context=context,
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": tool,
                    },
                ) as span:
                    if tool == fail_on:
                        span.set_status(Status(StatusCode.ERROR))
                        span.set_attribute("error.type", "ToolFailed")

            threads = [threading.Thread(target=call, args=(tool,)) for tool in tools]
            for thread in threads:
                thread.start()
                thread.join()  # in order: the script's order is the start order
            if agent_fails and fail_on in tools:  # the agent gave up: its own span failed
                agent_span.set_status(Status(StatusCode.ERROR))
                agent_span.set_attribute("error.type", "ToolFailed")
        return "text the agent wrote, never read"

    return agent


def support_suite() -> Suite:
    return Suite(
        name="support",
        point="support_router",
        cases=(
            Case("refund-0", "I want my money back", "refund"),
            Case("escalate-0", "Your service is a disgrace", "escalate"),
            Case("lookup-0", "Where is my parcel?", "lookup > notify"),
        ),
        contract=Contract(frozenset({"refund", "escalate", "lookup > notify"})),
    )


class Collected:
    def __init__(self) -> None:
        self.trials: list[Trial] = []

    def add(self, trial: Trial) -> None:
        self.trials.append(trial)


def live_open_trials() -> list[OpenTrial]:
    """Every OpenTrial object still alive in this process."""
    gc.collect()
    return [thing for thing in gc.get_objects() if type(thing) is OpenTrial]  # no proxy asked


def by_case(trials: list[Trial]) -> dict[str, list]:
    found: dict[str, list] = {}
    for trial in sorted(trials, key=lambda t: t.index):
        found.setdefault(trial.case, []).append(trial.decision)
    return found


def test_run_derives_each_decision_from_the_tool_spans_and_counts_the_flips() -> None:
    agent = strands_like_agent(
        {
            "I want my money back": [["refund"]],
            "Your service is a disgrace": [["escalate"], ["escalate"], ["refund"], ["escalate"]],
            "Where is my parcel?": [["lookup", "notify"]],
        }
    )
    sink = Collected()
    before = live_open_trials()
    assessment = verdictgate.run(agent, support_suite(), repeats=8, sink=sink, decision="tools")
    left = [trial for trial in live_open_trials() if not any(trial is old for old in before)]
    decisions = by_case(sink.trials)
    assert decisions["refund-0"] == [("refund",)] * 8
    assert decisions["lookup-0"] == [("lookup", "notify")] * 8
    assert decisions["escalate-0"] == [("escalate",), ("escalate",), ("refund",), ("escalate",)] * 2
    assert (assessment.pooled.pairs, assessment.pooled.flips) == (
        12,
        2,
    )  # escalate-0's (2,3), (6,7)
    flips = {case.case: case.flips for case in assessment.cases}
    assert flips == {"refund-0": 0, "escalate-0": 2, "lookup-0": 0}
    assert not left  # nothing is kept once the trials are over


def test_an_agent_without_instrumentation_is_an_error_never_a_tool_less_decision() -> None:
    sink = Collected()
    verdictgate.run(lambda text: "refund", support_suite(), repeats=2, sink=sink, decision="tools")
    assert {(t.decision, t.error_type) for t in sink.trials} == {(None, "no_spans")}


@pytest.mark.parametrize("agent_fails", [False, True])
def test_a_failed_tool_is_a_route_unless_the_agent_failed_with_it(agent_fails: bool) -> None:
    script = {
        "I want my money back": [["refund"]],
        "Your service is a disgrace": [["escalate"]],
        "Where is my parcel?": [["lookup", "notify"]],
    }
    agent = strands_like_agent(script, fail_on="notify", agent_fails=agent_fails)
    sink = Collected()
    verdictgate.run(agent, support_suite(), repeats=2, sink=sink, decision="toolset")
    parcel = {(t.decision, t.error_type) for t in sink.trials if t.case == "lookup-0"}
    assert parcel == ({(None, "ToolFailed")} if agent_fails else {(("lookup", "notify"), None)})


def test_a_timeout_keeps_the_call_inside_its_trial() -> None:
    agent = strands_like_agent(
        {c.input: [[c.expected.split(" > ")[0]]] for c in support_suite().cases}
    )
    sink = Collected()
    verdictgate.run(agent, support_suite(), repeats=2, sink=sink, decision="tools", timeout=30)
    assert {t.error_type for t in sink.trials} == {None}


def test_an_agent_may_record_its_verdict_on_the_current_span() -> None:
    def agent(text: str) -> str:
        trace.get_current_span().set_attribute("app.verdict", "refund" if "money" in text else "x")
        return "ok"

    sink = Collected()
    verdictgate.run(agent, support_suite(), repeats=2, sink=sink, decision="attribute:app.verdict")
    assert {t.case: t.decision for t in sink.trials}["refund-0"] == "refund"


def test_the_trial_api_records_the_derived_decision_on_its_decision_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = strands_like_agent({"Where is my parcel?": [["lookup", "notify"], ["lookup"]]})
    for index in range(2):
        with verdictgate.trial(
            run="r1",
            case="c1",
            index=index,
            expected="lookup > notify",
            decision="tools",
            point="support_router",
            tracer_provider=provider,
        ):
            agent("Where is my parcel?")
    decisions = [s for s in exporter.get_finished_spans() if s.name == "decide support_router"]
    assert [s.attributes[names.TOOLS] for s in decisions] == [("lookup", "notify"), ("lookup",)]
    assert {s.attributes[names.DECISION_RULE] for s in decisions} == {"tools"}
    assert {s.attributes[names.TRIAL] for s in decisions} == {0, 1}


def test_async_agents_and_concurrent_calls_keep_their_own_spans() -> None:
    inner = strands_like_agent(
        {c.input: [[c.expected.split(" > ")[0]]] for c in support_suite().cases}
    )

    async def agent(text: str) -> str:
        await asyncio.sleep(0)
        return inner(text)

    sink = Collected()
    verdictgate.run(agent, support_suite(), repeats=6, concurrency=3, sink=sink, decision="tools")
    assert by_case(sink.trials) == {
        "refund-0": [("refund",)] * 6,
        "escalate-0": [("escalate",)] * 6,
        "lookup-0": [("lookup",)] * 6,
    }


def test_relations_with_a_rule_are_refused_before_any_call() -> None:
    called = []
    with pytest.raises(PlanError):
        verdictgate.run(
            called.append, support_suite(), repeats=2, decision="tools", relations=["whitespace"]
        )
    assert called == []


def test_the_global_provider_is_an_sdk_one_after_a_rule_is_used() -> None:
    verdictgate.run(lambda text: "x", support_suite(), repeats=2, decision="agents")
    assert isinstance(trace.get_tracer_provider(), TracerProvider)
