"""The gRPC side of `verdictgate serve`: OTLP TraceService export and the admission query API.

The token is checked by one interceptor (`TokenCheck`) for every service, before any request
message is read; the handlers below assume it is installed (`Server` does so whenever a token is
set). Every outcome is a status: retryable failures (busy, decoder restarting, store errors)
carry `RetryInfo`, anything unplanned is INTERNAL "internal error", logged once per kind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn, TypeVar

import grpc
from google.protobuf import duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ..v1 import verdictgate_pb2 as pb
from .assessment_cache import CachedAssessment
from .bearer import REFUSED, Presented, TokenThrottle, presented
from .core import Receiver
from .failures import Failure, failure_of
from .fair_gate import Client
from .ingest import PROTOBUF, TRACE_SERVICE, Ingest

T = TypeVar("T")
_Request = TypeVar("_Request")
_Response = TypeVar("_Response")

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


class TokenCheck(grpc.ServerInterceptor):
    """Refuses a call without the bearer token (`authorization` metadata) before any of its
    request message is read, for every service and method, known or not: UNAUTHENTICATED, a
    missing token told apart from a wrong one; a host past its wrong tokens is refused
    RESOURCE_EXHAUSTED with RetryInfo, whatever it sends (`TokenThrottle`, shared with the
    HTTP port).

    grpc-python reads a unary request's message on a pool thread before it calls the handler,
    so a handler that checks the token cannot stop a caller that never sends its message: such
    calls would hold every thread (and every `maximum_concurrent_rpcs` slot) for as long as
    their clients like. A refused call is therefore given a *request-streaming* handler whose
    behaviour aborts at once, without touching the request stream; its thread is free again
    immediately. The peer's host is known only there, so a call is checked there whenever its
    token is not right or some host has wrong tokens counted; otherwise it goes straight on.

    What remains: a caller *with* the token that stalls its message still holds a thread until
    it sends, cancels, its deadline passes or its connection dies (keepalive); token holders
    are trusted that far, and are bounded by `grpc_max_concurrent_rpcs`.
    """

    def __init__(self, token: str, throttle: TokenThrottle) -> None:
        self._token = token
        self._throttle = throttle

    def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], grpc.RpcMethodHandler[_Request, _Response] | None
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Request, _Response] | None:
        metadata = handler_call_details.invocation_metadata or ()
        header = _single(metadata, "authorization")
        handler = continuation(handler_call_details)
        if presented(header, self._token) is Presented.RIGHT and not self._throttle.hosts():
            return handler

        def admit(context: grpc.ServicerContext) -> None:
            host = _client(context)[0]
            shown, wait = self._throttle.check(header, self._token, host)
            if shown is Presented.THROTTLED:
                _abort_retryable(context, grpc.StatusCode.RESOURCE_EXHAUSTED, REFUSED[shown], wait)
            if shown is not Presented.RIGHT:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED[shown])

        return _admitted_first(admit, handler)


class CallCap(grpc.ServerInterceptor):
    """At most `limit` calls in progress at once; one beyond is answered RESOURCE_EXHAUSTED
    with `RetryInfo`, so every OTLP exporter (the Collector's needs RetryInfo) retries it.

    A call is counted from the moment its behaviour starts on a pool thread until it ends, so
    a call gRPC never runs (its client gone first) is never counted. To make that true for a
    unary request too, whose message grpc-python reads before it calls the behaviour, each
    handler is served as a request-streaming one whose first step is the count; a refused
    call is answered without its message being read, its thread free again at once.
    """

    def __init__(self, limit: int, retry_after: int) -> None:
        self._slots = threading.BoundedSemaphore(max(1, limit))
        self._retry_after = retry_after

    def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], grpc.RpcMethodHandler[_Request, _Response] | None
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Request, _Response] | None:
        handler = continuation(handler_call_details)
        return None if handler is None else self._counted(handler)

    def _enter(self, context: grpc.ServicerContext) -> None:
        if not self._slots.acquire(blocking=False):
            _abort_retryable(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "receiver busy, retry later",
                self._retry_after,
            )

    def _counted(
        self, handler: grpc.RpcMethodHandler[_Request, _Response]
    ) -> grpc.RpcMethodHandler[_Request, _Response]:
        if handler.response_streaming:
            behaviour = _taking_the_stream(handler.stream_stream, handler.unary_stream)

            def streaming(
                stream: Iterator[_Request], context: grpc.ServicerContext
            ) -> Iterator[_Response]:
                self._enter(context)
                try:
                    yield from behaviour(stream, context)
                finally:
                    self._slots.release()

            return grpc.stream_stream_rpc_method_handler(
                streaming, handler.request_deserializer, handler.response_serializer
            )
        unary = _taking_the_stream(handler.stream_unary, handler.unary_unary)

        def answered(stream: Iterator[_Request], context: grpc.ServicerContext) -> _Response:
            self._enter(context)
            try:
                return unary(stream, context)
            finally:
                self._slots.release()

        return grpc.stream_unary_rpc_method_handler(
            answered, handler.request_deserializer, handler.response_serializer
        )


def _taking_the_stream(
    streaming: Callable[[Iterator[_Request], grpc.ServicerContext], T] | None,
    unary: Callable[[_Request, grpc.ServicerContext], T] | None,
) -> Callable[[Iterator[_Request], grpc.ServicerContext], T]:
    """A handler's behaviour, served as a request-streaming one: a request-streaming behaviour
    as it is, a unary one given the stream's one message."""
    if streaming is not None:
        return streaming
    assert unary is not None

    def one_message(stream: Iterator[_Request], context: grpc.ServicerContext) -> T:
        for message in stream:  # a unary request's one message
            return unary(message, context)
        context.abort(  # none came (or it could not be read: gRPC has answered that)
            grpc.StatusCode.UNIMPLEMENTED, "a unary call needs exactly one request message"
        )

    return one_message


def _admitted_first(
    admit: Callable[[grpc.ServicerContext], None],
    handler: grpc.RpcMethodHandler[_Request, _Response] | None,
) -> grpc.RpcMethodHandler[_Request, _Response] | None:
    """`handler` served as a request-streaming one whose first step is `admit` (which aborts
    the call it refuses, its request never read); a method gRPC does not know is only
    refused (UNIMPLEMENTED once admitted)."""
    if handler is None:

        def unknown(stream: Iterator[object], context: grpc.ServicerContext) -> NoReturn:
            admit(context)
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method")
            raise AssertionError("unreachable")  # abort raises

        return grpc.stream_unary_rpc_method_handler(unknown)
    if handler.response_streaming:
        streaming = _taking_the_stream(handler.stream_stream, handler.unary_stream)

        def admitted_stream(
            stream: Iterator[_Request], context: grpc.ServicerContext
        ) -> Iterator[_Response]:
            admit(context)
            yield from streaming(stream, context)

        return grpc.stream_stream_rpc_method_handler(
            admitted_stream, handler.request_deserializer, handler.response_serializer
        )
    unary = _taking_the_stream(handler.stream_unary, handler.unary_unary)

    def admitted(stream: Iterator[_Request], context: grpc.ServicerContext) -> _Response:
        admit(context)
        return unary(stream, context)

    return grpc.stream_unary_rpc_method_handler(
        admitted, handler.request_deserializer, handler.response_serializer
    )


def _single(metadata: Sequence[tuple[str, str | bytes]], key: str) -> str | None:
    """A metadata value given exactly once, as text (gRPC gives bytes only for keys ending in
    `-bin`); None when it is missing, repeated or binary."""
    values = [value for name, value in metadata if name == key]
    return values[0] if len(values) == 1 and isinstance(values[0], str) else None


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
        _abort_retryable(context, _GRPC_STATUS[failure], message, retry_after)
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
            _abort_retryable(
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


def export_handler(ingest: Ingest) -> grpc.GenericRpcHandler:
    """TraceService/Export: every outcome is a status, never a dropped call. Client errors are
    INVALID_ARGUMENT; a busy receiver RESOURCE_EXHAUSTED and a restarting decoder or failing
    store UNAVAILABLE, both with RetryInfo; anything unplanned INTERNAL (logged). The token is
    checked before, by `TokenCheck`."""
    limits = ingest.limits

    def export(body: bytes, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        try:
            return ingest.export(body, PROTOBUF, _client(context))
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
