"""Decisions from the spans of the real frameworks, offline: Strands, LangGraph with
OpenInference, and the OpenAI Agents SDK with OpenInference, each run by `verdictgate.run`
through its adapter. The scripts decide every trial; the derived decisions must match them
exactly, flips included."""

from __future__ import annotations

import pytest

from framework_checks import run_and_check, suite_of
from framework_support import (
    langgraph_factory,
    langgraph_nodes,
    openai_agents_factory,
    strands_factory,
)
from verdictgate import NoDecision, from_langgraph, from_openai_agents, from_strands


def test_strands_tool_paths_and_a_flipping_route() -> None:
    script = {
        "I was charged twice": [["refund"]],
        "Your service is a disgrace": [["escalate"], ["escalate"], ["escalate"], ["refund"]],
        "Where is my order?": [["lookup"], ["lookup"]],
    }
    suite = suite_of({text: " > ".join(routes[0]) for text, routes in script.items()})
    expected = {
        "I was charged twice": [("refund",)] * 6,
        "Your service is a disgrace": [
            ("escalate",),
            ("escalate",),
            ("escalate",),
            ("refund",),
            ("escalate",),
            ("escalate",),
        ],
        "Where is my order?": [("lookup",)] * 6,
    }
    run_and_check(from_strands(strands_factory(script)), suite, expected)


def test_strands_parallel_calls_under_toolset_and_a_turn_without_tools() -> None:
    script = {
        "Refund and escalate": [["refund", "escalate"], ["escalate", "refund"]],
        "Just chatting": [[]],
    }
    suite = suite_of({"Refund and escalate": "escalate > refund", "Just chatting": "refund"})
    expected = {
        "Refund and escalate": [("escalate", "refund")] * 4,
        "Just chatting": [NoDecision("no_tool_selected")] * 4,
    }
    agent = from_strands(strands_factory(script), decision="toolset")
    run_and_check(agent, suite, expected, repeats=4)


def test_langgraph_nodes_in_step_order_and_a_flipping_branch() -> None:
    script = {
        "Refund my order": [["billing"]],
        "Hello there": [["chitchat"], ["billing"]],
    }
    flat = {text: [r[0] for r in routes] for text, routes in script.items()}
    billing, chitchat = langgraph_nodes("billing"), langgraph_nodes("chitchat")
    suite = suite_of({"Refund my order": " > ".join(billing), "Hello there": " > ".join(chitchat)})
    expected = {
        "Refund my order": [billing] * 6,
        "Hello there": [chitchat, billing] * 3,
    }
    run_and_check(from_langgraph(langgraph_factory(flat)), suite, expected)


def test_langgraph_tools_rule_reads_the_tool_node() -> None:
    flat = {"Refund my order": ["billing"], "Hello there": ["chitchat"]}
    suite = suite_of({"Refund my order": "refund", "Hello there": "refund"})
    expected = {
        "Refund my order": [("refund",)] * 2,
        "Hello there": [NoDecision("no_tool_selected")] * 2,
    }
    run_and_check(
        from_langgraph(langgraph_factory(flat), decision="tools"), suite, expected, repeats=2
    )


def test_openai_agents_hand_offs_and_a_flipping_route() -> None:
    script = {
        "I was charged twice": ["billing"],
        "My password does not work": ["support", "support", "billing", "support"],
        "Thanks!": ["none"],
    }
    suite = suite_of(
        {
            "I was charged twice": "billing",
            "My password does not work": "support",
            "Thanks!": "billing",
        }
    )
    expected = {
        "I was charged twice": [("billing",)] * 6,
        "My password does not work": [
            ("support",),
            ("support",),
            ("billing",),
            ("support",),
            ("support",),
            ("support",),
        ],
        "Thanks!": [NoDecision("no_handoff")] * 6,
    }
    run_and_check(from_openai_agents(openai_agents_factory(script)), suite, expected)


@pytest.mark.parametrize("rule", ["tools", "agents"])
def test_openai_agents_other_rules(rule: str) -> None:
    script = {"I was charged twice": ["billing"]}
    suite = suite_of({"I was charged twice": "billing"})
    decision = ("refund",) if rule == "tools" else ("billing",)
    agent = from_openai_agents(openai_agents_factory(script), decision=rule)
    run_and_check(agent, suite, {"I was charged twice": [decision] * 2}, repeats=2)


def test_verdict_key_reads_the_decision_from_the_final_state() -> None:
    flat = {"Refund my order": ["billing"], "Hello there": ["chitchat", "billing"]}
    suite = suite_of({"Refund my order": "billing", "Hello there": "chitchat"})
    agent = from_langgraph(langgraph_factory(flat), verdict_key="route")
    expected = {"Refund my order": ["billing"] * 4, "Hello there": ["chitchat", "billing"] * 2}
    run_and_check(agent, suite, expected, repeats=4)
