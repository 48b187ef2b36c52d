"""Agents built on agent frameworks, ready for `verdictgate.run`: fresh state per trial, the
isolation declared as it is, and each decision read from the framework's own spans.

Internal: use `verdictgate.from_strands`, `verdictgate.from_langgraph` and
`verdictgate.from_openai_agents`. Each needs its extra (`pip install -e '.[strands]'`,
`'.[langgraph]'`, `'.[openai-agents]'` in a checkout).

The names this package exported before they moved to `verdictgate` (`MOVED`) are still found
here for one release, each with a DeprecationWarning that names its new place.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .langgraph import from_langgraph as from_langgraph
    from .openai_agents import from_openai_agents as from_openai_agents
    from .strands import from_strands as from_strands
    from .verdicts import read_verdict as read_verdict

MOVED = ("from_langgraph", "from_openai_agents", "from_strands", "read_verdict")
"""What `from verdictgate.frameworks import NAME` gave until 0.1.0: now `verdictgate.NAME`."""


def __getattr__(name: str) -> object:
    """A name that moved to `verdictgate`, with a DeprecationWarning saying so (once: the name
    is kept here after)."""
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"verdictgate.frameworks.{name} is now verdictgate.{name} (`from verdictgate import "
        f"{name}`); the old name goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    import verdictgate

    moved: object = getattr(verdictgate, name)
    globals()[name] = moved
    return moved
