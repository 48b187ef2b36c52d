"""The gRPC side of `verdictgate serve`: OTLP TraceService export and the admission query API."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator

import grpc
from google.protobuf.message import Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ..assessment import Assessment
from ..reports import RENDERERS
from ..v1 import verdictgate_pb2 as pb
from .decoding import DecoderUnavailable
from .ingest import PROTOBUF, TRACE_SERVICE, Busy, Ingest, authorized
from .otlp import MalformedRequest
from .receiver import Receiver

logger = logging.getLogger(__name__)

ADMISSION_SERVICE = "verdictgate.v1.AdmissionService"
"""The query API of proto/verdictgate/v1/verdictgate.proto, registered by hand below so that
only the message classes are generated code."""


def _admission_message(assessment: Assessment, fmt: str) -> pb.Admission:
    pooled = assessment.pooled
    return pb.Admission(
        run_id=assessment.run.id,
        suite=assessment.run.suite,
        point=assessment.run.point,
        status=assessment.status.value,
        reasons=list(assessment.reason_codes),
        headline=assessment.headline,
        final=not assessment.in_progress,
        exit_code=assessment.status.exit_code,
        trials_expected=assessment.trials.expected,
        trials_received=assessment.trials.received,
        pairs=pooled.pairs,
        flips=pooled.flips,
        ci_low=pooled.ci_low,
        ci_high=pooled.ci_high,
        report=RENDERERS.get(fmt or "json", RENDERERS["json"])(assessment),
    )


class Admissions:
    """The admission query API; at most `max_watchers` WatchAdmission streams at once."""

    def __init__(self, receiver: Receiver, token: str | None, max_watchers: int = 64) -> None:
        self._receiver = receiver
        self._token = token
        self._watchers = threading.BoundedSemaphore(max_watchers)

    def _check(self, context: grpc.ServicerContext) -> None:
        if not authorized(_authorization(context), self._token):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")

    def _assessment(self, run_id: str, context: grpc.ServicerContext) -> Assessment:
        assessment = self._receiver.assessment(run_id)
        if assessment is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown run {run_id!r}")
        return assessment

    def GetAdmission(
        self, request: pb.GetAdmissionRequest, context: grpc.ServicerContext
    ) -> pb.Admission:
        self._check(context)
        return _admission_message(self._assessment(request.run_id, context), request.format)

    def WatchAdmission(
        self, request: pb.WatchAdmissionRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.Admission]:
        """Stream the run's admission as it changes until it is final; a run that has not
        appeared yet is waited for (until the client's deadline)."""
        self._check(context)
        if not self._watchers.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "too many runs watched at once, retry later"
            )
        try:
            yield from self._watch(request, context)
        finally:
            self._watchers.release()

    def _watch(
        self, request: pb.WatchAdmissionRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.Admission]:
        version = self._receiver.version
        while context.is_active():
            assessment = self._receiver.assessment(request.run_id)
            if assessment is not None:
                yield _admission_message(assessment, request.format)
                if not assessment.in_progress:
                    return
            version = self._receiver.changes(version, timeout=1.0)

    def ListRuns(
        self, request: pb.ListRunsRequest, context: grpc.ServicerContext
    ) -> pb.ListRunsResponse:
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


def _authorization(context: grpc.ServicerContext) -> str | None:
    """The call's authorization header (gRPC gives bytes only for keys ending in `-bin`)."""
    header = dict(context.invocation_metadata()).get("authorization")
    return header if isinstance(header, str) else None


def export_handler(ingest: Ingest, token: str | None) -> grpc.GenericRpcHandler:
    def export(body: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        if not authorized(_authorization(context), token):
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

    handler: grpc.RpcMethodHandler[bytes, ExportTraceServiceResponse]
    handler = grpc.unary_unary_rpc_method_handler(
        export, request_deserializer=None, response_serializer=lambda m: m.SerializeToString()
    )
    return grpc.method_handlers_generic_handler(TRACE_SERVICE, {"Export": handler})


def ignored_signals_handlers() -> list[grpc.GenericRpcHandler]:
    """Metrics and logs sent here (e.g. by `verdictgate run --otlp-endpoint`) are accepted and
    dropped, so exporters do not retry them; only traces carry evidence."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceResponse,
    )

    handlers: list[grpc.GenericRpcHandler] = []
    handler: grpc.RpcMethodHandler[bytes, Message]
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


def admission_handlers(admissions: Admissions) -> grpc.GenericRpcHandler:
    """The AdmissionService methods, with the generated message classes as their codecs."""

    def serialize(message: Message) -> bytes:
        return message.SerializeToString()

    return grpc.method_handlers_generic_handler(
        ADMISSION_SERVICE,
        {
            "GetAdmission": grpc.unary_unary_rpc_method_handler(
                admissions.GetAdmission, pb.GetAdmissionRequest.FromString, serialize
            ),
            "WatchAdmission": grpc.unary_stream_rpc_method_handler(
                admissions.WatchAdmission, pb.WatchAdmissionRequest.FromString, serialize
            ),
            "ListRuns": grpc.unary_unary_rpc_method_handler(
                admissions.ListRuns, pb.ListRunsRequest.FromString, serialize
            ),
        },
    )
