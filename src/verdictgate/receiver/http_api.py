"""The HTTP side of `verdictgate serve`: OTLP/HTTP `/v1/traces` and the `/v1/runs` JSON mirror."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import zlib
from http.server import BaseHTTPRequestHandler
from typing import Any

from google.rpc import code_pb2, status_pb2

from ..reports.json_report import report_document
from .decoding import JSON
from .ingest import PROTOBUF, Busy, Ingest, authorized
from .otlp import MalformedRequest

logger = logging.getLogger(__name__)


def _inflate(body: bytes, limit: int) -> bytes:
    """Decompress gzip without ever holding more than `limit` bytes (a gzip bomb stops here)."""
    inflater = zlib.decompressobj(wbits=31)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as error:
        raise MalformedRequest(f"invalid gzip body: {error}") from None
    if len(data) > limit:
        raise _TooLarge()
    return data


class _TooLarge(Exception):
    pass


_RUN_PATH = re.compile(r"^/v1/runs/([^/?]+)$")


class OtlpHttpHandler(BaseHTTPRequestHandler):
    """OTLP/HTTP `POST /v1/traces` and the JSON query API (`/v1/runs`, `/v1/runs/{id}`); a bound
    subclass (`http_handler`) supplies the ingest path and the token."""

    ingest: Ingest
    token: str | None = None
    protocol_version = "HTTP/1.1"
    server_version = "verdictgate"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("http: " + format, *args)

    def _send(self, code: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _status(
        self, code: int, grpc_code: int, message: str, content_type: str, headers=None
    ) -> None:
        status = status_pb2.Status(code=grpc_code, message=message)
        if content_type == JSON:
            body = json.dumps({"code": grpc_code, "message": message}).encode()
        else:
            body, content_type = status.SerializeToString(), PROTOBUF
        self._send(code, body, content_type, headers)

    def authorized(self) -> bool:
        return authorized(self.headers.get("Authorization"), self.token)

    def do_POST(self) -> None:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        reply_type = JSON if content_type == JSON else PROTOBUF
        length = self.headers.get("Content-Length")
        if self.path != "/v1/traces":
            self._discard(length)
            return self._status(404, code_pb2.NOT_FOUND, "only /v1/traces", reply_type)
        if not self.authorized():
            self._discard(length)
            return self._status(
                401, code_pb2.UNAUTHENTICATED, "a bearer token is required", reply_type
            )
        if content_type not in (PROTOBUF, JSON):
            self._discard(length)
            return self._status(
                415,
                code_pb2.INVALID_ARGUMENT,
                "use application/x-protobuf or application/json",
                reply_type,
            )
        if length is None or not length.isdigit():
            self.close_connection = True
            return self._status(
                411, code_pb2.INVALID_ARGUMENT, "Content-Length is required", reply_type
            )
        if int(length) > self.ingest.limits.max_request_bytes:
            self.close_connection = True
            return self._status(413, code_pb2.RESOURCE_EXHAUSTED, "request too large", reply_type)
        body = self.rfile.read(int(length))
        try:
            if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                body = _inflate(body, self.ingest.limits.max_request_bytes)
            response = self.ingest.export(body, content_type)
        except _TooLarge:
            return self._status(
                413,
                code_pb2.RESOURCE_EXHAUSTED,
                "request too large after decompression",
                reply_type,
            )
        except MalformedRequest as error:
            return self._status(400, code_pb2.INVALID_ARGUMENT, str(error), reply_type)
        except Busy:
            return self._status(
                429,
                code_pb2.RESOURCE_EXHAUSTED,
                "receiver busy, retry later",
                reply_type,
                {"Retry-After": str(self.ingest.limits.retry_after_seconds)},
            )
        except sqlite3.Error:
            return self._status(
                503,
                code_pb2.UNAVAILABLE,
                "store unavailable, retry later",
                reply_type,
                {"Retry-After": str(self.ingest.limits.retry_after_seconds)},
            )
        if reply_type == JSON:
            from google.protobuf.json_format import MessageToJson

            self._send(200, MessageToJson(response).encode(), JSON)
        else:
            self._send(200, response.SerializeToString(), PROTOBUF)

    def _discard(self, length: str | None) -> None:
        if length and length.isdigit() and int(length) <= self.ingest.limits.max_request_bytes:
            self.rfile.read(int(length))
        else:
            self.close_connection = True

    def do_GET(self) -> None:
        if not self.authorized():
            return self._status(401, code_pb2.UNAUTHENTICATED, "a bearer token is required", JSON)
        if self.path == "/v1/runs":
            runs = [
                {"run_id": r.run_id, "suite": r.suite, "point": r.point, "status": r.status,
                 "final": r.final, "trials_received": r.received, "trials_expected": r.planned_trials}
                for r in self.ingest.receiver.store.runs()
            ]  # fmt: skip
            return self._send(200, json.dumps({"runs": runs}).encode(), JSON)
        match = _RUN_PATH.match(self.path)
        assessment = self.ingest.receiver.assessment(match.group(1)) if match else None
        if assessment is None:
            return self._status(404, code_pb2.NOT_FOUND, "unknown run", JSON)
        self._send(200, json.dumps(report_document(assessment)).encode(), JSON)


def http_handler(ingest: Ingest, token: str | None) -> type[BaseHTTPRequestHandler]:
    """The handler class a server instantiates per connection, bound to `ingest` and `token`."""
    return type("Handler", (OtlpHttpHandler,), {"ingest": ingest, "token": token})
