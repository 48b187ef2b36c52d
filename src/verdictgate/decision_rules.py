"""Decision rules: how a trial's framework spans become its decision.

| rule            | decision                                                        | when none |
|-----------------|-----------------------------------------------------------------|-----------|
| `tools`         | the tool names called, in the order their spans started          | `no_tool_selected` |
| `toolset`       | the same names sorted (parallel calls have no reliable order)    | `no_tool_selected` |
| `agents`        | the agents handed to after the entry agent, in order             | `no_handoff` |
| `nodes`         | LangGraph's nodes as they started (internal `__x__` nodes left out) | `no_node` |
| `attribute:KEY` | the label KEY holds on the trial's span or the first below it    | `no_verdict` |

Spans are taken in the order they started. Timestamps are often whole milliseconds (the
OpenTelemetry JS SDK stamps spans from `Date.now()`), so two tools called in turn can start in
the same instant; those ties are broken canonically, an enclosing span before the spans inside
it and then by name, never by span id (random), so the same tools in tied positions compare
equal on every rerun. A derived path whose order rests on such a tie carries the tied ranges
(`Derived.tied_steps`): a rerun pair compares those steps unordered, and the report counts the
trials.

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
from .trial_model import MAX_PATH_STEPS, NO_TOOL_SELECTED, Decision, NoDecision, TiedSteps

PATH_OVER_LIMIT = "path_over_limit"
"""The error of a trial whose spans make a path of more than MAX_PATH_STEPS steps: no
decision of a finite, reviewed set is that long, and holding it would cost every report."""
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
    tied_steps: TiedSteps = ()
    """The ranges [start, end) of steps of its path whose spans started in the same instant, at
    the same depth, under different names: their order there is canonical, not observed."""

    @property
    def order_ambiguous(self) -> bool:
        return bool(self.tied_steps)


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
        if self.key is not None and carries_content(self.key):
            raise VerdictgateError(content_refused(self.key), arguments=("decision",))

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
        spans, instants = canonical_order(facts)
        if not spans:  # not even the agent's own span: the framework is not instrumented
            return Derived(None, NO_SPANS)
        failed = next((f.error for f in spans if f.error is not None and f.parent_id == root), None)
        if failed is not None:
            return Derived(None, failed)
        if self.name in ("tools", "agents", "nodes"):
            path = self._path(spans, instants)
            if len(path) > MAX_PATH_STEPS:  # not a decision a reviewed set holds
                return Derived(None, PATH_OVER_LIMIT)
            if path:
                names = tuple(name for name, _ in path)
                return Derived(names, tied_steps=tied_ranges(path))
            return Derived(EMPTY_PATH[self.name])
        if self.name == "toolset":
            tools = sorted(fact.tool for fact in spans if fact.tool is not None)
            if len(tools) > MAX_PATH_STEPS:
                return Derived(None, PATH_OVER_LIMIT)
            return Derived(tuple(tools) if tools else NO_TOOL_SELECTED)
        return Derived(
            next(
                (value for fact in spans for key, value in fact.values if key == self.key),
                NoDecision("no_verdict"),
            )
        )

    def _path(self, spans: list[SpanFacts], instants: dict[str, Instant]) -> list[Step]:
        """The ordered path the rule reads, each step with the instant its span started."""
        if self.name == "tools":
            return [(f.tool, instants[f.span_id]) for f in spans if f.tool is not None]
        if self.name == "agents":
            steps = [(f.agent, instants[f.span_id]) for f in spans if f.agent is not None]
            return _collapsed(steps)[1:]  # the entry agent is where the route starts
        return _graph_nodes(spans, instants)


def content_refused(key: str) -> str:
    """Why `attribute:KEY` on a content attribute is refused, and what to use instead."""
    return (
        f"{key} carries prompt or response content, which is never a decision; use a rule "
        "that reads names (`tools`, `toolset`, `agents` or `nodes`), or have the agent record "
        "its route as a label (`verdictgate.decision(point).record(route)`, or an attribute of "
        "its own such as `attribute:app.route`)"
    )


Instant = tuple[int, int]
"""When a span started, and how deep it lies: spans that share both are in no observed order."""
Step = tuple[str, Instant]
EMPTY_PATH = {
    "tools": NO_TOOL_SELECTED,
    "agents": NoDecision("no_handoff"),
    "nodes": NoDecision("no_node"),
}


def tied_ranges(path: list[Step]) -> TiedSteps:
    """The ranges [start, end) of consecutive steps that share an instant and are not all the
    same name (the same tool twice has one order)."""
    ranges = []
    start = 0
    for end in range(1, len(path) + 1):
        if end == len(path) or path[end][1] != path[start][1]:
            if end - start > 1 and len({name for name, _ in path[start:end]}) > 1:
                ranges.append((start, end))
            start = end
    return tuple(ranges)


def canonical_order(facts: Iterable[SpanFacts]) -> tuple[list[SpanFacts], dict[str, Instant]]:
    """Spans in the order they started; spans that started in the same instant with an
    enclosing span before the spans inside it, then by tool, agent and node name (span ids are
    random: ordering by them would make a stable path flip). With each span's instant."""
    facts = list(facts)
    parents = {fact.span_id: fact.parent_id for fact in facts}
    depths: dict[str, int] = {}

    def depth(span_id: str) -> int:
        """Spans above it in `facts` (walked up without recursion; a cycle stops the walk)."""
        chain: list[str] = []
        current: str | None = span_id
        while current in parents and current not in depths and len(chain) <= len(parents):
            chain.append(current)
            current = parents[current]
        level = depths.get(current, -1) if current is not None else -1
        for member in reversed(chain):
            level += 1
            depths[member] = level
        return depths[span_id]

    instants = {f.span_id: (f.start_ns, depth(f.span_id)) for f in facts}
    ordered = sorted(
        facts,
        key=lambda f: (*instants[f.span_id], f.tool or "", f.agent or "", f.node or "", f.span_id),
    )
    return ordered, instants


def _collapsed(steps: Iterable[Step]) -> list[Step]:
    """Steps with runs of the same name folded into the first (an agent's own nested spans)."""
    folded: list[Step] = []
    for step in steps:
        if not folded or folded[-1][0] != step[0]:
            folded.append(step)
    return folded


def _graph_nodes(spans: list[SpanFacts], instants: dict[str, Instant]) -> list[Step]:
    """Each (step, node) LangGraph ran, once, in the order it started (steps restart inside a
    subgraph, so they only tell the spans of one node run from the next); the spans inside a
    node carry its name too, and LangGraph's own `__start__`-style nodes are no route."""
    seen: dict[tuple[int | None, str], Instant] = {}
    for fact in spans:  # in start order
        if fact.node is not None and not fact.node.startswith("__"):
            seen.setdefault((fact.step, fact.node), instants[fact.span_id])
    return [(node, instant) for (_, node), instant in seen.items()]
