"""The OpenTelemetry path: names, span encoding, instrumentation, the span processor and the publisher."""
