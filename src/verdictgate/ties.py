"""What a path whose steps tied still says: their order there was never observed.

Steps of a path whose spans started in the same instant (`Trial.tied_steps`) may have run in
any order within their range. Two paths are equal up to their ties when some order of each
one's tied steps makes them the same path; whether they are is decided exactly, one range at a
time, as multisets (no order is enumerated: a tied range of k steps has k! of them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from enum import Enum

from .trial_model import Decision, TiedSteps, decision_text


class Agreement(str, Enum):
    """What a rerun pair shows: the same path, another one, or no telling."""

    AGREED = "agreed"
    FLIPPED = "flipped"
    AMBIGUOUS = "ambiguous"
    """Equal only up to the order of tied steps that name two tools or more: they may have
    agreed, or flipped inside the tie."""


def agreement(a: Decision, tied_a: TiedSteps, b: Decision, tied_b: TiedSteps) -> Agreement:
    """Whether a pair of decisions, with the tied ranges of each, agreed. The same path with no
    tie of two different steps agreed; a pair that differs even up to its ties flipped."""
    if not (unordered(a, tied_a) or unordered(b, tied_b)):
        return Agreement.AGREED if a == b else Agreement.FLIPPED
    if isinstance(a, tuple) and isinstance(b, tuple) and equal_up_to_ties(a, tied_a, b, tied_b):
        return Agreement.AMBIGUOUS
    return Agreement.FLIPPED


def unordered(decision: Decision, tied: TiedSteps) -> bool:
    """Whether some tied range of the path holds two different steps (the same tool twice has
    one order)."""
    return isinstance(decision, tuple) and any(
        len(set(decision[start:end])) > 1 for start, end in _ranges(len(decision), tied)
    )


def equal_up_to_ties(
    a: Sequence[str], tied_a: TiedSteps, b: Sequence[str], tied_b: TiedSteps
) -> bool:
    """Whether some order of a's tied steps and some order of b's make one path.

    Each path is cut into blocks (its tied ranges, and each other step alone), and the blocks
    of the two cut the positions into cells. Every cell ends where a block of one path ends, so
    it holds exactly the steps that block has left, and those must be left in the other path's
    block too: one pass, block by block, decides it."""
    if len(a) != len(b):
        return False
    blocks_a, blocks_b = iter(_blocks(len(a), tied_a)), iter(_blocks(len(b), tied_b))
    left_a: Counter[str] = Counter()
    left_b: Counter[str] = Counter()
    end_a = end_b = 0
    while True:
        if not left_a:
            if (block := next(blocks_a, None)) is None:
                return not left_b  # both paths are used up at once: they have one length
            left_a = Counter(a[block[0] : (end_a := block[1])])
        if not left_b:
            block = next(blocks_b)  # what is left of a is as long as what is left of b
            left_b = Counter(b[block[0] : (end_b := block[1])])
        cell = Counter(left_a if end_a <= end_b else left_b)
        if cell - left_a or cell - left_b:  # not left in both blocks
            return False
        left_a -= cell
        left_b -= cell


def _ranges(length: int, tied: TiedSteps) -> list[tuple[int, int]]:
    """The tied ranges that lie within a path of `length` steps, in order and apart (a record
    made in Python is not checked as a trials file's is: what does not fit is no tie)."""
    kept: list[tuple[int, int]] = []
    for start, end in sorted(tied):
        if 0 <= start < end <= length and (not kept or kept[-1][1] <= start):
            kept.append((start, end))
    return kept


def _blocks(length: int, tied: TiedSteps) -> list[tuple[int, int]]:
    """A path's blocks [start, end), in order: each tied range, each other step alone."""
    blocks: list[tuple[int, int]] = []
    position = 0
    for start, end in _ranges(length, tied):
        blocks += [(step, step + 1) for step in range(position, start)]
        blocks.append((start, end))
        position = end
    return blocks + [(step, step + 1) for step in range(position, length)]


class AllowedOrders:
    """A contract's allowed decisions, read as paths, asked which of them a tied path may be."""

    def __init__(self, allowed: Iterable[str]) -> None:
        self._by_steps: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        """The allowed paths by their steps sorted: a path may only be one with its steps."""
        for route in allowed:
            path = tuple(route.split(" > "))
            self._by_steps.setdefault(tuple(sorted(path)), []).append(path)

    def orders(self, decision: Decision, tied: TiedSteps) -> tuple[str, ...]:
        """The allowed decisions (shown, sorted) that some order of a tied path's steps makes."""
        if not isinstance(decision, tuple):
            return ()
        return tuple(
            sorted(
                decision_text(path)
                for path in self._by_steps.get(tuple(sorted(decision)), ())
                if equal_up_to_ties(decision, tied, path, ())
            )
        )


def matches_route(decision: Decision, tied: TiedSteps, route: str) -> bool:
    """Whether a decision is a route (shown), in some order of its tied steps."""
    if not unordered(decision, tied):
        return decision_text(decision) == route
    return bool(AllowedOrders((route,)).orders(decision, tied))
