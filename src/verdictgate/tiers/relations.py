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


def as_relation(relation: Relation | str) -> Relation:
    """A Relation, or a built-in by name."""
    if isinstance(relation, Relation):
        return relation
    if relation not in BUILT_IN:
        raise ValueError(f"unknown relation {relation!r}; built in: {', '.join(BUILT_IN)}")
    return BUILT_IN[relation]
