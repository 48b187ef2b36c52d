"""The gRPC server's guards, before any request message is read: the token (`TokenCheck`), and
the calls in progress at once (`CallCap`); a refusal the exporters retry carries `RetryInfo`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn, TypeVar

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from ..ingest.fair_gate import Client
from .bearer import REFUSED, Presented, TokenThrottle, presented

T = TypeVar("T")
_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


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
            host = client_of(context)[0]
            shown, wait = self._throttle.check(header, self._token, host)
            if shown is Presented.THROTTLED:
                abort_retryable(context, grpc.StatusCode.RESOURCE_EXHAUSTED, REFUSED[shown], wait)
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
            abort_retryable(
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


def client_of(context: grpc.ServicerContext) -> Client:
    """Who makes this call, for fairness: the peer's host (`ipv4:10.0.0.7:51234` gives
    `10.0.0.7`, `ipv6:[::1]:51234` gives `[::1]`) and its user-agent metadata."""
    peer = context.peer() or ""
    kind, _, address = peer.partition(":")
    host = address.rpartition(":")[0] if kind in ("ipv4", "ipv6") else peer
    agents = [value for key, value in context.invocation_metadata() if key == "user-agent"]
    agent = agents[0] if agents and isinstance(agents[0], str) else ""
    return host, agent[:256]


def abort_retryable(
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
