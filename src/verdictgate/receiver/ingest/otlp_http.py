"""OTLP/HTTP ingest: `POST /v1/traces` on the receiver's HTTP port.

An export is checked in the order that costs a hostile sender the most and the receiver the
least: path, token, content type and encoding, framing; then it is admitted (a slot and its
declared bytes, fairly per client); only then is its body read, decompressed and decoded, its
bytes reserved as they arrive (chunks) or inflate (gzip), held to the same fair share. A
request refused before its body is read is answered at once and its connection closed.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from google.rpc import code_pb2

from ...otel.otlp_reading import MalformedRequest
from ..http import HttpError
from ..transport.http_exchange import HttpExchange
from .decoding import JSON
from .exports import PROTOBUF, Ingest

TRACES_PATH = "/v1/traces"

_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 256 << 10
"""Decompressed bytes produced (and reserved) at a time."""


def export_traces(http: HttpExchange, ingest: Ingest) -> None:
    """Answer a POST: an export to `/v1/traces`, in protobuf or JSON, gzipped or not; 404 for
        any other path (its query string included), 401 without the right token (429 past a host's
    wrong tokens), 415 for another
        content type or encoding. Whatever ingest raises is answered by `http.fail`."""
    content_type = http.content_type()
    http.reply_type = JSON if content_type == JSON else PROTOBUF
    if http.path != TRACES_PATH:
        return http.answer_status(404, code_pb2.NOT_FOUND, "only /v1/traces", http.reply_type)
    if http.token_refused(http.reply_type):
        return None
    if content_type not in (PROTOBUF, JSON):
        return http.answer_status(
            415,
            code_pb2.INVALID_ARGUMENT,
            "use application/x-protobuf or application/json",
            http.reply_type,
        )
    gzipped = _gzipped(http.headers.get_all("Content-Encoding") or [])
    if gzipped is None:
        return http.answer_status(
            415,
            code_pb2.INVALID_ARGUMENT,
            "unsupported Content-Encoding: use gzip or identity",
            http.reply_type,
            {"Accept-Encoding": "gzip, identity"},
        )
    limit = ingest.limits.max_request_bytes
    length = http.request_length(limit)
    with ingest.admit(http.client(), length or 0) as ticket:
        body = http.read_body(limit, ticket.reserve)
        if gzipped:
            body = _gunzip(body, limit, ticket.reserve)
        response = ingest.export(body, content_type, ticket=ticket)
    if http.reply_type == JSON:
        from google.protobuf.json_format import MessageToJson

        http.answer(200, MessageToJson(response).encode(), JSON)
    else:
        http.answer(200, response.SerializeToString(), PROTOBUF)


def _gzipped(values: list[str]) -> bool | None:
    """Whether the Content-Encoding header(s) say gzip; None for any coding but gzip and
    identity (and for gzip applied twice)."""
    codings = [c.strip().lower() for value in values for c in value.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return False
    return True if codings in (["gzip"], ["x-gzip"]) else None


def _gunzip(body: bytes, limit: int, reserve: Callable[[int], None]) -> bytes:
    """Decompress a gzip body: every member of a concatenation, each with its CRC and length
    checked, nothing after the last; never more than `limit` bytes out (a gzip bomb stops
    there), inflated 256 KiB at a time, each piece `reserve`d before it is kept."""
    if not body:
        raise MalformedRequest("invalid gzip body: empty")
    out = bytearray()
    rest = body
    while rest:
        if rest[:2] != _GZIP_MAGIC:
            raise MalformedRequest("invalid gzip body: data after the last member")
        inflater = zlib.decompressobj(wbits=31)
        pending = rest
        while not inflater.eof:
            try:
                piece = inflater.decompress(pending, min(_INFLATE_STEP, limit - len(out) + 1))
            except zlib.error as error:
                raise MalformedRequest(f"invalid gzip body: {error}") from None
            if len(out) + len(piece) > limit:
                raise HttpError(413, "request too large after decompression")
            reserve(len(piece))
            out += piece
            pending = inflater.unconsumed_tail
            if not piece and not pending:
                break
        if not inflater.eof:
            raise MalformedRequest("invalid gzip body: truncated (no CRC and length trailer)")
        rest = inflater.unused_data
    return bytes(out)
