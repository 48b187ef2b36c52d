"""The vocabulary of a judgement: which rule judges a change rate, what it can say, and the
bound on each of its wrong answers. Every statistics module builds on it; it imports none."""

from __future__ import annotations

from enum import Enum

ALPHA = 0.025
"""The bound on each wrong answer of the exact and sequential rules (a side of a 95% interval)."""
MAX_SEQUENTIAL_TOLERANCE = 0.25
"""The e-process's alternatives (4t) must stay below 1: tolerances from here on are refused."""


class Method(str, Enum):
    """How change rates are judged. A fixed number of pairs: the exact rule (the default), which
    keeps both wrong answers within their bound at every n, or Wilson's score interval
    (AgentVerity's rule), whose false "stochastic" reaches 14.3% at n = 3 and false
    "deterministic" 2.64% (t = 0.05 / 0.10; docs/statistics.md)."""

    WILSON = "wilson"
    EXACT = "exact"
    SEQUENTIAL = "sequential"
    """The mixture e-process (`sequential`): valid however often the evidence is looked at."""


DEFAULT_METHOD = Method.EXACT
"""The rule a policy judges by unless told otherwise: valid in both directions at every n."""


class Stability(str, Enum):
    """What the evidence says about a change rate against a tolerance."""

    DETERMINISTIC = "deterministic"
    STOCHASTIC = "stochastic"
    UNDECIDED = "undecided"


def side_error(confidence: float) -> float:
    """The wrong-answer bound of one side of a two-sided interval: 0.025 at 0.95 (to the 15
    digits the confidence is written with, not 0.025000000000000022)."""
    return float(f"{(1.0 - confidence) / 2.0:.15g}")


def check_counts(flips: int, pairs: int, tolerance: float) -> None:
    """ValueError unless 0 < tolerance < 1 and 0 <= flips <= pairs."""
    if not 0.0 < tolerance < 1.0:
        raise ValueError(f"tolerance must be between 0 and 1, got {tolerance}")
    if pairs < 0 or not 0 <= flips <= pairs:
        raise ValueError(f"need 0 <= flips <= pairs, got {flips}/{pairs}")
