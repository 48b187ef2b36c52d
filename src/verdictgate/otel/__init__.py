"""The OpenTelemetry path: names, span encoding, instrumentation, the span processor and the
publisher.

Internal: the public API is what `verdictgate` exports. Its modules may be imported (the tests
do), but they can change between releases.
"""
