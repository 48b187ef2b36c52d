"""A LangGraph support router, offline: the edge out of START picks one of four nodes by keyword
rules (standing in for a classifier), so the example needs no network and no API key.

    verdictgate run --agent examples/langgraph_router.py:stable_router \
        --suite examples/support_tools_suite.json

Each FACTORY returns `verdictgate.from_langgraph(...)`: every trial runs in a new
thread of the graph (fresh-session) and its decision is the node it ran, read from the spans
OpenInference makes of the run (rule `nodes`; `--decision` overrides it). `flipping_router`
sends half of the card-misuse reports to `open_dispute` instead of `block_card`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from verdictgate import Agent, from_langgraph

RULES: list[tuple[tuple[str, ...], str]] = [
    (("recognise", "without permission"), "block_card"),
    (("seller", "merchant"), "open_dispute"),
    (("refund", "money back"), "refund"),
    (("parcel", "order"), "track_order"),
]
REPLIES = {
    "block_card": "The card is blocked; a new one is on its way.",
    "open_dispute": "A dispute is open.",
    "refund": "The refund is on its way.",
    "track_order": "The parcel arrives tomorrow.",
}


class Conversation(TypedDict, total=False):
    message: str
    reply: str


def build_graph(choose: Callable[[str], str] | None = None) -> Any:
    """The compiled router; `choose(message)` picks the node (default: the keyword rules)."""
    choose = choose or keyword_rules
    graph = StateGraph(Conversation)
    for name, reply in REPLIES.items():
        graph.add_node(name, lambda state, reply=reply: {"reply": reply})
        graph.add_edge(name, END)
    graph.add_conditional_edges(START, lambda state: choose(state["message"]), list(REPLIES))
    return graph.compile(name="support_router")


def keyword_rules(message: str) -> str:
    text = message.lower()
    return next((name for words, name in RULES if any(w in text for w in words)), "track_order")


def _router(choose: Callable[[str], str]) -> Agent:
    return from_langgraph(lambda: build_graph(choose), input_of=lambda text: {"message": text})


def stable_router() -> Agent:
    """The rules' node, every time."""
    return _router(keyword_rules)


SAMPLING = random.Random(7)
"""The flipping router's coin, seeded so the example gives the same run every time."""


def flipping_router() -> Agent:
    """Opens a dispute for half of the card-misuse reports (at random)."""

    def choose(message: str) -> str:
        picked = keyword_rules(message)
        return "open_dispute" if picked == "block_card" and SAMPLING.random() < 1 / 2 else picked

    return _router(choose)
