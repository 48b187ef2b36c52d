"""Decisions from the spans of the real frameworks, offline: Strands, LangGraph with
OpenInference, and the OpenAI Agents SDK with OpenInference, each run by `verdictgate.run`
through its adapter. The scripts decide every trial; the derived decisions must match them
exactly, flips included."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import verdictgate
from framework_support import (
    langgraph_factory,
    openai_agents_factory,
    strands_factory,
)
from verdictgate import NoDecision, Suite, Trial, from_langgraph, from_openai_agents, from_strands
from verdictgate.suite import Case, Contract


class Collected:
    def __init__(self) -> None:
        self.trials: list[Trial] = []

    def add(self, trial: Trial) -> None:
        self.trials.append(trial)


def suite_of(expected: dict[str, str]) -> Suite:
    return Suite(
        name="support",
        point="support_router",
        cases=tuple(Case(f"c{n}", text, route) for n, (text, route) in enumerate(expected.items())),
        contract=Contract(frozenset(expected.values())),
    )


def decisions_by_input(suite: Suite, trials: list[Trial]) -> dict[str, list]:
    text_of = {case.id: case.input for case in suite.cases}
    found: dict[str, list] = {}
    for trial in sorted(trials, key=lambda t: t.index):
        found.setdefault(text_of[trial.case], []).append(trial.decision)
    return found


def flips_of(decisions: Sequence) -> int:
    return sum(a != b for a, b in zip(decisions[::2], decisions[1::2], strict=True))


def run_and_check(
    agent, suite: Suite, expected: dict[str, list], repeats: int = 6, **settings
) -> verdictgate.Assessment:
    """Run `agent` (with `settings` for `verdictgate.run`): its trials' decisions by input must
    be `expected`, its flips and pairs theirs; the assessment."""
    sink = Collected()
    assessment = verdictgate.run(agent, suite, repeats=repeats, sink=sink, **settings)
    assert decisions_by_input(suite, sink.trials) == expected
    assert assessment.pooled.flips == sum(flips_of(d) for d in expected.values())
    assert assessment.pooled.pairs == len(expected) * repeats // 2
    return assessment


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
    billing = ("classify", "billing", "tools", "billing")
    chitchat = ("classify", "chitchat")
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
    suite = suite_of({"I was charged twice": "billing", "My password does not work": "support",
                      "Thanks!": "billing"})  # fmt: skip
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
