"""One request on the receiver's HTTP port and the ways to answer it, shared by its routes
(OTLP/HTTP ingest, the JSON query API, the pages): a body, an OTLP status in the request's
format, a method refused, and every exception a route lets out.

Answers: 401 carries `WWW-Authenticate: Bearer` (`error="invalid_token"` for a wrong token), and
a host past its wrong tokens is answered 429 (`bearer.TokenThrottle`); a known path with another method is 405 with
`Allow`; retryable refusals (429, 503, including a body that did not arrive in time) carry
`Retry-After`, as the OTLP/HTTP spec has exporters retry 429, 502, 503 and 504 only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from google.rpc import code_pb2, status_pb2

from ..http import RETRYABLE, HttpError, RequestHandler
from ..ingest.decoding import JSON
from ..ingest.exports import PROTOBUF
from ..ingest.fair_gate import Client
from .bearer import REFUSED, WRONG_CHALLENGE, Presented, TokenThrottle
from .failures import Failure, failure_of

_HTTP_STATUS = {
    Failure.INVALID: 400,
    Failure.BUSY: 429,
    Failure.UNAVAILABLE: 503,
    Failure.INTERNAL: 500,
}
"""The status of each failure on a request's path."""
_GRPC_CODES = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    411: code_pb2.INVALID_ARGUMENT,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    500: code_pb2.INTERNAL,
    501: code_pb2.UNIMPLEMENTED,
    503: code_pb2.UNAVAILABLE,
}
"""The `google.rpc.Status` code an answer's body carries for each HTTP status."""


class HttpExchange(RequestHandler):
    """A request on the receiver's HTTP port, with the answers its routes give; a bound
    subclass (`http_api.http_handler`) supplies the token and the throttle of wrong ones."""

    token: str | None = None
    throttle: TokenThrottle
    server_version = "verdictgate"
    reply_type = JSON
    """The format of this request's answers: the request's own content type, JSON otherwise."""

    def answer(
        self, code: int, body: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        """Send a whole answer (its body left out for HEAD)."""
        closing = self.will_close()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if closing:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def answer_status(
        self,
        code: int,
        grpc_code: int,
        message: str,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer with a `google.rpc.Status`, in JSON or (any other type) protobuf."""
        if code == 401:
            headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
        status = status_pb2.Status(code=grpc_code, message=message)
        if content_type == JSON:
            body = json.dumps({"code": grpc_code, "message": message}).encode()
        else:
            body, content_type = status.SerializeToString(), PROTOBUF
        self.answer(code, body, content_type, headers)

    def presented(self) -> tuple[Presented, int]:
        """What the request shows of the bearer token, a wrong one counted against its host,
        and the seconds the host must wait when it is past its wrong tokens
        (`TokenThrottle.check`)."""
        return self.throttle.check(
            self.headers.get("Authorization"), self.token, str(self.client_address[0])
        )

    def refuse_token(self, shown: Presented, wait: int, content_type: str) -> None:
        """Answer a request whose token is not RIGHT: 401 for a missing or a wrong one, each
        told apart, 429 with `Retry-After` for a host past its wrong tokens."""
        if shown is Presented.THROTTLED:
            headers = {"Retry-After": str(wait)}
            return self.answer_status(
                429, code_pb2.RESOURCE_EXHAUSTED, REFUSED[shown], content_type, headers
            )
        challenge = {"WWW-Authenticate": WRONG_CHALLENGE} if shown is Presented.WRONG else {}
        self.answer_status(401, code_pb2.UNAUTHENTICATED, REFUSED[shown], content_type, challenge)

    def token_refused(self, content_type: str) -> bool:
        """Check the bearer token and answer (`refuse_token`) unless it is right: whether it
        answered."""
        shown, wait = self.presented()
        if shown is Presented.RIGHT:
            return False
        self.refuse_token(shown, wait, content_type)
        return True

    def client(self) -> Client:
        """Who sends this request, for fairness: its peer host and user agent."""
        return str(self.client_address[0]), (self.headers.get("User-Agent") or "")[:256]

    def content_type(self) -> str:
        """The request's media type, lowercase, without parameters ("" when none)."""
        return (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()

    def serve_one(self) -> None:
        self.reply_type = JSON
        super().serve_one()

    def fail(self, error: Exception) -> None:
        """Every exception becomes an answer: client errors 4xx, retryable ones 429 / 503 with
        `Retry-After`, anything unplanned 500 (logged, its details kept out of the answer)."""
        retry = {"Retry-After": str(self.limits.retry_after_seconds)}
        headers: dict[str, str] = {}
        if isinstance(error, HttpError):
            code, message = error.status, error.message
            if code in RETRYABLE:
                headers = retry
        else:
            failure, message = failure_of(error, f"{self.command} {self.path}")
            code = _HTTP_STATUS[failure]
            headers = retry if failure.retryable else {}
            if failure is Failure.UNAVAILABLE:
                headers = {"Retry-After": str(self.limits.unavailable_retry_after_seconds)}
        self.answer_status(
            code, _GRPC_CODES.get(code, code_pb2.UNKNOWN), message, self.reply_type, headers
        )

    def error_type(self) -> str:
        """The format of an answer to a request no route took: protobuf when the request is
        protobuf (or a POST with another type, as OTLP/HTTP defaults to protobuf), JSON else."""
        content_type = self.content_type()
        if content_type == PROTOBUF or (self.command == "POST" and content_type != JSON):
            return PROTOBUF
        return JSON

    def refuse_method(self, allowed: str) -> None:
        """405 for a known path asked with another method, in the request's format."""
        self.reply_type = self.error_type()
        self.answer_status(
            405,
            code_pb2.UNIMPLEMENTED,
            f"{self.command} is not allowed here: use {allowed}",
            self.reply_type,
            {"Allow": allowed},
        )
