"""One export request's path, shared by both transports: admit it (`fair_gate`), decode it,
commit it, answer it (OTLP partial success).

What a sender may cost is `limits.Limits`; what it gets for each refusal, `failures`.
"""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from ...otel.otlp_reading import ExportContents
from ..core import Receiver
from ..limits import Limits
from .decoding import Decoder
from .fair_gate import ANONYMOUS, Client, Gate, Ticket

TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
PROTOBUF = "application/x-protobuf"


def partial_success(extract: ExportContents) -> ExportTraceServiceResponse:
    """The answer to an export: the spans it rejected and why, if any."""
    if not extract.rejected:
        return ExportTraceServiceResponse()
    return ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(
            rejected_spans=extract.rejected, error_message="; ".join(extract.errors)
        )
    )


class Ingest:
    """Shared by both transports: admit, decode, commit, answer."""

    def __init__(self, receiver: Receiver, limits: Limits) -> None:
        self.receiver = receiver
        self.limits = limits
        self.gate = Gate(
            limits.max_in_flight,
            max(limits.max_bytes_in_flight, limits.max_request_bytes),
            limits.max_request_bytes,
        )
        self.decoder = Decoder(limits.decoders)

    def admit(self, client: Client, size: int) -> Ticket:
        """Admit one request of `size` bytes from `client` before its body is read (raises
        Busy); pass the ticket to `export`."""
        return self.gate.admit(client, size)

    def export(
        self,
        body: bytes,
        content_type: str,
        client: Client = ANONYMOUS,
        ticket: Ticket | None = None,
    ) -> ExportTraceServiceResponse:
        """Decode and commit one export request from `client`.

        The request is admitted here unless the caller admitted it already and passes its
        `ticket` (HTTP does, before reading the body; the ticket names the client); the caller
        then releases it. Raises MalformedRequest (client error), Busy, DecoderUnavailable or
        a store error (the last three retryable).
        """
        if ticket is not None:
            return self._export(body, content_type)
        with self.gate.admit(client, len(body)):
            return self._export(body, content_type)

    def _export(self, body: bytes, content_type: str) -> ExportTraceServiceResponse:
        extract = self.decoder.decode(body, content_type)
        self.receiver.ingest(extract)
        return partial_success(extract)
