"""Agents built on agent frameworks, ready for `verdictgate.run`: fresh state per trial, the
isolation declared as it is, and each decision read from the framework's own spans.

Internal: use `verdictgate.from_strands`, `verdictgate.from_langgraph` and
`verdictgate.from_openai_agents`. Each needs its extra (`pip install -e '.[strands]'`,
`'.[langgraph]'`, `'.[openai-agents]'` in a checkout).
"""
