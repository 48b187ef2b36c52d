"""Decision rules over the name facts of framework spans (no framework needed here)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verdictgate import Trial, assess
from verdictgate.decision_rules import NO_SPANS, PATH_OVER_LIMIT, DecisionRule, Derived
from verdictgate.errors import VerdictgateError
from verdictgate.reports.json_report import report_document
from verdictgate.span_facts import SpanFacts, facts_of
from verdictgate.trial_model import NO_TOOL_SELECTED, NoDecision

ROOT = "00000000000000ff"
"""The trial's own span: every fact below is a top span unless it says otherwise."""


def fact(n: int, start: int, parent: str = ROOT, **names) -> SpanFacts:
    return SpanFacts(f"{n:016x}", parent, start, **names)


def agent_span(n: int, start: int) -> SpanFacts:
    return fact(n, start, agent="router")


def derive(rule: str, *facts: SpanFacts):
    return DecisionRule.parse(rule).derive(facts, ROOT)


def test_tools_are_ordered_by_start_not_by_arrival() -> None:
    spans = [fact(3, 30, tool="escalate"), agent_span(1, 0), fact(2, 20, tool="lookup")]
    assert derive("tools", *spans).decision == ("lookup", "escalate")
    assert derive("toolset", *spans).decision == ("escalate", "lookup")


def test_no_tool_is_a_no_decision_and_no_span_at_all_is_an_error() -> None:
    assert derive("tools", agent_span(1, 0)).decision == NO_TOOL_SELECTED
    missing = derive("tools")
    assert (missing.decision, missing.error_type) == (None, NO_SPANS)


def test_a_span_that_failed_makes_an_error_trial_of_its_type() -> None:
    derived = derive("tools", agent_span(1, 0), fact(2, 5, tool="refund", error="tool_error"))
    assert (derived.decision, derived.error_type) == (None, "tool_error")


def test_an_error_the_agent_recovered_from_is_part_of_its_route() -> None:
    agent = agent_span(1, 0)
    failed = fact(2, 5, parent=agent.span_id, tool="refund", error="tool_error")
    retried = fact(3, 9, parent=agent.span_id, tool="lookup")
    assert derive("tools", agent, failed, retried).decision == ("refund", "lookup")


def test_agents_are_the_hand_offs_after_the_entry_agent() -> None:
    spans = [
        fact(1, 0, agent="triage"),
        fact(2, 1, agent="triage"),  # the entry agent's own nested span
        fact(3, 5, agent="billing"),
        fact(4, 9, agent="triage"),
    ]
    assert derive("agents", *spans).decision == ("billing", "triage")
    assert derive("agents", fact(1, 0, agent="triage")).decision == NoDecision("no_handoff")


def test_nodes_once_per_step_in_start_order_without_langgraph_internals() -> None:
    spans = [
        fact(1, 0, node="__start__", step=0),
        fact(2, 1, node="classify", step=1),
        fact(3, 2, node="classify", step=1),  # an LLM call inside the node
        fact(4, 3, node="research", step=2),
        fact(5, 4, node="search", step=1),  # a subgraph's steps start again
        fact(6, 5, node="summarize", step=2),
        fact(7, 6, node="classify", step=3),
    ]
    decision = derive("nodes", *spans).decision
    assert decision == ("classify", "research", "search", "summarize", "classify")
    assert derive("nodes", agent_span(1, 0)).decision == NoDecision("no_node")


def test_attribute_values_must_be_labels_never_text() -> None:
    values = {
        "approve": "approve",
        "tier-2": "tier-2",
        "card security": "card security",
        '{"name": "refund"}': None,
        "I lost my card 4111, please help": None,
        "x" * 65: None,
        "": None,
        True: "true",
        3: "3",
    }
    for value, kept in values.items():
        facts = facts_of("01", None, 1, {"app.verdict": value}, False, keep=("app.verdict",))
        assert facts.values == ((("app.verdict", kept),) if kept else ())


def test_attribute_rule_reads_the_first_span_that_carries_it() -> None:
    spans = [
        fact(2, 9, values=(("app.verdict", "later"),)),
        fact(1, 3, values=(("app.verdict", "approve"),)),
    ]
    assert derive("attribute:app.verdict", *spans).decision == "approve"
    assert derive("attribute:app.verdict", agent_span(1, 0)).decision == NoDecision("no_verdict")


@pytest.mark.parametrize(
    "rule",
    [
        "tool",
        "",
        "attribute:",
        "attribute:input.value",
        "attribute:gen_ai.input.messages",
        "attribute:metadata",
        "attribute:llm.output_messages.0.message.content",
        "attribute:llm.function_call",
        "attribute:exception.message",
    ],
)
def test_unknown_rules_and_content_attributes_are_refused(rule: str) -> None:
    with pytest.raises(VerdictgateError) as refused:
        DecisionRule.parse(rule)
    assert str(refused.value).startswith("decision: ")


names = st.sampled_from(["lookup", "refund", "escalate", "notify"])


@given(st.lists(st.tuples(st.integers(0, 10**6), names), max_size=12), st.randoms())
def test_tools_follow_start_times_whatever_order_spans_end_in(calls, random) -> None:
    spans = [fact(n + 2, start, tool=name) for n, (start, name) in enumerate(calls)]
    shuffled = [agent_span(1, 0), *spans]
    random.shuffle(shuffled)
    expected = [name for _, name in sorted(calls)]  # ties in start time: by name
    derived = derive("tools", *shuffled)
    assert derived.decision == (tuple(expected) if expected else NO_TOOL_SELECTED)
    toolset = derive("toolset", *shuffled).decision
    assert toolset == (tuple(sorted(expected)) if expected else NO_TOOL_SELECTED)


def test_facts_of_a_strands_tool_span_keep_names_only() -> None:
    facts = facts_of(
        "01",
        "00",
        7,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "refund",
            "gen_ai.tool.call.arguments": '{"card": "4111 1111"}',
            "gen_ai.agent.name": "router",
        },
        failed=False,
        keep=("gen_ai.tool.call.arguments", "gen_ai.agent.name"),
    )
    assert (facts.tool, facts.agent, facts.error) == ("refund", None, None)
    assert facts.values == (("gen_ai.agent.name", "router"),)  # the arguments are never kept


def test_facts_of_openinference_spans() -> None:
    tool = facts_of("01", None, 1, {"openinference.span.kind": "TOOL", "tool.name": "refund"}, True)
    assert (tool.tool, tool.error) == ("refund", "tool_error")
    agent = facts_of(
        "02", None, 1, {"openinference.span.kind": "AGENT", "agent.name": "billing"}, False
    )
    assert agent.agent == "billing"
    workflow = facts_of("06", None, 1, {"openinference.span.kind": "AGENT"}, False)
    assert workflow.agent is None  # the SDK's trace span: no agent of its own
    metadata = json.dumps({"langgraph_node": "classify", "langgraph_step": 2, "thread_id": "t"})
    node = facts_of(
        "03", None, 1, {"openinference.span.kind": "CHAIN", "metadata": metadata}, False
    )
    assert (node.node, node.step) == ("classify", 2)
    broken = facts_of("04", None, 1, {"metadata": "{not json langgraph_node"}, False)
    assert broken.node is None
    typed = facts_of("05", None, 1, {"error.type": "TimeoutError"}, failed=True)
    assert typed.error == "TimeoutError"


def test_tools_that_start_in_the_same_millisecond_compare_equal_whatever_their_span_ids() -> None:
    """Whole-millisecond timestamps (the OpenTelemetry JS SDK's): lookup_order then
    issue_refund, both at 5 ms, in spans whose ids are random. Ordered by span id, the path
    flipped between the two orders; ordered canonically it is one path, said to be tied."""
    ms = 1_000_000
    derived = {
        derive(
            "tools",
            agent_span(1, 0),
            fact(a, 5 * ms, tool="lookup_order"),
            fact(b, 5 * ms, tool="issue_refund"),
        )
        for a, b in ((2, 3), (3, 2), (7, 4), (4, 9))
    }
    assert derived == {Derived(("issue_refund", "lookup_order"), tied_steps=((0, 2),))}
    apart = derive(
        "tools",
        agent_span(1, 0),
        fact(2, 5 * ms, tool="lookup_order"),
        fact(3, 6 * ms, tool="issue_refund"),
    )
    assert apart == Derived(("lookup_order", "issue_refund"))  # not tied: not ambiguous
    same = derive(
        "tools", agent_span(1, 0), fact(2, 5 * ms, tool="lookup"), fact(3, 5 * ms, tool="lookup")
    )
    assert not same.order_ambiguous  # the same tool twice has one order
    assert not derive(
        "toolset", agent_span(1, 0), fact(2, 5, tool="b"), fact(3, 5, tool="a")
    ).order_ambiguous


def test_a_path_of_tied_spans_shows_no_flips_and_its_pairs_are_not_counted_as_agreeing() -> None:
    """Twelve trials whose two tool spans always tie: canonical order reads one path, so no
    pair flips; but whether the agent kept its order is not known, so no pair agrees either."""
    import random

    coin = random.Random(7)
    trials = []
    for index in range(12):
        ids = coin.sample(range(2, 1 << 30), 2)
        derived = derive(
            "tools",
            agent_span(1, 0),
            fact(ids[0], 5_000_000, tool="lookup_order"),
            fact(ids[1], 5_000_000, tool="issue_refund"),
        )
        trials.append(
            Trial("refund-case", index, derived.decision, "r1", tied_steps=derived.tied_steps)
        )
    assessment = assess(trials)
    assert (assessment.pooled.pairs, assessment.pooled.flips) == (0, 0)
    assert assessment.ambiguous_pairs == 6
    assert assessment.trials.ambiguous_order == 12
    assert assessment.reason_codes[0] == "ambiguous_order"
    assert any("started in the same instant" in step for step in assessment.next_steps)
    assert report_document(assessment)["trials"]["ambiguous_order"] == 12
    assert report_document(assessment)["stability"]["pooled"]["ambiguous_pairs"] == 6


def test_a_pair_with_one_tied_trial_compares_the_tied_steps_unordered() -> None:
    """search then book, 2 ms apart in one trial and in the same millisecond in the other: the
    tied trial reads book > search (by name); the pair does not flip, nor is it shown to agree
    (it is ambiguous); a real reordering outside the tie, or another tool, is still a flip."""
    ms = 1_000_000
    apart = derive(
        "tools", agent_span(1, 0), fact(2, 5 * ms, tool="search"), fact(3, 7 * ms, tool="book")
    )
    tied = derive(
        "tools", agent_span(1, 0), fact(2, 5 * ms, tool="search"), fact(3, 5 * ms, tool="book")
    )
    assert (apart.decision, tied.decision) == (("search", "book"), ("book", "search"))

    def flips(*paths: Derived) -> tuple[int, int, int]:
        """(pairs counted, flips, pairs ambiguous)."""
        trials = [
            Trial("c", i, d.decision, "r1", tied_steps=d.tied_steps) for i, d in enumerate(paths)
        ]
        assessment = assess(trials)
        return assessment.pooled.pairs, assessment.pooled.flips, assessment.ambiguous_pairs

    assert flips(apart, tied, tied, apart, apart, apart) == (1, 0, 2)
    other = Derived(("search", "pay"))
    assert flips(tied, other) == (1, 1, 0)
    three = derive(
        "tools",
        agent_span(1, 0),
        fact(2, 5 * ms, tool="search"),
        fact(3, 5 * ms, tool="book"),
        fact(4, 9 * ms, tool="pay"),
    )
    assert three.tied_steps == ((0, 2),)
    assert flips(three, Derived(("search", "book", "pay"))) == (0, 0, 1)
    assert flips(three, Derived(("pay", "search", "book"))) == (1, 1, 0)  # pay moved: not the tie


def test_only_steps_of_the_path_at_one_depth_can_tie() -> None:
    """An entry agent and the agent it hands to, nested and started together: containment
    orders them, and the entry agent is not part of the route anyway."""
    triage = fact(9, 0, agent="triage")
    billing = fact(1, 0, parent=triage.span_id, agent="billing")
    assert derive("agents", billing, triage) == Derived(("billing",))
    parent = fact(2, 5, tool="outer")
    child = fact(3, 5, parent=parent.span_id, tool="inner")
    assert derive("tools", agent_span(1, 0), child, parent) == Derived(("outer", "inner"))


def test_a_path_longer_than_any_reviewed_decision_is_an_error_trial_not_a_label() -> None:
    tools = [fact(n + 2, n, tool=f"t{n % 7}") for n in range(257)]
    for rule in ("tools", "toolset"):
        assert derive(rule, agent_span(1, 0), *tools) == Derived(None, PATH_OVER_LIMIT)
    assert derive("tools", agent_span(1, 0), *tools[:256]).decision is not None


@given(st.integers(0, 40), st.text(alphabet='[]{}"\\ ,:a', max_size=40))
def test_metadata_nested_within_the_limit_names_its_node_and_deeper_is_not_parsed(depth, junk):
    """OpenInference `metadata` is read for the LangGraph node up to 32 levels deep (measured
    without recursion, brackets inside strings not counted); deeper, or malformed, names none."""
    inner = json.dumps({"junk": junk})
    for _ in range(max(0, depth - 1)):
        inner = "[" + inner + "]"
    metadata = '{"langgraph_node": "plan", "x": ' + inner + "}"
    facts = facts_of("01", None, 0, {"metadata": metadata}, failed=False)
    assert facts.node == ("plan" if depth + 1 <= 32 else None)
    unterminated = '{"langgraph_node": "plan' + '\\"' * 500  # no closing quote: read once
    assert facts_of("02", None, 0, {"metadata": unterminated}, failed=False).node is None
