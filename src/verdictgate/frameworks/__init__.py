"""Agents built on agent frameworks, ready for `verdictgate.run`: fresh state per trial, the
isolation declared as it is, and each decision read from the framework's own spans.

    from verdictgate.frameworks import from_strands, from_langgraph, from_openai_agents

Each needs its extra: `verdictgate[strands]`, `verdictgate[langgraph]`,
`verdictgate[openai-agents]`.
"""

from .langgraph import from_langgraph
from .openai_agents import from_openai_agents
from .strands import from_strands
from .verdicts import read_verdict

__all__ = ["from_langgraph", "from_openai_agents", "from_strands", "read_verdict"]
