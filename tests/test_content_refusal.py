"""No content, ever, as a decision: every attribute that carries prompt or response text in a
convention verdictgate reads is refused as an `attribute:KEY` rule, at every door a rule can be
named through (the rule itself, the CLI, `verdictgate.run`, `trial`, `trial_span`, the
adapters), with one line that names a safe alternative."""

from __future__ import annotations

import pytest

import verdictgate
from verdictgate.decision_rules import DecisionRule
from verdictgate.errors import VerdictgateError
from verdictgate.suite import Case, Contract, Suite

CONTENT_ATTRIBUTES = [
    # GenAI semantic conventions
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.prompt",
    "gen_ai.prompt.0.content",
    "gen_ai.completion",
    "gen_ai.completion.0.content",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.tool.definitions",
    "gen_ai.choice",
    "gen_ai.user.message",
    # OpenInference
    "input.value",
    "output.value",
    "llm.input_messages",
    "llm.input_messages.0.message.content",
    "llm.output_messages",
    "llm.output_messages.0.message.content",
    "llm.prompts",
    "llm.prompt_template.variables",
    "llm.function_call",
    "tool.parameters",
    "message.content",
    "metadata",
    # Pydantic AI (and Logfire's message attributes)
    "final_result",
    "all_messages_events",
    "pydantic_ai.all_messages",
    "tool_arguments",
    "tool_response",
    "model_request_parameters",
    "logfire.msg",
    "logfire.msg_template",
    "pydantic_ai.decision.questions",
    "pydantic_ai.decision.answers",
    # Strands
    "tool.result",
    # Google ADK
    "gcp.vertex.agent.llm_request",
    "gcp.vertex.agent.llm_response",
    "gcp.vertex.agent.tool_call_args",
    "gcp.vertex.agent.tool_response",
    "gcp.vertex.agent.data",
    # CrewAI
    "crewai.crew.inputs",
    "crewai.crew.output",
    "crewai.task.description",
    "crewai.task.output",
    "crewai.memory.content",
    # the same names in another case
    "Final_Result",
    "INPUT.VALUE",
]
SAFE_ALTERNATIVE = "`tools`"


@pytest.mark.parametrize("key", CONTENT_ATTRIBUTES)
def test_a_content_attribute_is_refused_as_a_rule_with_a_safe_alternative(key: str) -> None:
    with pytest.raises(VerdictgateError) as parsed:
        DecisionRule.parse(f"attribute:{key}")
    with pytest.raises(VerdictgateError) as built:
        DecisionRule("attribute", key)
    for refused in (parsed.value, built.value):
        message = str(refused)
        assert message.startswith(f"decision: {key} carries prompt or response content")
        assert SAFE_ALTERNATIVE in message and "verdictgate.decision(point).record" in message
        assert "\n" not in message


@pytest.mark.parametrize("key", ["app.route", "pydantic_ai.decision.route", "verdictgate.verdict"])
def test_an_attribute_that_holds_a_label_is_still_a_rule(key: str) -> None:
    assert DecisionRule.parse(f"attribute:{key}").keeps == (key,)


def test_the_cli_refuses_it_in_one_line_before_any_call(cli) -> None:
    result = cli(
        "run",
        "--agent",
        "examples/strands_router.py:stable_router",
        "--suite",
        "examples/support_tools_suite.json",
        "--isolation",
        "fresh-instance",
        "--decision",
        "attribute:final_result",
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("verdictgate: error: --decision: final_result carries")
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def entered(manager) -> None:
    with manager:
        pass


def test_the_python_api_refuses_it_at_every_door() -> None:
    calls: list[str] = []
    suite = Suite("s", "p", (Case("c0", "hello", "a"),), Contract(frozenset({"a"})))
    rule = "attribute:gen_ai.output.messages"
    doors = [
        lambda: verdictgate.run(calls.append, suite, decision=rule),
        lambda: entered(verdictgate.trial(run="r", case="c0", index=0, decision=rule, point="p")),
        lambda: entered(verdictgate.trial_span(run="r", case="c0", index=0, decision=rule)),
        lambda: verdictgate.from_strands(lambda: None, decision=rule),
    ]
    for door in doors:
        with pytest.raises(VerdictgateError, match="carries prompt or response content"):
            door()
    assert calls == []  # refused before the agent was called
