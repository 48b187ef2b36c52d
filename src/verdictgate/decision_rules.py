"""Decision rules: how a trial's framework spans become its decision.

| rule            | decision                                                        | when none |
|-----------------|-----------------------------------------------------------------|-----------|
| `tools`         | the tool names called, in the order their spans started          | `no_tool_selected` |
| `toolset`       | the same names sorted (parallel calls have no reliable order)    | `no_tool_selected` |
| `agents`        | the agents handed to after the entry agent, in order             | `no_handoff` |
| `nodes`         | LangGraph's nodes as they started (internal `__x__` nodes left out) | `no_node` |
| `attribute:KEY` | the label KEY holds on the trial's span or the first below it    | `no_verdict` |

A trial whose spans give no decision is a no-decision, never an error; a trial whose
framework call ended in error (a top span, right below the trial's, with status ERROR) is an
error trial of that span's error type, and one that no framework span reached at all is an
error trial `no_spans`. Rules read names only
(`span_facts`), never content.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import VerdictgateError
from .span_facts import SpanFacts, carries_content
from .trial_model import NO_TOOL_SELECTED, Decision, NoDecision

NO_SPANS = "no_spans"
"""The error of a trial that no framework span reached: its telemetry is missing, which says
nothing about the agent's decision."""
RULES = ("tools", "toolset", "agents", "nodes", "attribute:KEY")
ATTRIBUTE = "attribute:"


@dataclass(frozen=True)
class Derived:
    """A trial's decision as the rule derived it, or the error type that made it an error."""

    decision: Decision | None
    error_type: str | None = None


@dataclass(frozen=True)
class DecisionRule:
    """A named rule (`tools`, `toolset`, `agents`, `nodes`) or `attribute:KEY`."""

    name: str
    key: str | None = None

    def __post_init__(self) -> None:
        if (self.name == "attribute") != (self.key is not None) or (
            self.name != "attribute" and self.name not in RULES
        ):
            raise ValueError(f"not a decision rule: {self.name!r} (use DecisionRule.parse)")

    @classmethod
    def parse(cls, text: str) -> DecisionRule:
        """The rule a name stands for; VerdictgateError (about `decision`) for anything else."""
        text = text.strip()
        if text.startswith(ATTRIBUTE):
            key = text[len(ATTRIBUTE) :].strip()
            if not key:
                raise VerdictgateError(
                    "`attribute:` needs an attribute name", arguments=("decision",)
                )
            if carries_content(key):
                raise VerdictgateError(
                    f"{key} carries input or output text; a decision is read from names only",
                    arguments=("decision",),
                )
            return cls("attribute", key)
        if text not in RULES:
            raise VerdictgateError(
                f"unknown decision rule {text!r}; one of {', '.join(RULES)}",
                arguments=("decision",),
            )
        return cls(text)

    def __str__(self) -> str:
        return f"{ATTRIBUTE}{self.key}" if self.key is not None else self.name

    @property
    def keeps(self) -> tuple[str, ...]:
        """Attributes the rule reads beyond the names every span's facts hold."""
        return (self.key,) if self.key is not None else ()

    def derive(self, facts: Iterable[SpanFacts], root: str) -> Derived:
        """The decision the spans below span `root` (the trial's) make under this rule. An
        error counts only on a top span, right below `root`: one the agent recovered from
        deeper down (a failed tool whose error went back to the model) is part of its route."""
        spans = sorted(facts, key=lambda fact: (fact.start_ns, fact.span_id))
        if not spans:  # not even the agent's own span: the framework is not instrumented
            return Derived(None, NO_SPANS)
        failed = next((f.error for f in spans if f.error is not None and f.parent_id == root), None)
        if failed is not None:
            return Derived(None, failed)
        return Derived(self._decide(spans))

    def _decide(self, spans: list[SpanFacts]) -> Decision:
        if self.name in ("tools", "toolset"):
            tools = [fact.tool for fact in spans if fact.tool is not None]
            if not tools:
                return NO_TOOL_SELECTED
            return tuple(sorted(tools) if self.name == "toolset" else tools)
        if self.name == "agents":
            route = _collapsed(fact.agent for fact in spans if fact.agent is not None)[1:]
            return tuple(route) if route else NoDecision("no_handoff")
        if self.name == "nodes":
            nodes = _graph_nodes(spans)
            return tuple(nodes) if nodes else NoDecision("no_node")
        return next(
            (value for fact in spans for key, value in fact.values if key == self.key),
            NoDecision("no_verdict"),
        )


def _collapsed(names: Iterable[str]) -> list[str]:
    """Names with runs of the same one folded (an agent's own nested spans)."""
    folded: list[str] = []
    for name in names:
        if not folded or folded[-1] != name:
            folded.append(name)
    return folded


def _graph_nodes(spans: list[SpanFacts]) -> list[str]:
    """Each (step, node) LangGraph ran, once, in the order it started (steps restart inside a
    subgraph, so they only tell the spans of one node run from the next); the spans inside a
    node carry its name too, and LangGraph's own `__start__`-style nodes are no route."""
    seen: dict[tuple[int | None, str], None] = {}
    for fact in spans:  # in start order
        if fact.node is not None and not fact.node.startswith("__"):
            seen.setdefault((fact.step, fact.node), None)
    return [node for _, node in seen]
