"""CrewAI: its spans placed below the trial, and a new crew per trial decided by its tools.

CrewAI (1.15) records each crew on a tracer provider of its own, in a trace session, and starts
the crew's trace from an empty context: its spans never sit below the span around the call. A
session's root span is what its first span's parent falls back to; a session bound with the
current span as its root (`TraceSession.activate`, crewAI's own way for a host to own a run's
trace) records every span of the crews kicked off inside below that span, in its trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from uuid import uuid4

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor

from ..assessment import Isolation
from ..decision_rules import DecisionRule
from ..otel.trial_capture import attach_capture
from ..runner.agent import Agent


@contextmanager
def crewai_below_current_span(*processors: SpanProcessor) -> Iterator[None]:
    """Inside, the crews kicked off record below the current span (a trial's), on a trace
    session of crewAI's own whose tracer provider has `processors` (an exporter's, to send
    its spans on) and verdictgate's capture (for a rule in this process). The session is shut
    down on leaving, its spans flushed and `processors` shut down with it: give each block its
    own."""
    from crewai.telemetry.tracing import TraceSession

    session = TraceSession(str(uuid4()), processors=processors, automation_name="verdictgate")
    attach_capture(session.tracer_provider)
    try:
        with session.activate() as context:
            context.root_span = trace.get_current_span()
            yield
    finally:
        session.shutdown()


def from_crewai(
    factory: Callable[[], Any],
    *,
    inputs_of: Callable[[str], Mapping[str, object]] = lambda text: {"input": text},
    decision: str = "tools",
) -> Agent:
    """An agent for `run` that builds a crew with `factory()` for every trial (fresh-instance)
    and kicks it off with `inputs_of(case input)`, its spans below the trial's
    (`crewai_below_current_span`). The decision is read from them under rule `decision`, by
    default the tools its agents called, in order (crewAI names its agents by a key, not their
    role: `agents` reads those keys)."""
    rule = DecisionRule.parse(decision)
    attach_capture()

    def instance() -> Callable[[str], object]:
        crew = factory()

        def call(text: str) -> object:
            with crewai_below_current_span():
                return str(crew.kickoff(inputs=dict(inputs_of(text))))

        return call

    return Agent(instance(), Isolation.FRESH_INSTANCE, instance, decision=rule)
