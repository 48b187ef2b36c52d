"""The name facts of one agent-framework span: what decision rules read, never content.

Agents built on Strands, LangGraph or the OpenAI Agents SDK already emit OpenTelemetry spans
that name the tools called, the agents invoked and the graph nodes run. A span is reduced here
to those names, its place in the trace and its start time; its input, output, messages, tool
arguments and events are never read, so nothing kept from it can quote the agent's text.

Names are read from the GenAI semantic conventions (Strands natively, LangSmith's OTel mode,
OpenInference with its GenAI option) and from OpenInference's own attributes:

| fact   | GenAI semantic conventions                              | OpenInference                 |
|--------|---------------------------------------------------------|-------------------------------|
| tool   | `gen_ai.tool.name` on `gen_ai.operation.name=execute_tool` | `tool.name` (any span kind) |
| agent  | `gen_ai.agent.name` on `gen_ai.operation.name=invoke_agent` | `agent.name` on an AGENT span |
| node   | `langsmith.metadata.langgraph_node` / `_step`            | `langgraph_node` / `langgraph_step` in `metadata` (JSON) |
| error  | span status ERROR, typed by `error.type` when present    | the same                     |

A rule counts an error only on the framework's top spans (those right below the trial's span):
a tool that failed and that the agent recovered from is part of its route, not an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

import msgspec

from .wire_types import AttributeValue, JsonObject

OPERATION = "gen_ai.operation.name"
GENAI_TOOL = "gen_ai.tool.name"
GENAI_AGENT = "gen_ai.agent.name"
OPENINFERENCE_KIND = "openinference.span.kind"
OPENINFERENCE_TOOL = "tool.name"
OPENINFERENCE_AGENT = "agent.name"
OPENINFERENCE_METADATA = "metadata"
LANGSMITH_NODE = "langsmith.metadata.langgraph_node"
LANGSMITH_STEP = "langsmith.metadata.langgraph_step"
ERROR_TYPE = "error.type"

FACT_KEYS = (
    OPERATION,
    GENAI_TOOL,
    GENAI_AGENT,
    OPENINFERENCE_KIND,
    OPENINFERENCE_TOOL,
    OPENINFERENCE_AGENT,
    OPENINFERENCE_METADATA,
    LANGSMITH_NODE,
    LANGSMITH_STEP,
    ERROR_TYPE,
)
"""Every attribute `facts_of` reads (a receiver decodes these and no others)."""

MAX_NAME = 256
"""Longest name kept: a tool, agent or node name is short; anything longer is not a name."""
MAX_METADATA = 64 << 10
"""Largest OpenInference `metadata` string read for the LangGraph node (it may hold a run's
configuration; a larger one is skipped rather than parsed)."""

CONTENT_PREFIXES = (
    # GenAI semantic conventions: messages, instructions, prompts, completions, tool calls
    "gen_ai.input.",
    "gen_ai.output.",
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.tool.definitions",
    "gen_ai.choice",
    "gen_ai.user.message",
    "gen_ai.system.message",
    "gen_ai.assistant.message",
    "gen_ai.tool.message",
    # OpenInference
    "input.",
    "output.",
    "llm.input_messages",
    "llm.output_messages",
    "llm.prompts",
    "llm.prompt_template",
    "llm.function_call",
    "llm.tools",
    "tool.parameters",
    "tool_call.",
    "message.",
    "retrieval.documents",
    "reranker.",
    "embedding.",
    "exception.",
    "langsmith.metadata.",
    # Pydantic AI (Logfire's message and its template may quote arguments)
    "pydantic_ai.all_messages",
    "logfire.msg",
    # Google ADK
    "gcp.vertex.agent.llm_",
    "gcp.vertex.agent.tool_",
    "gcp.vertex.agent.data",
)
"""Attribute name prefixes that carry an agent's input or output text in the conventions
verdictgate reads: never read, even when a rule names one (`attribute:KEY` refuses them)."""
CONTENT_NAMES = frozenset(
    {
        OPENINFERENCE_METADATA,
        # Pydantic AI: the run's answer, its messages, a tool's arguments and result (its
        # pre-GenAI-1.37 names), the model request's parameters, its decision model's prose
        "final_result",
        "all_messages_events",
        "tool_arguments",
        "tool_response",
        "model_request_parameters",
        "pydantic_ai.decision.questions",
        "pydantic_ai.decision.answers",
        "pydantic_ai.decision.route_question",
        "pydantic_ai.decision.route_questions",
        "pydantic_ai.decision.state",
        # Strands: a tool's result (its events mode)
        "tool.result",
        # CrewAI: inputs, outputs, task prose, memory and knowledge queries
        "gen_ai.agent.description",
        "crewai.crew.inputs",
        "crewai.crew.output",
        "crewai.flow.inputs",
        "crewai.flow.result",
        "crewai.method.result",
        "crewai.task.description",
        "crewai.task.expected_output",
        "crewai.task.output",
        "crewai.guardrail.description",
        "crewai.guardrail.result",
        "crewai.human_feedback.message",
        "crewai.knowledge.query",
        "crewai.knowledge.task_prompt",
        "crewai.mcp.tool_result",
        "crewai.memory.content",
        "crewai.memory.query",
        "crewai.memory.results",
    }
)
"""Attribute names, whole, that carry input or output text (as CONTENT_PREFIXES)."""


def carries_content(key: str) -> bool:
    """Whether an attribute name is one that holds input or output text (in any case)."""
    key = key.strip().lower()
    return key in CONTENT_NAMES or key.startswith(CONTENT_PREFIXES)


class SpanFacts(msgspec.Struct, frozen=True, gc=False):
    """What a decision rule may know of one span. Ids are the span's and its parent's (hex)."""

    span_id: str
    parent_id: str | None
    start_ns: int
    tool: str | None = None
    agent: str | None = None
    node: str | None = None
    step: int | None = None
    error: str | None = None
    """The error type when the span ended in error (`error.type`, else `<kind>_error`)."""
    values: tuple[tuple[str, str], ...] = ()
    """The attributes an `attribute:KEY` rule asked for, as text."""


def facts_of(
    span_id: str,
    parent_id: str | None,
    start_ns: int,
    attributes: Mapping[str, AttributeValue],
    failed: bool,
    keep: Iterable[str] = (),
) -> SpanFacts:
    """The name facts of a span, from its attributes and whether its status is ERROR.
    `keep` names further attributes to keep as text (never one that carries content)."""
    operation = attributes.get(OPERATION)
    kind = attributes.get(OPENINFERENCE_KIND)
    agent = None
    # only a tool's own span carries `tool.name` (OpenInference may call it an AGENT span when
    # the tool's name holds "agent", as a supervisor's `transfer_to_x_agent` does)
    tool = _name(attributes.get(OPENINFERENCE_TOOL))
    if tool is None and (operation == "execute_tool" or kind == "TOOL"):
        tool = _name(attributes.get(GENAI_TOOL))
    if operation == "invoke_agent":
        agent = _name(attributes.get(GENAI_AGENT))
    elif kind == "AGENT":
        agent = _name(attributes.get(OPENINFERENCE_AGENT))
    node, step = _node(attributes)
    error = None
    if failed:
        error = _name(attributes.get(ERROR_TYPE)) or _error_kind(tool, agent, node)
    values = tuple(
        (key, text)
        for key in keep
        if not carries_content(key) and (text := _text(attributes.get(key))) is not None
    )
    return SpanFacts(span_id, parent_id, start_ns, tool, agent, node, step, error, values)


def children_index(facts: Iterable[SpanFacts]) -> dict[str, list[SpanFacts]]:
    """One trace's span facts by their parent's span id."""
    children: dict[str, list[SpanFacts]] = {}
    for fact in facts:
        if fact.parent_id is not None:
            children.setdefault(fact.parent_id, []).append(fact)
    return children


def descendants(children: dict[str, list[SpanFacts]], root: str) -> list[SpanFacts]:
    """The facts of the spans below span `root`, from a trace's `children_index` (however they
    arrived)."""
    found: list[SpanFacts] = []
    seen = {root}
    waiting = [root]
    while waiting:
        for child in children.get(waiting.pop(), ()):
            if child.span_id not in seen:  # a span id sent twice, or a loop: once
                seen.add(child.span_id)
                found.append(child)
                waiting.append(child.span_id)
    return found


def _name(value: AttributeValue) -> str | None:
    if isinstance(value, str) and value.strip() and len(value) <= MAX_NAME:
        return value
    return None


LABEL = re.compile(r"[^\W_][\w .:/-]{0,63}")
"""What an `attribute:KEY` value must look like to be a decision: a short label (a word, a
route name, `approve`, `tier-2`), never a sentence, a JSON document or a quote of the input."""


def _text(value: AttributeValue) -> str | None:
    """A scalar attribute as a label (a verdict an agent recorded itself); None for anything
    else, so that no text but a label's can become a decision."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value if isinstance(value, str) and LABEL.fullmatch(value) else None


def _node(attributes: Mapping[str, AttributeValue]) -> tuple[str | None, int | None]:
    """LangGraph's node and step: LangSmith's flattened metadata, else OpenInference's JSON."""
    node, step = attributes.get(LANGSMITH_NODE), attributes.get(LANGSMITH_STEP)
    if node is None:
        metadata = attributes.get(OPENINFERENCE_METADATA)
        if isinstance(metadata, str) and "langgraph_node" in metadata:
            parsed = _json_object(metadata)
            node, step = parsed.get("langgraph_node"), parsed.get("langgraph_step")
    return _name(node), step if isinstance(step, int) and not isinstance(step, bool) else None


def _json_object(text: str) -> JsonObject:
    """A JSON object's fields; empty when the text is larger than MAX_METADATA, nested deeper
    than MAX_NESTING (measured without recursion, before parsing) or not an object."""
    if len(text) > MAX_METADATA or _nesting(text) > MAX_NESTING:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


MAX_NESTING = 32
"""Deepest JSON read for the LangGraph node (LangGraph's metadata is a few levels deep)."""
_STRING = re.compile(r'"(?:[^"\\]|\\.)*(?:"|$)', re.S)
"""A JSON string, or an unterminated one to the end: linear however the quotes fall."""


def _nesting(text: str) -> int:
    """How deep arrays and objects nest in a JSON text, strings left out (one pass, no
    recursion)."""
    depth = deepest = 0
    for char in _STRING.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _error_kind(tool: str | None, agent: str | None, node: str | None) -> str:
    if tool is not None:
        return "tool_error"
    if agent is not None:
        return "agent_error"
    return "node_error" if node is not None else "framework_error"
