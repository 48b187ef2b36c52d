"""Capturing, in this process, the framework spans below a trial's decision span.

While a trial runs under a decision rule, its `decide {point}` span is current, so the spans an
agent framework starts inside the call (Strands, LangGraph through OpenInference, the OpenAI
Agents SDK) descend from it. A span processor on each tracer provider involved notes which
spans descend from an open trial and keeps, when they end, their name facts only
(`span_facts`); when the call returns, the rule derives the trial's decision from them.

The processor's work on the caller's thread is one dictionary look-up per span started and, for
a span of an open trial, reading a few attributes when it ends. A span that ends after its
trial closed is not kept, and a closed trial leaves nothing behind.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode

from ..decision_rules import DecisionRule, Derived
from ..errors import PlanError
from ..span_facts import SpanFacts, facts_of


class OpenTrial:
    """The spans of one trial seen so far, below its decision span `span`."""

    def __init__(self, rule: DecisionRule, span: trace.Span) -> None:
        self.rule = rule
        self.span = span
        self.root = span.get_span_context().span_id
        self.members = [self.root]
        self.facts: list[SpanFacts] = []
        self.open = True

    def derive(self) -> Derived:
        """The decision the spans seen so far make under the trial's rule. An `attribute:KEY`
        rule also reads KEY on the decision span itself (an agent that records its verdict on
        the current span)."""
        facts = self.facts
        attributes = getattr(self.span, "attributes", None)
        if self.rule.keeps and attributes:
            own = facts_of(format(self.root, "016x"), None, 0, attributes, False, self.rule.keeps)
            facts = [own, *facts] if own.values else facts
        return self.rule.derive(facts, format(self.root, "016x"))


_OPEN: dict[int, OpenTrial] = {}
"""Span id -> the open trial it belongs to (its decision span and every span below it)."""
_OPEN_LOCK = threading.Lock()


class FrameworkSpanCapture(SpanProcessor):
    """Keeps the name facts of spans that descend from an open trial (one per provider)."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        parent = span.parent
        if parent is None:
            return
        trial = _OPEN.get(parent.span_id)
        if trial is not None and trial.open:
            span_id = span.context.span_id
            with _OPEN_LOCK:
                if trial.open:
                    _OPEN[span_id] = trial
                    trial.members.append(span_id)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        trial = _OPEN.get(context.span_id) if context is not None else None
        if trial is None or not trial.open or context is None:
            return
        parent = span.parent
        trial.facts.append(
            facts_of(
                format(context.span_id, "016x"),
                format(parent.span_id, "016x") if parent is not None else None,
                span.start_time or 0,
                span.attributes or {},
                span.status.status_code is StatusCode.ERROR,
                trial.rule.keeps,
            )
        )

    def shutdown(self) -> None:
        """Nothing to release: open trials are closed by their owners."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered: facts are kept as spans end."""
        return True


_CAPTURE = FrameworkSpanCapture()
_ATTACHED: weakref.WeakSet[TracerProvider] = weakref.WeakSet()
_ATTACH_LOCK = threading.Lock()


def attach_capture(*providers: trace.TracerProvider | None) -> None:
    """Let trials see the framework spans of the global tracer provider and of `providers`.

    Frameworks record through the global provider (Strands) or one they are given
    (OpenInference's `instrument(tracer_provider=...)`). With no SDK provider set globally, one
    is installed, holding only the capture (add exporters to it to export framework spans).
    A global provider that is not the SDK's cannot be watched: PlanError, since every trial
    would otherwise look as if its agent called nothing.
    """
    with _ATTACH_LOCK:
        current = trace.get_tracer_provider()
        if isinstance(current, trace.ProxyTracerProvider):
            trace.set_tracer_provider(TracerProvider())
            current = trace.get_tracer_provider()
        if not isinstance(current, TracerProvider):
            raise PlanError(
                "a decision rule reads the agent framework's spans, which needs the "
                f"OpenTelemetry SDK's TracerProvider as the global provider, not "
                f"{type(current).__name__}",
                arguments=("decision",),
            )
        for provider in (current, *providers):
            if isinstance(provider, TracerProvider) and provider not in _ATTACHED:
                provider.add_span_processor(_CAPTURE)
                _ATTACHED.add(provider)


@contextmanager
def capturing(span: trace.Span, rule: DecisionRule) -> Iterator[OpenTrial]:
    """Collect the facts of the spans below `span` (a trial's decision span) while inside."""
    trial = OpenTrial(rule, span)
    _OPEN[trial.root] = trial
    try:
        yield trial
    finally:
        with _OPEN_LOCK:
            trial.open = False
            for member in trial.members:
                _OPEN.pop(member, None)
