"""`verdictgate serve`: OTLP decoding, ingest, the durable store, the gRPC and HTTP servers, and publishing admissions."""
