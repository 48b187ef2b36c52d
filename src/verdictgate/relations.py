"""Metamorphic relations: transformations of an input that must not change the decision."""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass

_PUNCTUATION = str.maketrans("", "", string.punctuation)


@dataclass(frozen=True)
class Relation:
    """A named input transformation under which a case must keep its decision."""

    name: str
    transform: Callable[[str], str]


BUILT_IN: dict[str, Relation] = {
    "whitespace": Relation("whitespace", lambda text: re.sub(r"\s+", " ", text).strip()),
    "case": Relation("case", str.lower),
    "punctuation": Relation("punctuation", lambda text: text.translate(_PUNCTUATION)),
}
"""Normalisations: whitespace collapsed, letters lowered, punctuation removed."""


@dataclass(frozen=True)
class RelationResult:
    """Per relation, the routes whose cases kept (held) or changed (violated) their decision,
    and those where the check could not be made (errored): the transform or the agent raised,
    or the case's first answer was an error. Each route is in at most one list: violated wins,
    then errored; a route is held only when every case checked on it held.

    A relation that changed no input was not exercised: it proves nothing, so it never counts
    as held. An errored check is a fault, not a verdict: it is neither violated nor vacuous.
    """

    name: str
    violated: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    errored: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """`violated`, `errored`, `held` or `not_exercised`, in that order of precedence."""
        if self.violated:
            return "violated"
        if self.errored:
            return "errored"
        return "held" if self.held else "not_exercised"


def as_relation(relation: Relation | str) -> Relation:
    """A Relation, or a built-in by name."""
    if isinstance(relation, Relation):
        return relation
    if relation not in BUILT_IN:
        raise ValueError(f"unknown relation {relation!r}; built in: {', '.join(BUILT_IN)}")
    return BUILT_IN[relation]


def encode_routes(result: RelationResult, routes: tuple[str, ...]) -> list[str]:
    """`name=route` strings, as the run span carries them."""
    return [f"{result.name}={route}" for route in routes]


def decode_results(
    requested: tuple[str, ...],
    violated: tuple[str, ...],
    held: tuple[str, ...],
    errored: tuple[str, ...] = (),
) -> tuple[RelationResult, ...]:
    """The results a run span declares (`name=route` pairs grouped by relation name)."""

    def routes(pairs: tuple[str, ...], name: str) -> tuple[str, ...]:
        return tuple(sorted(p.partition("=")[2] for p in pairs if p.partition("=")[0] == name))

    return tuple(
        RelationResult(n, routes(violated, n), routes(held, n), routes(errored, n))
        for n in requested
    )
