"""The gRPC side of `verdictgate serve`: OTLP TraceService export and the admission query API."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator

import grpc
from google.protobuf import duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ..v1 import verdictgate_pb2 as pb
from .decoding import DecoderUnavailable
from .ingest import PROTOBUF, TRACE_SERVICE, Busy, Client, Ingest, authorized, report_unexpected
from .otlp import MalformedRequest
from .receiver import Receiver
from .watch import CachedAssessment

logger = logging.getLogger(__name__)

ADMISSION_SERVICE = "verdictgate.v1.AdmissionService"
"""The query API of proto/verdictgate/v1/verdictgate.proto, registered by hand below so that
only the message classes are generated code."""


def _admission_message(cached: CachedAssessment, fmt: str) -> pb.Admission:
    assessment = cached.assessment
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
        report=cached.report(fmt or "json"),
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

    def GetAdmission(
        self, request: pb.GetAdmissionRequest, context: grpc.ServicerContext
    ) -> pb.Admission:
        self._check(context)
        cached = self._receiver.cached_assessment(request.run_id)
        if cached is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown run {request.run_id!r}")
        return _admission_message(cached, request.format)

    def WatchAdmission(
        self, request: pb.WatchAdmissionRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.Admission]:
        """Stream the run's admission as it changes until it is final; a run that has not
        appeared yet is waited for (until the client's deadline). Woken only by changes of this
        run; every watcher of a run shares one assessment per change."""
        self._check(context)
        if not self._watchers.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "too many runs watched at once, retry later"
            )
        try:
            for cached in self._receiver.watch(request.run_id, context.is_active):
                yield _admission_message(cached, request.format)
        finally:
            self._watchers.release()

    def ListRuns(
        self, request: pb.ListRunsRequest, context: grpc.ServicerContext
    ) -> pb.ListRunsResponse:
        """One page of runs, oldest first (`page_size`, `page_token`)."""
        self._check(context)
        try:
            runs, next_token = self._receiver.store.page(request.page_token, request.page_size)
        except ValueError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
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
                for run in runs
            ],
            next_page_token=next_token,
        )


def _authorization(context: grpc.ServicerContext) -> str | None:
    """The call's authorization header (gRPC gives bytes only for keys ending in `-bin`); None
    when there is none or more than one."""
    headers = [value for key, value in context.invocation_metadata() if key == "authorization"]
    return headers[0] if len(headers) == 1 and isinstance(headers[0], str) else None


def _client(context: grpc.ServicerContext) -> Client:
    """Who makes this call, for fairness: the peer's host (`ipv4:10.0.0.7:51234` gives
    `10.0.0.7`, `ipv6:[::1]:51234` gives `[::1]`) and its user-agent metadata."""
    peer = context.peer() or ""
    kind, _, address = peer.partition(":")
    host = address.rpartition(":")[0] if kind in ("ipv4", "ipv6") else peer
    agents = [value for key, value in context.invocation_metadata() if key == "user-agent"]
    agent = agents[0] if agents and isinstance(agents[0], str) else ""
    return host, agent[:256]


def _abort_retryable(
    context: grpc.ServicerContext, code: grpc.StatusCode, message: str, seconds: int
) -> None:
    """Abort with a `google.rpc.RetryInfo`: in the status details, where the Collector's OTLP
    exporter looks (it retries RESOURCE_EXHAUSTED only with one), and under
    `google.rpc.retryinfo-bin`, where the Python SDK's exporter looks."""
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds))
    status = status_pb2.Status(code=code.value[0], message=message)
    status.details.add().Pack(retry)
    context.set_trailing_metadata(
        (
            ("grpc-status-details-bin", status.SerializeToString()),
            ("google.rpc.retryinfo-bin", retry.SerializeToString()),
        )
    )
    context.abort(code, message)


def export_handler(ingest: Ingest, token: str | None) -> grpc.GenericRpcHandler:
    """TraceService/Export: every outcome is a status, never a dropped call. Client errors are
    INVALID_ARGUMENT; a busy receiver RESOURCE_EXHAUSTED and a restarting decoder or failing
    store UNAVAILABLE, both with RetryInfo; anything unplanned INTERNAL (logged)."""
    retry_after = ingest.limits.retry_after_seconds

    def export(body: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        if not authorized(_authorization(context), token):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")
        try:
            return ingest.export(body, PROTOBUF, _client(context))
        except MalformedRequest as error:
            failure, retryable = (grpc.StatusCode.INVALID_ARGUMENT, str(error)), False
        except Busy as error:
            failure, retryable = (grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)), True
        except DecoderUnavailable:
            failure = (grpc.StatusCode.UNAVAILABLE, "decoder restarting, retry later")
            retryable = True
        except sqlite3.Error as error:
            logger.error("verdictgate: store error: %s", error)
            failure = (grpc.StatusCode.UNAVAILABLE, "store unavailable, retry later")
            retryable = True
        except Exception as error:
            report_unexpected(error, "OTLP/gRPC Export")
            failure, retryable = (grpc.StatusCode.INTERNAL, "internal error"), False
        # aborting raises, so it happens outside the handlers above
        if retryable:
            _abort_retryable(context, *failure, retry_after)
        context.abort(*failure)

    handler: grpc.RpcMethodHandler[bytes, ExportTraceServiceResponse]
    handler = grpc.unary_unary_rpc_method_handler(
        export, request_deserializer=None, response_serializer=lambda m: m.SerializeToString()
    )
    return grpc.method_handlers_generic_handler(TRACE_SERVICE, {"Export": handler})


def ignored_signals_handlers(token: str | None) -> list[grpc.GenericRpcHandler]:
    """Metrics and logs sent here (e.g. by `verdictgate run --otlp-endpoint`) are accepted and
    dropped, so exporters do not retry them; only traces carry evidence. They need the token
    like every other call."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceResponse,
    )

    def drop(response: Message) -> Callable[[bytes, grpc.ServicerContext], Message]:
        def export(body: bytes, context: grpc.ServicerContext) -> Message:
            if not authorized(_authorization(context), token):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")
            return response

        return export

    handlers: list[grpc.GenericRpcHandler] = []
    handler: grpc.RpcMethodHandler[bytes, Message]
    for service, response in (
        ("opentelemetry.proto.collector.metrics.v1.MetricsService", ExportMetricsServiceResponse()),
        ("opentelemetry.proto.collector.logs.v1.LogsService", ExportLogsServiceResponse()),
    ):
        handler = grpc.unary_unary_rpc_method_handler(
            drop(response),
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
