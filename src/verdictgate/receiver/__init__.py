"""`verdictgate serve`: OTLP decoding, ingest, the durable store, the gRPC and HTTP servers,
and publishing admissions.

Internal: the public API is what `verdictgate` exports. Its modules may be imported (the tests
do), but they can change between releases.
"""
