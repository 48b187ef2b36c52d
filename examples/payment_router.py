"""A six-route payment-dispute router, in three variants for the verdictgate demo.

Each factory returns an agent: a callable from the customer's message to a route label.
- `stable_router`: keyword rules; the same message always gets the same route.
- `flipping_router`: the same rules, but unrecognised-purchase messages flip between
  card_security and merchant_dispute from call to call (as a sampled model might).
- `collapsed_router`: sends everything to merchant_dispute.

Two agents also reply, for the semantic tier (examples/answer_suite.json, docs/tiers.md): each
returns {"verdict": route, "text": reply}.
- `helpful_agent`: replies in one of a few phrasings per route, chosen at random on each call
  (as a sampled model words the same answer differently).
- `off_topic_agent`: routes the same way, but every reply is about something else.
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


REPLIES: dict[str, tuple[str, ...]] = {
    "duplicate_charge": (
        "You were charged twice for one order; we will reverse the duplicate payment.",
        "We found a duplicate charge for the same purchase and will refund the extra payment.",
        "The second identical payment is a duplicate, and we are reversing it now.",
    ),
    "refund_delay": (
        "Your refund has been approved but is delayed; it should reach you within five days.",
        "The merchant's refund is on its way and will arrive within five business days.",
        "We chased the late refund: it will be credited to your account within five days.",
    ),
    "card_security": (
        "We have blocked your card because of the unrecognised purchase and will send a new one.",
        "For your safety your card is frozen; a replacement card is on its way.",
        "We stopped the card after the unauthorised payment and are issuing a new card.",
    ),
    "merchant_dispute": (
        "We have opened a dispute with the merchant about the order you paid for.",
        "A dispute is now open with the seller; we will contact them about your purchase.",
        "We are disputing the charge with the merchant on your behalf.",
    ),
    "cash_withdrawal": (
        "The ATM did not dispense your cash; we will return the money to your balance.",
        "We will credit back the cash the machine failed to give you.",
        "The failed cash withdrawal will be refunded to your account.",
    ),
    "transfer_delay": (
        "Your bank transfer is delayed; it should reach the recipient within two days.",
        "The pending transfer is being processed and will arrive within two working days.",
        "We checked your transfer: it is delayed but will be delivered within two days.",
    ),
}


def helpful_agent():
    """Routes, and replies with a randomly chosen phrasing of the right answer."""
    sampler = random.SystemRandom()

    def answer(message: str) -> dict:
        label = route(message)
        return {"verdict": str(label), "text": sampler.choice(REPLIES.get(str(label), ("",)))}

    return answer


def off_topic_agent():
    """Routes correctly, but every reply is about something else."""
    return lambda message: {
        "verdict": str(route(message)),
        "text": "Our branches are open from nine to five on weekdays.",
    }
