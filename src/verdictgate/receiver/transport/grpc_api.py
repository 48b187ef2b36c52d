"""The gRPC side of `verdictgate serve`: OTLP TraceService export and the admission query API.

The token is checked by one interceptor (`grpc_guards.TokenCheck`) for every service, before any
request message is read; the handlers below assume it is installed (`Server` does so whenever a
token is set). Every outcome is a status: retryable failures (busy, decoder restarting, store errors)
carry `RetryInfo`, anything unplanned is INTERNAL "internal error", logged once per kind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeVar

import grpc
from google.protobuf.message import Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ...v1 import verdictgate_pb2 as pb
from ..core import Receiver
from ..ingest.exports import PROTOBUF, TRACE_SERVICE, Ingest
from ..queries.assessment_cache import CachedAssessment
from .failures import Failure, failure_of
from .grpc_guards import abort_retryable, client_of

T = TypeVar("T")

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


_GRPC_STATUS = {
    Failure.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    Failure.BUSY: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Failure.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Failure.INTERNAL: grpc.StatusCode.INTERNAL,
}
"""The status of each failure on a request's path."""


def _abort_failure(
    context: grpc.ServicerContext,
    error: Exception,
    where: str,
    retry_after: int,
    unavailable_retry_after: int | None = None,
) -> NoReturn:
    """Answer an exception as its failure (`failures.failure_of`): a retryable one with
    RetryInfo (`unavailable_retry_after` seconds, when given, for a store or decoder away), an
    unplanned one INTERNAL "internal error" (logged once per kind)."""
    failure, message = failure_of(error, where)
    if failure is Failure.UNAVAILABLE and unavailable_retry_after is not None:
        retry_after = unavailable_retry_after
    if failure.retryable:
        abort_retryable(context, _GRPC_STATUS[failure], message, retry_after)
    context.abort(_GRPC_STATUS[failure], message)
    raise AssertionError("unreachable")  # abort raises


class Admissions:
    """The admission query API; at most `max_watchers` WatchAdmission streams at once. The
    token is checked by `TokenCheck`; a failure inside is UNAVAILABLE with RetryInfo (store
    errors) or INTERNAL."""

    def __init__(
        self,
        receiver: Receiver,
        max_watchers: int = 64,
        retry_after: int = 1,
        unavailable_retry_after: int = 5,
    ) -> None:
        self._receiver = receiver
        self._watchers = threading.BoundedSemaphore(max_watchers)
        self._retry_after = retry_after
        self._unavailable_retry_after = unavailable_retry_after

    def _guarded(self, context: grpc.ServicerContext, where: str, step: Callable[[], T]) -> T:
        """`step()`, its exceptions answered (context.abort raises, so it is called outside
        the handler that caught them)."""
        try:
            return step()
        except Exception as error:
            failure = error
        _abort_failure(context, failure, where, self._retry_after, self._unavailable_retry_after)

    def GetAdmission(
        self, request: pb.GetAdmissionRequest, context: grpc.ServicerContext
    ) -> pb.Admission:
        def get() -> pb.Admission | None:
            cached = self._receiver.cached_assessment(request.run_id)
            return None if cached is None else _admission_message(cached, request.format)

        admission = self._guarded(context, "GetAdmission", get)
        if admission is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown run {request.run_id!r}")
        return admission

    def WatchAdmission(
        self, request: pb.WatchAdmissionRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.Admission]:
        """Stream the run's admission as it changes until it is final; a run that has not
        appeared yet is waited for (until the client's deadline). Woken only by changes of this
        run; every watcher of a run shares one assessment per change."""
        if not self._watchers.acquire(blocking=False):
            abort_retryable(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "too many runs watched at once, retry later",
                self._retry_after,
            )
        changes = self._receiver.watch(request.run_id, context.is_active)

        def following() -> pb.Admission | None:
            cached = next(changes, None)
            return None if cached is None else _admission_message(cached, request.format)

        try:
            while (admission := self._guarded(context, "WatchAdmission", following)) is not None:
                yield admission
        finally:
            close = getattr(changes, "close", None)  # a generator: leave its watch at once
            if close is not None:
                close()
            self._watchers.release()

    def ListRuns(
        self, request: pb.ListRunsRequest, context: grpc.ServicerContext
    ) -> pb.ListRunsResponse:
        """One page of runs, oldest first (`page_size`, `page_token`)."""

        def page() -> pb.ListRunsResponse | str:
            try:
                runs, next_token = self._receiver.list_runs(request.page_token, request.page_size)
            except ValueError as error:
                return str(error)
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

        listed = self._guarded(context, "ListRuns", page)
        if isinstance(listed, str):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, listed)
        return listed


def export_handler(ingest: Ingest) -> grpc.GenericRpcHandler:
    """TraceService/Export: every outcome is a status, never a dropped call. Client errors are
    INVALID_ARGUMENT; a busy receiver RESOURCE_EXHAUSTED and a restarting decoder or failing
    store UNAVAILABLE, both with RetryInfo; anything unplanned INTERNAL (logged). The token is
    checked before, by `TokenCheck`."""
    limits = ingest.limits

    def export(body: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        try:
            return ingest.export(body, PROTOBUF, client_of(context))
        except Exception as error:
            failed = error
        # aborting raises, so it happens outside the handler above
        _abort_failure(
            context,
            failed,
            "OTLP/gRPC Export",
            limits.retry_after_seconds,
            limits.unavailable_retry_after_seconds,
        )

    handler: grpc.RpcMethodHandler[bytes, ExportTraceServiceResponse]
    handler = grpc.unary_unary_rpc_method_handler(
        export, request_deserializer=None, response_serializer=lambda m: m.SerializeToString()
    )
    return grpc.method_handlers_generic_handler(TRACE_SERVICE, {"Export": handler})


def ignored_signals_handlers() -> list[grpc.GenericRpcHandler]:
    """Metrics and logs sent here (e.g. by `verdictgate run --otlp-endpoint`) are accepted and
    dropped, so exporters do not retry them; only traces carry evidence. They need the token
    like every other call (`TokenCheck`)."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceResponse,
    )

    def drop(response: Message) -> Callable[[bytes, grpc.ServicerContext], Message]:
        def export(body: bytes, context: grpc.ServicerContext) -> Message:
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
