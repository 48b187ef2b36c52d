"""LangGraph: one compiled graph, a new thread per trial; the decision from its node spans."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..assessment import Isolation
from ..decision_rules import DecisionRule
from ..otel.trial_capture import attach_capture
from ..runner.agent import Agent
from .instrumentation import instrument_once
from .verdicts import read_verdict

if TYPE_CHECKING:  # LangChain comes with the `langgraph` extra
    from langchain_core.runnables import RunnableConfig

GraphInput = Any  # boundary: a LangGraph graph's own input type (its state schema's)
"""What a graph is invoked with: each graph declares its own, so `Any` here."""


class Graph(Protocol):
    """A compiled LangGraph graph, as far as an agent of it is called."""

    def invoke(self, input: GraphInput, config: RunnableConfig | None, /) -> object: ...


def from_langgraph(
    graph_factory: Callable[[], Graph],
    *,
    decision: str = "nodes",
    verdict_key: str | None = None,
    input_of: Callable[[str], GraphInput] | None = None,
) -> Agent:
    """An agent for `run` that invokes the graph `graph_factory()` builds once, each trial in a
    new `thread_id` (fresh-session: a checkpointer never carries one trial into the next).

    The graph's input is `input_of(text)`, by default `{"messages": [("user", text)]}`. The
    decision is read from the spans OpenInference makes of the run (rule `decision`, by default
    the nodes it ran, in step order); with `verdict_key`, from that key of the final state
    instead. LangChain is instrumented with OpenInference against the global tracer provider
    (installed first when none is set) unless it already is.
    """
    rule = None if verdict_key is not None else DecisionRule.parse(decision)
    attach_capture()
    _instrument()
    graph = graph_factory()
    make_input = input_of or (lambda text: {"messages": [("user", text)]})

    def call(text: str) -> object:
        config: RunnableConfig = {"configurable": {"thread_id": uuid.uuid4().hex}}
        state = graph.invoke(make_input(text), config)
        return read_verdict(state, verdict_key) if verdict_key is not None else state

    return Agent(call, Isolation.FRESH_SESSION, decision=rule)


def _instrument() -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    instrument_once(LangChainInstrumentor())
