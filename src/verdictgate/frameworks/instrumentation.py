"""Instrumenting a framework with OpenInference, once, against the global tracer provider."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace


def instrument_once(instrumentor: Any) -> None:
    """Instrument with `instrumentor` against the global provider (where verdictgate's capture
    sees the spans) unless something already did; an instrumentation of yours is kept."""
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument(tracer_provider=trace.get_tracer_provider())
