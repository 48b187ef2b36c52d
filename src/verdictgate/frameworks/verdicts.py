"""Reading a decision out of a framework's structured output (`verdict_key=`)."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import MissingVerdict


def read_verdict(output: object, key: str) -> object:
    """`output[key]` of a mapping, or the attribute `key` of an object (a pydantic model, a
    dataclass); MissingVerdict when there is none."""
    if isinstance(output, Mapping):
        if key in output:
            return output[key]
    elif output is not None and hasattr(output, key):
        return getattr(output, key)
    raise MissingVerdict(f"the structured output has no {key!r}")
