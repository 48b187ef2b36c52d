"""Instrumenting a framework with OpenInference, once, against the global tracer provider."""

from __future__ import annotations

from typing import Protocol

from opentelemetry import trace


class Instrumentor(Protocol):
    """An instrumentor, as far as it is used here: opentelemetry-instrumentation's
    `BaseInstrumentor`, untyped for a type checker (its module opts out of type checking)."""

    @property
    def is_instrumented_by_opentelemetry(self) -> bool: ...

    def instrument(self, *, tracer_provider: trace.TracerProvider) -> object: ...


def instrument_once(instrumentor: Instrumentor) -> None:
    """Instrument with `instrumentor` against the global provider (where verdictgate's capture
    sees the spans) unless something already did; an instrumentation of yours is kept."""
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument(tracer_provider=trace.get_tracer_provider())
