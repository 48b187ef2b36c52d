"""One export request's path, shared by both transports: admission control, decode, commit, answer."""

from __future__ import annotations

import hmac
import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from .decoding import Decoder
from .otlp import Extract
from .receiver import Receiver

TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class Limits:
    """What one request may cost: bytes after decompression, and requests in flight at once."""

    max_request_bytes: int = 16 << 20
    max_in_flight: int = 16
    retry_after_seconds: int = 1
    decoders: int = 0
    """Worker processes that decode request bodies (0: decode in the serving threads)."""
    max_watchers: int = 64
    """`status --wait` streams open at once; each holds a thread of its own, beside the ones
    exports use, so watchers never starve ingest."""


class Busy(Exception):
    """Too many requests in flight: the client should retry later."""


class Gate:
    """Admits at most `limit` requests at once; the rest are told to retry (backpressure)."""

    def __init__(self, limit: int) -> None:
        self._slots = threading.BoundedSemaphore(limit)

    def __enter__(self) -> None:
        if not self._slots.acquire(blocking=False):
            raise Busy()

    def __exit__(self, *exc: Any) -> None:
        self._slots.release()


def authorized(header: str | None, token: str | None) -> bool:
    if token is None:
        return True
    expected = f"Bearer {token}".encode()
    return header is not None and hmac.compare_digest(header.encode(), expected)


def partial_success(extract: Extract) -> ExportTraceServiceResponse:
    if not extract.rejected:
        return ExportTraceServiceResponse()
    return ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(
            rejected_spans=extract.rejected, error_message="; ".join(extract.errors)
        )
    )


class Ingest:
    """Shared by both transports: decode, commit, answer."""

    def __init__(self, receiver: Receiver, limits: Limits) -> None:
        self.receiver = receiver
        self.limits = limits
        self.gate = Gate(limits.max_in_flight)
        self.decoder = Decoder(limits.decoders)

    def export(self, body: bytes, content_type: str) -> ExportTraceServiceResponse:
        """Raises MalformedRequest (client error), Busy, DecoderUnavailable or sqlite3.Error
        (the last three retryable)."""
        with self.gate:
            extract = self.decoder.decode(body, content_type)
            self.receiver.ingest(extract)
        return partial_success(extract)
