"""Offline agents on the real frameworks, driven by scripts: which tools, nodes or hand-offs each
call takes is chosen per input and per call, so a test knows every trial's decision in advance.

A script maps an input to a list of routes; the n-th call on that input takes route n (cycling).
Routes are tool lists (Strands), branch names (LangGraph) or agent names (OpenAI Agents).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Annotated, Any, TypedDict

from langgraph.graph.message import add_messages

from verdictgate import NoDecision

os.environ.setdefault("OPENAI_API_KEY", "offline-test-key")  # no client is made: scripted models
os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")

Script = dict[str, Sequence[Any]]

SECRET_INPUT = "my card 4111 1111 1111 1111 was charged twice"
"""Text a privacy test looks for in everything verdictgate exports and stores."""
SECRET_ARGUMENT = "acct-7731-secret"
SECRET_OUTPUT = "Refund approved for acct-7731-secret"


class Turns:
    """The n-th call on each input gets the script's n-th route (thread-safe)."""

    def __init__(self, script: Script) -> None:
        self._script = script
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def route(self, text: str) -> Any:
        with self._lock:
            n = self._calls[text] = self._calls.get(text, -1) + 1
        routes = self._script[text]
        return routes[n % len(routes)]


# -- Strands --------------------------------------------------------------------------------


def strands_factory(script: Script) -> Callable[[], Any]:
    """A factory of Strands agents whose scripted model calls the route's tools in its first
    turn (all in one turn: parallel calls) and then answers with text."""
    from strands import Agent, tool
    from strands.models import Model

    turns = Turns(script)

    @tool
    def refund(account: str) -> str:
        """Refund a charge.

        Args:
            account: the account to refund
        """
        return SECRET_OUTPUT

    @tool
    def escalate(account: str) -> str:
        """Hand the case to a person.

        Args:
            account: the account concerned
        """
        return "escalated"

    @tool
    def lookup(account: str) -> str:
        """Look an account up.

        Args:
            account: the account to look up
        """
        return "found"

    class ScriptedModel(Model):
        def __init__(self) -> None:
            self.config: dict[str, Any] = {"model_id": "scripted"}
            self.tools: list[str] | None = None

        def update_config(self, **model_config: Any) -> None:
            self.config.update(model_config)

        def get_config(self) -> Any:
            return self.config

        async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # type: ignore[no-untyped-def]
            raise NotImplementedError
            yield

        async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):  # type: ignore[no-untyped-def]
            if self.tools is None:  # the first turn: what the script says
                text = messages[0]["content"][0]["text"]
                self.tools = list(turns.route(text))
                calls = [(name, {"account": SECRET_ARGUMENT}) for name in self.tools]
            else:
                calls = []
            yield {"messageStart": {"role": "assistant"}}
            for i, (name, arguments) in enumerate(calls):
                start = {"toolUse": {"name": name, "toolUseId": f"call-{i}"}}
                yield {"contentBlockStart": {"contentBlockIndex": i, "start": start}}
                delta = {"toolUse": {"input": json.dumps(arguments)}}
                yield {"contentBlockDelta": {"contentBlockIndex": i, "delta": delta}}
                yield {"contentBlockStop": {"contentBlockIndex": i}}
            if not calls:
                yield {"contentBlockStart": {"contentBlockIndex": 0, "start": {}}}
                delta = {"text": SECRET_OUTPUT}
                yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": delta}}
                yield {"contentBlockStop": {"contentBlockIndex": 0}}
            yield {"messageStop": {"stopReason": "tool_use" if calls else "end_turn"}}
            usage = {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
            yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}

    def factory() -> Any:
        return Agent(
            name="support",
            model=ScriptedModel(),
            tools=[refund, escalate, lookup],
            callback_handler=None,
            system_prompt="You route support requests.",
        )

    return factory


# -- LangGraph --------------------------------------------------------------------------------


class State(TypedDict):
    """The graph's state (at module level: LangGraph resolves its annotations by name)."""

    messages: Annotated[list, add_messages]
    route: str


def langgraph_factory(script: Script) -> Callable[[], Any]:
    """A factory of a compiled graph: `classify` picks the branch the script names (`billing`
    or `chitchat`); `billing` calls the `refund` tool through a scripted chat model."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    turns = Turns(script)

    @tool
    def refund(account: str) -> str:
        """Refund a charge."""
        return SECRET_OUTPUT

    class ScriptedChat(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    def build() -> Any:
        def classify(state: State) -> dict:
            return {"route": turns.route(state["messages"][0].content)}

        def billing(state: State) -> dict:
            if any(getattr(m, "type", "") == "tool" for m in state["messages"]):
                return {"messages": [AIMessage(content=SECRET_OUTPUT)]}
            call = {
                "name": "refund",
                "args": {"account": SECRET_ARGUMENT},
                "id": "call-1",
                "type": "tool_call",
            }
            model = ScriptedChat(responses=[AIMessage(content="", tool_calls=[call])])
            return {"messages": [model.invoke(state["messages"])]}

        def chitchat(state: State) -> dict:
            return {"messages": [AIMessage(content="Happy to help.")]}

        graph = StateGraph(State)
        graph.add_node("classify", classify)
        graph.add_node("billing", billing)
        graph.add_node("chitchat", chitchat)
        graph.add_node("tools", ToolNode([refund]))
        graph.add_edge(START, "classify")
        graph.add_conditional_edges("classify", lambda s: s["route"], ["billing", "chitchat"])
        graph.add_conditional_edges("billing", tools_condition, {"tools": "tools", END: END})
        graph.add_edge("tools", "billing")
        graph.add_edge("chitchat", END)
        return graph.compile(name="support_graph")

    return build


def langgraph_nodes(branch: str) -> tuple[str, ...]:
    """The nodes a graph of `langgraph_factory` runs, in step order, when `classify` picks
    `branch` (`billing` calls its tool and answers after it)."""
    if branch == "billing":
        return ("classify", "billing", "tools", "billing")
    return ("classify", branch)


# -- OpenAI Agents SDK ----------------------------------------------------------------------


def openai_agents_factory(script: Script) -> Callable[[], Any]:
    """A factory of a `triage` agent that hands off to the agent the script names (`billing`
    or `support`) or, for `none`, answers itself; `billing` calls `refund` before answering."""
    from agents import Agent, ModelResponse, function_tool
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    turns = Turns(script)

    def call(name: str, arguments: dict) -> Any:
        return ResponseFunctionToolCall(
            type="function_call",
            id=f"fc-{name}",
            call_id=f"c-{name}",
            name=name,
            arguments=json.dumps(arguments),
            status="completed",
        )

    def say(text: str) -> Any:
        content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
        return ResponseOutputMessage(
            type="message", id="msg", role="assistant", status="completed", content=content
        )

    class ScriptedModel(Model):
        def __init__(self, role: str) -> None:
            self.role = role
            self.calls = 0

        async def get_response(
            self,
            system_instructions,
            input,
            model_settings,
            tools,  # type: ignore[no-untyped-def]
            output_schema,
            handoffs,
            tracing,
            **kwargs,
        ):
            self.calls += 1
            if self.role == "triage":
                text = input if isinstance(input, str) else input[0]["content"]
                target = turns.route(text)
                output = (
                    [say(SECRET_OUTPUT)]
                    if target == "none"
                    else [call(f"transfer_to_{target}", {})]
                )
            elif self.role == "billing" and self.calls == 1:
                output = [call("refund", {"account": SECRET_ARGUMENT})]
            else:
                output = [say(SECRET_OUTPUT)]
            usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
            return ModelResponse(output=output, usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    def refund(account: str) -> str:
        """Refund a charge."""
        return SECRET_OUTPUT

    def factory() -> Any:
        billing = Agent(
            name="billing", instructions="Billing.", model=ScriptedModel("billing"), tools=[refund]
        )
        support = Agent(name="support", instructions="Support.", model=ScriptedModel("support"))
        return Agent(
            name="triage",
            instructions="Triage.",
            model=ScriptedModel("triage"),
            handoffs=[billing, support],
        )

    return factory


# -- Pydantic AI ----------------------------------------------------------------------------


def pydantic_ai_factory(script: Script) -> Callable[[], Callable[[str], Any]]:
    """A factory of a `triage` Pydantic AI agent (instrumented) whose scripted model calls
    `transfer_to_{route}`, a tool that runs that agent, or, for `none`, answers itself;
    `billing` calls `refund` and `support` calls `lookup` before answering."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    Agent.instrument_all()  # records through the global tracer provider
    turns = Turns(script)

    def scripted(first_call: Callable[[str], str | None]) -> FunctionModel:
        """A model that makes the call `first_call(prompt)` names in its first turn, then
        answers with text."""

        def respond(messages: list[Any], info: Any) -> ModelResponse:
            tool = first_call(messages[0].parts[-1].content) if len(messages) == 1 else None
            if tool is None:
                return ModelResponse(parts=[TextPart(SECRET_OUTPUT)])
            return ModelResponse(parts=[ToolCallPart(tool, {"account": SECRET_ARGUMENT})])

        return FunctionModel(respond)

    def transfer_to(agent: Agent[None, str]) -> Callable[[str], Any]:
        async def transfer(account: str) -> str:
            """Hand the request over."""
            return (await agent.run(SECRET_INPUT)).output

        return transfer

    def specialist(name: str, tool_name: str) -> Agent[None, str]:
        agent = Agent(scripted(lambda _: tool_name), name=name)
        agent.tool_plain(name=tool_name)(lambda account: SECRET_OUTPUT)
        return agent

    def factory() -> Callable[[str], Any]:
        handed_to = {
            "billing": specialist("billing", "refund"),
            "support": specialist("support", "lookup"),
        }

        def route(text: str) -> str | None:
            target = turns.route(text)
            return None if target == "none" else f"transfer_to_{target}"

        triage = Agent(scripted(route), name="triage")
        for target, agent in handed_to.items():
            triage.tool_plain(name=f"transfer_to_{target}")(transfer_to(agent))
        return lambda text: triage.run_sync(text).output

    return factory


def pydantic_ai_decision(rule: str, route: str) -> Any:
    """What `rule` must derive from the spans of a call whose scripted route is `route`."""
    if rule != "tools":
        return hand_off(route)
    if route == "none":
        return NoDecision("no_tool_selected")
    specialist_tool = {"billing": "refund", "support": "lookup"}
    return (f"transfer_to_{route}", specialist_tool[route])


def hand_off(route: str) -> Any:
    """What the `agents` rule must derive from a triage call whose scripted route is `route`
    (Pydantic AI and the OpenAI Agents SDK alike): the agent handed to, or no hand-off."""
    return NoDecision("no_handoff") if route == "none" else (route,)


# -- the OpenAI client with the official GenAI instrumentation -----------------------------------


def openai_genai_factory(script: Script, tool_spans: bool = True) -> Callable[[], Any]:
    """A factory of an app on the OpenAI client, instrumented by OpenTelemetry's
    `opentelemetry-instrumentation-openai-v2` (which records `chat` spans only): a scripted
    server answers the first request with the route's tool calls, the app runs them, each in
    the GenAI utility's `execute_tool` span when `tool_spans`, and asks again for the answer."""
    import httpx
    import openai
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.util.genai.handler import get_telemetry_handler

    instrumentor = OpenAIInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()  # against the global tracer provider
    turns = Turns(script)

    def scripted_server(request: httpx.Request) -> httpx.Response:
        messages = json.loads(request.content)["messages"]
        if messages[-1]["role"] == "user":
            calls = [
                {
                    "id": f"call-{n}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": json.dumps({"account": SECRET_ARGUMENT}),
                    },
                }
                for n, name in enumerate(turns.route(messages[-1]["content"]))
            ]
        else:
            calls = []
        message = {"role": "assistant", "content": None if calls else SECRET_OUTPUT}
        if calls:
            message["tool_calls"] = calls
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if calls else "stop",
        }
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return httpx.Response(
            200,
            json={
                "id": "scripted",
                "object": "chat.completion",
                "created": 0,
                "model": "scripted",
                "choices": [choice],
                "usage": usage,
            },
        )

    tools = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
        for name in ("refund", "escalate", "lookup")
    ]

    def factory() -> Callable[[str], Any]:
        client = openai.OpenAI(
            api_key="offline-test-key",
            base_url="http://scripted.invalid/v1",
            http_client=httpx.Client(transport=httpx.MockTransport(scripted_server)),
        )
        handler = get_telemetry_handler()

        def call(text: str) -> Any:
            messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
            answer = client.chat.completions.create(
                model="scripted", messages=messages, tools=tools
            )
            reply = answer.choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            for tool_call in reply.tool_calls or ():
                name = tool_call.function.name
                with handler.tool(name, tool_call_id=tool_call.id) if tool_spans else nullcontext():
                    result = SECRET_OUTPUT  # the app runs the tool
                messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": result})
            if reply.tool_calls:
                answer = client.chat.completions.create(model="scripted", messages=messages)
            return answer.choices[0].message.content

        return call

    return factory
