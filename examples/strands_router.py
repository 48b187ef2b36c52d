"""A Strands support agent that routes each message to one tool, offline: its model is scripted
(keyword rules standing in for an LLM), so the example needs no network and no API key.

    verdictgate run --agent examples/strands_router.py:stable_router \
        --suite examples/support_tools_suite.json --decision tools --isolation fresh-instance

The agent's answer is text; the decision is the tool it called, read from the spans Strands
emits (`--decision tools`). `flipping_router` is the same agent whose model, like a sampled LLM,
opens a dispute for half of the card-misuse reports instead of blocking the card.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

from strands import Agent, tool
from strands.models import Model

RULES: list[tuple[tuple[str, ...], str]] = [
    (("recognise", "without permission"), "block_card"),
    (("seller", "merchant"), "open_dispute"),
    (("refund", "money back"), "refund"),
    (("parcel", "order"), "track_order"),
]


@tool
def block_card(reason: str) -> str:
    """Block the customer's card.

    Args:
        reason: why the card is blocked
    """
    return "The card is blocked; a new one is on its way."


@tool
def open_dispute(reason: str) -> str:
    """Open a dispute with the merchant.

    Args:
        reason: what the dispute is about
    """
    return "A dispute is open."


@tool
def refund(reason: str) -> str:
    """Refund the customer.

    Args:
        reason: why the refund is due
    """
    return "The refund is on its way."


@tool
def track_order(reason: str) -> str:
    """Look up where an order is.

    Args:
        reason: what the customer asked
    """
    return "The parcel arrives tomorrow."


class KeywordModel(Model):
    """A scripted stand-in for an LLM: the first turn calls the tool the rules pick (`choose`
    may change it), the second answers with text."""

    def __init__(self, choose: Callable[[str, str], str]) -> None:
        self.choose = choose
        self.config: dict[str, Any] = {"model_id": "keyword-rules"}

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> Any:
        return self.config

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # type: ignore[no-untyped-def]
        raise NotImplementedError("this example's model only routes")
        yield

    async def stream(
        self, messages, tool_specs=None, system_prompt=None, **kwargs
    ) -> AsyncIterator[Any]:  # type: ignore[no-untyped-def]
        last = messages[-1]["content"][0]
        yield {"messageStart": {"role": "assistant"}}
        if "text" in last:  # the customer's message: call a tool
            text = last["text"].lower()
            picked = next((name for words, name in RULES if any(w in text for w in words)), None)
            name = self.choose(text, picked) if picked else None
        else:  # a tool's result: answer
            name = None
        if name:
            start = {"toolUse": {"name": name, "toolUseId": "call-1"}}
            delta = {"toolUse": {"input": json.dumps({"reason": "as asked"})}}
        else:
            start, delta = {}, {"text": "Done."}
        yield {"contentBlockStart": {"contentBlockIndex": 0, "start": start}}
        yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": delta}}
        yield {"contentBlockStop": {"contentBlockIndex": 0}}
        yield {"messageStop": {"stopReason": "tool_use" if name else "end_turn"}}


def _router(choose: Callable[[str, str], str]) -> Callable[[str], str]:
    agent = Agent(
        name="support_router",
        model=KeywordModel(choose),
        tools=[block_card, open_dispute, refund, track_order],
        system_prompt="Route the customer's message to exactly one tool.",
        callback_handler=None,
    )
    return lambda message: str(agent(message))


def stable_router() -> Callable[[str], str]:
    """The rules' tool, every time."""
    return _router(lambda text, picked: picked)


SAMPLING = random.Random(7)
"""The flipping model's coin, seeded so the example gives the same run every time."""


def flipping_router() -> Callable[[str], str]:
    """Opens a dispute for half of the card-misuse reports (at random)."""

    def choose(text: str, picked: str) -> str:
        if picked == "block_card" and SAMPLING.random() < 1 / 2:
            return "open_dispute"
        return picked

    return _router(choose)
