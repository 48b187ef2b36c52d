"""A six-route payment-dispute router, in three variants for the verdictgate demo.

Each factory returns an agent: a callable from the customer's message to a route label.
- `stable_router`: keyword rules; the same message always gets the same route.
- `flipping_router`: the same rules, but unrecognised-purchase messages flip between
  card_security and merchant_dispute from call to call (as a sampled model might).
- `collapsed_router`: sends everything to merchant_dispute.
"""

from __future__ import annotations

import random

import verdictgate

RULES: list[tuple[tuple[str, ...], str]] = [
    (("twice", "two identical"), "duplicate_charge"),
    (("refund",), "refund_delay"),
    (("recognise", "without permission"), "card_security"),
    (("atm", "cash machine"), "cash_withdrawal"),
    (("transfer",), "transfer_delay"),
    (("merchant", "seller"), "merchant_dispute"),
]


def route(message: str) -> str | verdictgate.NoDecision:
    """The first route whose keywords appear in the message, else no decision."""
    text = message.lower()
    for keywords, label in RULES:
        if any(keyword in text for keyword in keywords):
            return label
    return verdictgate.NoDecision("no_route")


def stable_router():
    """A deterministic router."""
    return route


def flipping_router():
    """A router whose card_security route flips on reruns."""
    sampler = random.SystemRandom()

    def decide(message: str):
        label = route(message)
        if label == "card_security":
            return sampler.choice(["card_security", "merchant_dispute"])
        return label

    return decide


def collapsed_router():
    """A router that answers merchant_dispute to everything."""
    return lambda message: "merchant_dispute"
