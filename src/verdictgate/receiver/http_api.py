"""The OTLP side of `verdictgate serve`'s HTTP port: `POST /v1/traces` and the `/v1/runs` JSON
mirror, served by the bounded server of http_server.py.

An export is checked in the order that costs a hostile sender the most and the receiver the
least: path and method, token, content type and encoding, framing; then it is admitted (a slot
and its declared bytes, fairly per client); only then is its body read, decompressed and
decoded, its bytes reserved as they arrive (chunks) or inflate (gzip), held to the same fair
share. A request refused before its body is read is answered at once and its connection closed.

Answers: 401 carries `WWW-Authenticate: Bearer`; a known path with another method is 405 with
`Allow`; retryable refusals (429, 503, including a body that did not arrive in time) carry
`Retry-After`, as the OTLP/HTTP spec has exporters retry 429, 502, 503 and 504 only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import re
import ssl
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from google.rpc import code_pb2, status_pb2

from ..otel.otlp_reading import MalformedRequest
from ..reports.html import page
from .decoding import JSON
from .http_server import RETRYABLE, HttpError, RequestHandler
from .ingest import PROTOBUF, Client, Failure, Ingest, authorized, failure_of
from .pages import RUNS_SHOWN, run_page, runs_page, sign_in_page

logger = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 256 << 10
"""Decompressed bytes produced (and reserved) at a time."""


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


def _gzipped(values: list[str]) -> bool | None:
    """Whether the Content-Encoding header(s) say gzip; None for any coding but gzip and
    identity (and for gzip applied twice)."""
    codings = [c.strip().lower() for value in values for c in value.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return False
    return True if codings in (["gzip"], ["x-gzip"]) else None


_RUN_PATH = re.compile(r"^/v1/runs/([^/?]+)$")
_PAGE_PATH = re.compile(r"^/runs/([^/?]+)$")
PAGE_COOKIE = "verdictgate_pages"
"""The cookie a browser keeps after signing in to the pages (suffixed with the port)."""
TEXT = "text/plain; charset=utf-8"
SIGN_IN_BYTES = 4096
"""The most a sign-in form may send."""


class SignInThrottle:
    """Tries a host may make at the sign-in form: `allowed` a `window` of seconds; beyond, the
    form answers 429 until the oldest try ages out. A try is taken (`attempt`) before the token
    is checked, so parallel guesses cannot slip past, and handed back when it was right. Tries
    are kept in one queue by age and swept as they age out, so memory follows the hosts trying
    now."""

    def __init__(
        self, allowed: int = 10, window: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.allowed, self.window, self._clock = allowed, window, clock
        self._tries: dict[str, deque[float]] = {}
        self._by_age: deque[tuple[float, str]] = deque()
        self._lock = threading.Lock()

    def attempt(self, host: str) -> int:
        """Take a try for `host`: 0 when it may try now, else the seconds it must wait."""
        with self._lock:
            now = self._clock()
            self._sweep(now)
            tries = self._tries.setdefault(host, deque())
            if len(tries) >= self.allowed:
                return max(1, math.ceil(tries[0] + self.window - now))
            tries.append(now)
            self._by_age.append((now, host))
            return 0

    def hosts(self) -> int:
        """Hosts with tries still counted."""
        with self._lock:
            return len(self._tries)

    def succeeded(self, host: str) -> None:
        """The try was the right token: it does not count against the host."""
        with self._lock:
            tries = self._tries.get(host)
            if tries:
                tries.pop()

    def _sweep(self, now: float) -> None:
        while self._by_age and self._by_age[0][0] <= now - self.window:
            when, host = self._by_age.popleft()
            tries = self._tries.get(host)
            while tries and tries[0] <= when:
                tries.popleft()
            if not tries:
                self._tries.pop(host, None)


PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}
"""Every page: nothing loaded or run but the page itself."""
HTML = "text/html; charset=utf-8"
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


class OtlpHttpHandler(RequestHandler):
    """OTLP/HTTP `POST /v1/traces` and the JSON query API (`/v1/runs`, `/v1/runs/{id}`); a bound
    subclass (`http_handler`) supplies the ingest path and the token."""

    ingest: Ingest
    token: str | None = None
    sign_ins: SignInThrottle
    server_version = "verdictgate"
    reply_type = JSON
    """The format of this request's answers: the request's own content type, JSON otherwise."""

    def _send(
        self, code: int, body: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
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

    def _status(
        self,
        code: int,
        grpc_code: int,
        message: str,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if code == 401:
            headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
        status = status_pb2.Status(code=grpc_code, message=message)
        if content_type == JSON:
            body = json.dumps({"code": grpc_code, "message": message}).encode()
        else:
            body, content_type = status.SerializeToString(), PROTOBUF
        self._send(code, body, content_type, headers)

    def authorized(self) -> bool:
        return authorized(self.headers.get("Authorization"), self.token)

    def client(self) -> Client:
        """Who sends this request, for fairness: its peer host and user agent."""
        return str(self.client_address[0]), (self.headers.get("User-Agent") or "")[:256]

    def serve_one(self) -> None:
        self.reply_type = JSON
        super().serve_one()

    def fail(self, error: Exception) -> None:
        """Every exception becomes an answer: client errors 4xx, retryable ones 429 / 503 with
        `Retry-After`, anything unplanned 500 (logged, its details kept out of the answer)."""
        retry = {"Retry-After": str(self.ingest.limits.retry_after_seconds)}
        headers: dict[str, str] = {}
        if isinstance(error, HttpError):
            code, message = error.status, error.message
            if code in RETRYABLE:
                headers = retry
        else:
            failure, message = failure_of(error, f"{self.command} {self.path}")
            code = _HTTP_STATUS[failure]
            headers = retry if failure.retryable else {}
        self._status(
            code, _GRPC_CODES.get(code, code_pb2.UNKNOWN), message, self.reply_type, headers
        )

    def dispatch(self) -> None:
        """Route by path, then method: `POST /v1/traces`, `GET /v1/runs[/{id}]`; another method
        on those paths is 405 with `Allow`, any method elsewhere 404. Whatever a handler lets
        out is answered by `fail` (a store error 503 with `Retry-After`, anything unplanned a
        logged 500 "internal error")."""
        path = urlsplit(self.path).path
        if path == "/" or _PAGE_PATH.match(path):  # the pages: read (GET, HEAD), sign in (POST /)
            if self.command in ("GET", "HEAD"):
                return self._page(path, parse_qs(urlsplit(self.path).query))
            if self.command == "POST" and path == "/":
                return self._sign_in()
            methods = "GET, HEAD, POST" if path == "/" else "GET, HEAD"
            return self._status(
                405, code_pb2.UNIMPLEMENTED, f"use {methods}", JSON, {"Allow": methods}
            )
        allowed = "POST" if path == "/v1/traces" else None
        if path == "/v1/runs" or _RUN_PATH.match(path):
            allowed = "GET"
        if self.command == "POST":
            return self.do_POST() if allowed in ("POST", None) else self._refuse_method(allowed)
        if self.command == "GET":
            return self.do_GET() if allowed in ("GET", None) else self._refuse_method(allowed)
        if allowed is None:
            return self._status(404, code_pb2.NOT_FOUND, "unknown path", self._error_type())
        return self._refuse_method(allowed)

    def _error_type(self) -> str:
        """The format of an answer to a request no handler took: protobuf when the request is
        protobuf (or a POST with another type, as OTLP/HTTP defaults to protobuf), JSON else."""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type == PROTOBUF or (self.command == "POST" and content_type != JSON):
            return PROTOBUF
        return JSON

    def _refuse_method(self, allowed: str) -> None:
        self.reply_type = self._error_type()
        self._status(
            405,
            code_pb2.UNIMPLEMENTED,
            f"{self.command} is not allowed here: use {allowed}",
            self.reply_type,
            {"Allow": allowed},
        )

    def do_POST(self) -> None:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        self.reply_type = JSON if content_type == JSON else PROTOBUF
        if self.path != "/v1/traces":
            return self._status(404, code_pb2.NOT_FOUND, "only /v1/traces", self.reply_type)
        if not self.authorized():
            return self._status(
                401, code_pb2.UNAUTHENTICATED, "a bearer token is required", self.reply_type
            )
        if content_type not in (PROTOBUF, JSON):
            return self._status(
                415,
                code_pb2.INVALID_ARGUMENT,
                "use application/x-protobuf or application/json",
                self.reply_type,
            )
        gzipped = _gzipped(self.headers.get_all("Content-Encoding") or [])
        if gzipped is None:
            return self._status(
                415,
                code_pb2.INVALID_ARGUMENT,
                "unsupported Content-Encoding: use gzip or identity",
                self.reply_type,
                {"Accept-Encoding": "gzip, identity"},
            )
        limit = self.ingest.limits.max_request_bytes
        length = self.request_length(limit)
        with self.ingest.admit(self.client(), length or 0) as ticket:
            body = self.read_body(limit, ticket.reserve)
            if gzipped:
                body = _gunzip(body, limit, ticket.reserve)
            response = self.ingest.export(body, content_type, ticket=ticket)
        if self.reply_type == JSON:
            from google.protobuf.json_format import MessageToJson

            self._send(200, MessageToJson(response).encode(), JSON)
        else:
            self._send(200, response.SerializeToString(), PROTOBUF)

    def do_GET(self) -> None:
        """`/v1/runs` (paged: `page_size`, `page_token`) and `/v1/runs/{id}` (the JSON report)."""
        url = urlsplit(self.path)
        if not self.authorized():
            return self._status(401, code_pb2.UNAUTHENTICATED, "a bearer token is required", JSON)
        if url.path == "/v1/runs":
            query = parse_qs(url.query)
            try:
                size = int(query.get("page_size", ["0"])[0])
                runs, next_token = self.ingest.receiver.store.page(
                    query.get("page_token", [""])[0], size
                )
            except ValueError as error:
                return self._status(400, code_pb2.INVALID_ARGUMENT, str(error), JSON)
            listed = [
                {
                    "run_id": r.run_id,
                    "suite": r.suite,
                    "point": r.point,
                    "status": r.status,
                    "final": r.final,
                    "trials_received": r.received,
                    "trials_expected": r.planned_trials,
                }
                for r in runs
            ]
            document = {"runs": listed, "next_page_token": next_token}
            return self._send(200, json.dumps(document).encode(), JSON)
        match = _RUN_PATH.match(url.path)
        cached = self.ingest.receiver.cached_assessment(unquote(match.group(1))) if match else None
        if cached is None:
            return self._status(404, code_pb2.NOT_FOUND, "unknown run", JSON)
        self._send(200, cached.report("json").encode(), JSON)

    def _page(self, path: str, query: dict[str, list[str]]) -> None:
        """A page for a browser: with the token as the API takes it, or the cookie signing in
        gives; every value escaped."""
        if not (self.authorized() or self._signed_in()):
            headers = {**PAGE_HEADERS, "WWW-Authenticate": "Bearer"}
            return self._send(401, sign_in_page().encode(), HTML, headers)
        receiver = self.ingest.receiver
        if path == "/":
            suite = query.get("suite", [""])[0] or None
            status = query.get("status", [""])[0] or None
            runs = receiver.store.newest(RUNS_SHOWN, suite, status)
            return self._send(200, runs_page(runs, suite, status).encode(), HTML, PAGE_HEADERS)
        match = _PAGE_PATH.match(path)
        assert match is not None
        cached = receiver.cached_assessment(unquote(match.group(1)))
        if cached is None:
            body = page(
                "verdictgate: unknown run", ["<h1>No such run</h1>"], "verdictgate receiver"
            )
            return self._send(404, body.encode(), HTML, PAGE_HEADERS)
        body = run_page(cached.report("html"), cached.assessment.in_progress)
        self._send(200, body.encode(), HTML, PAGE_HEADERS)

    def _sign_in(self) -> None:
        """`POST /` from the sign-in form: the right token sets the page cookie (a value derived
        from the token, never the token) and goes back to the list; a wrong one gets the form
        again. The token never appears in an address, a log or a history."""
        body = self.read_body(SIGN_IN_BYTES)
        given = parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0]
        if self.token is None:  # open pages: nothing to sign in to
            return self._send(303, b"", HTML, {"Location": "/", "Cache-Control": "no-store"})
        host = str(self.client_address[0])
        if wait := self.sign_ins.attempt(host):
            headers = {**PAGE_HEADERS, "Retry-After": str(wait)}
            return self._send(429, b"too many wrong tokens: try again later\n", TEXT, headers)
        if not authorized(f"Bearer {given}", self.token):
            headers = {**PAGE_HEADERS, "WWW-Authenticate": "Bearer"}
            return self._send(401, sign_in_page(failed=True).encode(), HTML, headers)
        self.sign_ins.succeeded(host)
        secure = "; Secure" if isinstance(self.connection, ssl.SSLSocket) else ""
        cookie = f"{self._cookie_name()}={page_key(self.token)}; HttpOnly; SameSite=Strict; Path=/"
        headers = {"Location": "/", "Set-Cookie": cookie + secure, "Cache-Control": "no-store"}
        self._send(303, b"", HTML, headers)

    def _cookie_name(self) -> str:
        """One cookie per receiver: browsers send a host's cookies to every port of it."""
        return f"{PAGE_COOKIE}_{self.connection.getsockname()[1]}"

    def _signed_in(self) -> bool:
        """Whether the request carries this receiver's page cookie (the header is read by hand:
        another application's odd cookie on the same host must not sign anyone out)."""
        if self.token is None:
            return True
        name = self._cookie_name()
        for part in (self.headers.get("Cookie") or "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name and hmac.compare_digest(value.encode(), page_key(self.token).encode()):
                return True
        return False


def page_key(token: str) -> str:
    """The page cookie's value: derived from the token, so the cookie is no bearer token."""
    return hmac.new(token.encode(), b"verdictgate pages", hashlib.sha256).hexdigest()


def http_handler(
    ingest: Ingest, token: str | None, sign_ins: SignInThrottle | None = None
) -> type[OtlpHttpHandler]:
    """The handler class the server instantiates per connection, bound to `ingest`, `token` and
    the sign-in form's throttle."""
    return type(
        "Handler",
        (OtlpHttpHandler,),
        {"ingest": ingest, "token": token, "sign_ins": sign_ins or SignInThrottle()},
    )
