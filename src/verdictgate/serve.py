"""`verdictgate serve`: OTLP/gRPC and OTLP/HTTP receivers plus the admission query API."""

from __future__ import annotations

import hmac
import json
import logging
import re
import sqlite3
import ssl
import threading
import zlib
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from .assessment import Assessment
from .decoding import JSON, Decoder, DecoderUnavailable
from .otlp import Extract, MalformedRequest
from .receiver import Receiver
from .reports import RENDERERS
from .reports.json_report import report_document
from .v1 import verdictgate_pb2 as pb
from .v1 import verdictgate_pb2_grpc as pb_grpc

logger = logging.getLogger(__name__)

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


class Busy(Exception):
    """Too many requests in flight: the client should retry later."""


class _Gate:
    """Admits at most `limit` requests at once; the rest are told to retry (backpressure)."""

    def __init__(self, limit: int) -> None:
        self._slots = threading.BoundedSemaphore(limit)

    def __enter__(self) -> None:
        if not self._slots.acquire(blocking=False):
            raise Busy()

    def __exit__(self, *exc: Any) -> None:
        self._slots.release()


def _authorized(header: str | None, token: str | None) -> bool:
    if token is None:
        return True
    expected = f"Bearer {token}".encode()
    return header is not None and hmac.compare_digest(header.encode(), expected)


def _admission_message(assessment: Assessment, fmt: str) -> pb.Admission:
    pooled = assessment.pooled
    return pb.Admission(
        run_id=assessment.run.id,
        suite=assessment.run.suite,
        point=assessment.run.point,
        status=assessment.status.value,
        reasons=list(assessment.reason_codes),
        headline=assessment.headline,
        final=not assessment.run.in_progress,
        exit_code=assessment.status.exit_code,
        trials_expected=assessment.trials.expected,
        trials_received=assessment.trials.received,
        pairs=pooled.pairs,
        flips=pooled.flips,
        ci_low=pooled.ci_low,
        ci_high=pooled.ci_high,
        report=RENDERERS.get(fmt or "json", RENDERERS["json"])(assessment),
    )


class _Admissions(pb_grpc.AdmissionServiceServicer):
    def __init__(self, receiver: Receiver, token: str | None) -> None:
        self._receiver = receiver
        self._token = token

    def _check(self, context: grpc.ServicerContext) -> None:
        metadata = dict(context.invocation_metadata())
        if not _authorized(metadata.get("authorization"), self._token):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")

    def _assessment(self, run_id: str, context: grpc.ServicerContext) -> Assessment:
        assessment = self._receiver.assessment(run_id)
        if assessment is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown run {run_id!r}")
        return assessment

    def GetAdmission(self, request, context):
        self._check(context)
        return _admission_message(self._assessment(request.run_id, context), request.format)

    def WatchAdmission(self, request, context):
        self._check(context)
        version = self._receiver.version
        while context.is_active():
            assessment = self._assessment(request.run_id, context)
            yield _admission_message(assessment, request.format)
            if not assessment.run.in_progress:
                return
            version = self._receiver.changes(version, timeout=1.0)

    def ListRuns(self, request, context):
        self._check(context)
        return pb.ListRunsResponse(
            runs=[
                pb.RunSummary(
                    run_id=run.run_id,
                    suite=run.suite or "",
                    point=run.point or "",
                    status=run.status or "",
                    final=run.final,
                    trials_received=run.received,
                    trials_expected=run.planned_trials or 0,
                )
                for run in self._receiver.store.runs()
            ]
        )


def _partial_success(extract: Extract) -> ExportTraceServiceResponse:
    if not extract.rejected:
        return ExportTraceServiceResponse()
    return ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(
            rejected_spans=extract.rejected, error_message="; ".join(extract.errors)
        )
    )


class _Ingest:
    """Shared by both transports: decode, commit, answer."""

    def __init__(self, receiver: Receiver, limits: Limits) -> None:
        self.receiver = receiver
        self.limits = limits
        self.gate = _Gate(limits.max_in_flight)
        self.decoder = Decoder(limits.decoders)

    def export(self, body: bytes, content_type: str) -> ExportTraceServiceResponse:
        """Raises MalformedRequest (client error), Busy, DecoderUnavailable or sqlite3.Error
        (the last three retryable)."""
        with self.gate:
            extract = self.decoder.decode(body, content_type)
            self.receiver.ingest(extract)
        return _partial_success(extract)


def _grpc_export_handler(ingest: _Ingest, token: str | None):
    def export(body: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        metadata = dict(context.invocation_metadata())
        if not _authorized(metadata.get("authorization"), token):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")
        try:
            return ingest.export(body, PROTOBUF)
        except MalformedRequest as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except Busy:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "receiver busy, retry later")
        except DecoderUnavailable:
            context.abort(grpc.StatusCode.UNAVAILABLE, "decoder restarting, retry later")
        except sqlite3.Error as error:
            logger.error("verdictgate: store error: %s", error)
            context.abort(grpc.StatusCode.UNAVAILABLE, "store unavailable, retry later")

    handler = grpc.unary_unary_rpc_method_handler(
        export, request_deserializer=None, response_serializer=lambda m: m.SerializeToString()
    )
    return grpc.method_handlers_generic_handler(TRACE_SERVICE, {"Export": handler})


def _ignored_signals_handlers() -> list:
    """Metrics and logs sent here (e.g. by `verdictgate run --otlp-endpoint`) are accepted and
    dropped, so exporters do not retry them; only traces carry evidence."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceResponse,
    )

    handlers = []
    for service, response in (
        ("opentelemetry.proto.collector.metrics.v1.MetricsService", ExportMetricsServiceResponse()),
        ("opentelemetry.proto.collector.logs.v1.LogsService", ExportLogsServiceResponse()),
    ):
        handler = grpc.unary_unary_rpc_method_handler(
            lambda body, context, response=response: response,
            request_deserializer=None,
            response_serializer=lambda message: message.SerializeToString(),
        )
        handlers.append(grpc.method_handlers_generic_handler(service, {"Export": handler}))
    return handlers


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


def _http_handler(ingest: _Ingest, token: str | None) -> type[BaseHTTPRequestHandler]:
    receiver, limits = ingest.receiver, ingest.limits

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "verdictgate"

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("http: " + format, *args)

        def _send(
            self, code: int, body: bytes, content_type: str, headers: dict | None = None
        ) -> None:
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

        def _authorized(self) -> bool:
            return _authorized(self.headers.get("Authorization"), token)

        def do_POST(self) -> None:
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            reply_type = JSON if content_type == JSON else PROTOBUF
            length = self.headers.get("Content-Length")
            if self.path != "/v1/traces":
                self._discard(length)
                return self._status(404, code_pb2.NOT_FOUND, "only /v1/traces", reply_type)
            if not self._authorized():
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
            if int(length) > limits.max_request_bytes:
                self.close_connection = True
                return self._status(
                    413, code_pb2.RESOURCE_EXHAUSTED, "request too large", reply_type
                )
            body = self.rfile.read(int(length))
            try:
                if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                    body = _inflate(body, limits.max_request_bytes)
                response = ingest.export(body, content_type)
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
                    {"Retry-After": str(limits.retry_after_seconds)},
                )
            except sqlite3.Error:
                return self._status(
                    503,
                    code_pb2.UNAVAILABLE,
                    "store unavailable, retry later",
                    reply_type,
                    {"Retry-After": str(limits.retry_after_seconds)},
                )
            if reply_type == JSON:
                from google.protobuf.json_format import MessageToJson

                self._send(200, MessageToJson(response).encode(), JSON)
            else:
                self._send(200, response.SerializeToString(), PROTOBUF)

        def _discard(self, length: str | None) -> None:
            if length and length.isdigit() and int(length) <= limits.max_request_bytes:
                self.rfile.read(int(length))
            else:
                self.close_connection = True

        def do_GET(self) -> None:
            if not self._authorized():
                return self._status(
                    401, code_pb2.UNAUTHENTICATED, "a bearer token is required", JSON
                )
            if self.path == "/v1/runs":
                runs = [
                    {"run_id": r.run_id, "suite": r.suite, "point": r.point, "status": r.status,
                     "final": r.final, "trials_received": r.received, "trials_expected": r.planned_trials}
                    for r in receiver.store.runs()
                ]  # fmt: skip
                return self._send(200, json.dumps({"runs": runs}).encode(), JSON)
            match = _RUN_PATH.match(self.path)
            assessment = receiver.assessment(match.group(1)) if match else None
            if assessment is None:
                return self._status(404, code_pb2.NOT_FOUND, "unknown run", JSON)
            self._send(200, json.dumps(report_document(assessment)).encode(), JSON)

    return Handler


@dataclass(frozen=True)
class Tls:
    """PEM certificate chain and private key files; both transports then require TLS."""

    cert_path: str
    key_path: str

    def read(self) -> tuple[bytes, bytes]:
        with open(self.key_path, "rb") as key, open(self.cert_path, "rb") as cert:
            return key.read(), cert.read()


class Server:
    """Both transports and the query API over one Receiver, with a ticker for grace periods."""

    def __init__(
        self,
        receiver: Receiver,
        *,
        grpc_listen: str | None = "127.0.0.1:4317",
        http_listen: str | None = "127.0.0.1:4318",
        token: str | None = None,
        tls: Tls | None = None,
        limits: Limits = Limits(),
        tick_seconds: float = 0.5,
    ) -> None:
        self.receiver = receiver
        ingest = self._ingest = _Ingest(receiver, limits)
        self._stop = threading.Event()
        self._tick_seconds = tick_seconds
        self.grpc_port = self.http_port = None
        self._grpc = None
        if grpc_listen:
            self._grpc = grpc.server(
                futures.ThreadPoolExecutor(max_workers=limits.max_in_flight + 4),
                options=[("grpc.max_receive_message_length", limits.max_request_bytes)],
            )
            self._grpc.add_generic_rpc_handlers(
                (_grpc_export_handler(ingest, token), *_ignored_signals_handlers())
            )
            pb_grpc.add_AdmissionServiceServicer_to_server(_Admissions(receiver, token), self._grpc)
            if tls is None:
                self.grpc_port = self._grpc.add_insecure_port(grpc_listen)
            else:
                credentials = grpc.ssl_server_credentials([tls.read()])
                self.grpc_port = self._grpc.add_secure_port(grpc_listen, credentials)
        self._http = None
        if http_listen:
            host, _, port = http_listen.rpartition(":")
            self._http = ThreadingHTTPServer((host, int(port)), _http_handler(ingest, token))
            self._http.daemon_threads = True
            if tls is not None:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(tls.cert_path, tls.key_path)
                self._http.socket = context.wrap_socket(self._http.socket, server_side=True)
            self.http_port = self._http.server_address[1]
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self._grpc is not None:
            self._grpc.start()
        if self._http is not None:
            self._threads.append(threading.Thread(target=self._http.serve_forever, daemon=True))
        self._threads.append(threading.Thread(target=self._tick, daemon=True))
        for thread in self._threads:
            thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(self._tick_seconds):
            try:
                self.receiver.tick()
            except Exception:
                logger.warning("verdictgate: tick failed", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._grpc is not None:
            self._grpc.stop(grace=1).wait()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self._ingest.decoder.close()
