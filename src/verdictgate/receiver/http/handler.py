"""The request handler a BoundedHttpServer drives: one request at a time, each on a free
worker, its body read when the handler decides."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Hashable
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING

from .framing import HEAD_END, MAX_HEAD_BYTES
from .refusals import RETRYABLE, ClientGone, HttpError
from .streams import Reader, Writer

if TYPE_CHECKING:
    from .server import BoundedHttpServer

logger = logging.getLogger(__name__)


class BodyPending(Exception):
    """Raised by `read_body` when the body has not all arrived: the poller reads it without a
    thread, held to `client`'s fair share of the bytes waiting, then serves the request
    again."""

    def __init__(self, client: Hashable, length: int | None, limit: int) -> None:
        super().__init__("the request body is still arriving")
        self.client = client
        self.length = length
        self.limit = limit


def peer_host(address: object) -> str:
    """The peer host of an accepted connection's address."""
    return str(address[0]) if isinstance(address, tuple) and address else str(address)


class RequestHandler(BaseHTTPRequestHandler):
    """Serves one connection's requests, one at a time, each on whichever worker is free.

    Unlike its base class it does not serve the connection from its constructor: the server
    calls `serve_one` for each request whose head has arrived. Subclasses implement `do_*`
    methods as usual, read a body with `request_length` and `read_body`, and may override
    `fail` to answer exceptions in their own format.
    """

    protocol_version = "HTTP/1.1"

    def __init__(
        self,
        sock: socket.socket,
        client_address: tuple[str, int],
        server: BoundedHttpServer,
        reader: Reader,
        writer: Writer,
    ) -> None:  # the base constructor would serve the whole connection at once
        self.request = self.connection = sock
        self.client_address = client_address
        self.server = server  # type: ignore[assignment]
        self.limits = server.limits
        self.rfile = reader  # type: ignore[assignment]
        self.wfile = writer  # type: ignore[assignment]
        self._reader = reader
        self._writer = writer
        self.close_connection = True
        self.responded = False
        self._parsed = False
        self._body_read = False
        self._expect_continue = False
        self.pending: BodyPending | None = None
        """Set when the request waits for its body (see `read_body`)."""

    def log_message(self, format: str, *args: object) -> None:
        """Requests go to the DEBUG log, never to stderr line by line (the base class's way,
        which made every scrape a line of the receiver's log)."""
        logger.debug("http: " + format, *args)

    def client(self) -> Hashable:
        """Who sends this request, for fairness among the bodies waiting: its peer host
        (subclasses may tell senders on one host apart)."""
        return peer_host(self.client_address)

    def serve_one(self) -> None:
        """Serve the request whose head is in the buffer; every exception becomes an answer
        (or, if the client is gone, a closed connection). A request whose body is still on
        its way sets `pending` instead, its head left in the buffer to be served again."""
        self.close_connection = True
        self.responded = self._parsed = self._body_read = self._expect_continue = False
        self.pending = None
        reader = self._reader
        end = HEAD_END.search(reader.buffer)
        head = bytes(reader.buffer[: end.end()]) if end is not None else b""
        try:
            try:
                self.handle_one_request()
            except BodyPending as pending:
                reader.buffer[0:0] = head
                self.pending = pending
                return
            except ClientGone:
                raise
            except Exception as error:
                self.close_connection = True
                if self.responded:
                    logger.debug("http: failed after answering", exc_info=error)
                else:
                    self._writer.discard()
                    self.fail(error)
            self.wfile.flush()
        except ClientGone:
            self.close_connection = True
        finally:
            reader.let_go()
        if self.body_left():
            self.close_connection = True

    def fail(self, error: Exception) -> None:
        """Answer an exception a handler let out (subclasses give the body their format)."""
        status = error.status if isinstance(error, HttpError) else 500
        message = error.message if isinstance(error, HttpError) else "internal error"
        if status == 500:
            logger.error("http: unexpected error", exc_info=error)
        self.send_error(status, message)

    def handle_one_request(self) -> None:
        """Read the request line and head (already buffered by the poller), then `dispatch`."""
        self.raw_requestline = self.rfile.readline(MAX_HEAD_BYTES + 1)
        if not self.raw_requestline:
            self.close_connection = True
            return
        if not self.parse_request():
            return  # answered (400, 505, 431) or an empty line: the connection closes
        self.dispatch()
        self.wfile.flush()

    def dispatch(self) -> None:
        """Call the request's `do_<METHOD>` (501 when there is none); subclasses may route by
        path and method instead."""
        method = getattr(self, "do_" + self.command, None)
        if method is None:
            self.send_error(501, f"unsupported method {self.command!r}")
            return
        method()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A plain-text error answer, and the connection closes (not the base class's HTML page,
        and with a status line even when the request line could not be parsed)."""
        self.log_error("code %d, message %s", code, message)
        reason = self.responses.get(code, ("Error",))[0]
        body = f"{message or reason}\n".encode("utf-8", "replace")
        if self.command == "HEAD":
            body = b""
        self.close_connection = True
        self.responded = True
        extra = ""
        if code in RETRYABLE:
            extra = f"Retry-After: {self.limits.retry_after_seconds}\r\n"
        self.wfile.write(
            f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n".encode("latin-1")
            + body
        )

    def parse_request(self) -> bool:
        self._parsed = super().parse_request()
        if self._parsed and self.request_version == "HTTP/0.9":  # `GET /path`, no version
            self._parsed = False
            self.send_error(400, "HTTP/0.9 is not supported")
        return self._parsed

    def handle_expect_100(self) -> bool:
        """`100 Continue` is sent only when the body is about to be read, so a request refused
        before (unauthenticated, busy) is answered without the client sending its body."""
        self._expect_continue = True
        return True

    def send_response(self, code: int, message: str | None = None) -> None:
        self.responded = True
        super().send_response(code, message)

    def body_left(self) -> bool:
        """Whether this request has a body that was not read (its connection then closes)."""
        if not self._parsed or self._body_read:
            return False
        if self.headers.get("Transfer-Encoding") is not None:
            return True
        length = self.headers.get("Content-Length")
        return length is not None and length.strip() != "0"

    def will_close(self) -> bool:
        """Whether the connection closes after this answer (then say `Connection: close`)."""
        if self.body_left():
            self.close_connection = True
        return self.close_connection

    def request_length(self, limit: int) -> int | None:
        """The body's declared length, None when it is chunked; raises HttpError: 400 for
        conflicting or malformed framing, 411 when there is none, 413 over `limit`, 501 for a
        transfer coding other than chunked."""
        codings = [
            coding.strip().lower()
            for value in self.headers.get_all("Transfer-Encoding") or []
            for coding in value.split(",")
        ]
        lengths = self.headers.get_all("Content-Length") or []
        if codings:
            if codings != ["chunked"]:
                raise HttpError(501, "only the chunked transfer coding is supported")
            if lengths:
                raise HttpError(400, "Content-Length and Transfer-Encoding together")
            return None
        if not lengths:
            raise HttpError(411, "Content-Length is required")
        values = {value.strip() for value in lengths}
        value = next(iter(values))
        if len(values) != 1 or not (value.isascii() and value.isdigit()):
            raise HttpError(400, "invalid Content-Length")
        length = int(value)
        if length > limit:
            raise HttpError(413, "request too large")
        return length

    def read_body(self, limit: int, reserve: Callable[[int], None] | None = None) -> bytes:
        """The request body: `Content-Length` bytes or the decoded chunks, at most `limit`.

        A `Content-Length` body that came with its head is returned at once. Otherwise (and
        for every chunked body) this raises `BodyPending` (after sending `100 Continue` if the
        client asked for it): the poller
        reads the body, holding no thread, within the body timeout, and the request is served
        again from its head, this call then returning the body (`reserve` is told of a
        chunked body's decoded bytes, and may refuse them by raising). Raises HttpError (400,
        411, 413, 501, 503 when too slow) or what refused the body's bytes while waiting."""
        length = self.request_length(limit)
        reader = self._reader
        if reader.refusal is not None:
            raise reader.refusal
        if reader.body is not None:
            body = reader.body
            if length is None and reserve is not None:
                reserve(len(body))
        elif length is not None and len(reader.buffer) >= length:
            body = reader.take(length)
        else:
            if self._expect_continue:
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.wfile.flush()
            raise BodyPending(self.client(), length, limit)
        reader.body = None
        self._body_read = True
        return body
