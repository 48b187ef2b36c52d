"""A gated test's properties, as its report carries them (read by the terminal summary without
loading the rest of verdictgate)."""

from __future__ import annotations

from collections.abc import Sequence

PROPERTY_PREFIX = "verdictgate."
"""The JUnit XML properties of a gated test: `verdictgate.status`, `.exit_code`, `.run`,
`.headline`, `.reasons` (codes, comma-separated), `.trials`."""


def summary_line(nodeid: str, properties: Sequence[tuple[str, object]]) -> str | None:
    """The terminal summary's line for a gated test (None for a test that was not gated)."""
    found = {
        str(k)[len(PROPERTY_PREFIX) :]: str(v)
        for k, v in properties
        if str(k).startswith(PROPERTY_PREFIX)
    }
    if "status" not in found:
        return None
    return f"{found['status']:<12} {nodeid}: {found.get('headline', '')}"
