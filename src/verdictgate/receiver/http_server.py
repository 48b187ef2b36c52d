"""A bounded HTTP/1.1 server that holds against any sender.

- **Waiting costs no thread.** One poller thread accepts connections and reads, without
  blocking, what they send: TLS handshakes, request heads, request bodies and idle keep-alive
  connections all wait there, each under a deadline. A connection must complete its head
  within `header_timeout_seconds` of its accept (or of its first byte after an idle
  keep-alive) and is closed otherwise, so silent, slow and dribbling sockets cost a file
  descriptor for a few seconds and nothing more. A keep-alive connection idle for
  `idle_timeout_seconds` is closed. A head over 32 KiB is answered 431.
- **Bounded work.** A listen backlog of `http_backlog`; at most `max_connections` open, and
  never more than half the process's file limit (`connection_cap`): one more is answered 503
  with `Retry-After` and closed. At most `max_connections_per_host` from one peer address:
  one more closes one of the host's connections waiting on the poller (an idle keep-alive or
  a lingering close first, else the one waiting longest for its head or body, told 503), so
  stalled neighbours never lock out a sender behind the same address; only a host whose
  connections are all being served is refused. A request ready to
  be served waits in a queue of `http_queue` for one of `http_workers` threads; when the queue
  is full it is answered 503 with `Retry-After` at once.
- **The handler decides when to read the body** (after it checked the sender and admitted the
  request), with `read_body`. A body that came with its head is there at once; otherwise the
  poller reads it (`Content-Length` bytes or chunked transfer coding, decoded as it arrives,
  strict and bounded), its bytes counted as they arrive in the client's fair share of
  `max_bytes_in_flight`, holding no worker, and the request is then served again from its
  head. A body not whole within `body_timeout_seconds` is answered 503 with `Retry-After`
  (the OTLP/HTTP spec has exporters retry 429, 502, 503 and 504 only, and a body cut short by
  the network is worth retrying). Responses are written within the same timeout.
- **Plain errors.** A request line or head the server cannot parse (non-HTTP bytes, HTTP/0.9,
  a bad version) is answered with a plain-text 400 (505 for HTTP/2 and later) and closed.
- **Lingering close.** A connection closed after an answer (for instance a refusal whose body
  was never read) has its write side shut and whatever the client still sends read and dropped
  by the poller for up to two seconds, so the client reads the answer rather than a reset.

Handlers subclass `RequestHandler` (a `BaseHTTPRequestHandler` driven one request at a time);
every exception a handler lets out becomes an answer through its `fail` method.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import queue
import re
import select
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from .ingest import Busy, Gate, Limits, Ticket, report_unexpected

logger = logging.getLogger(__name__)


def file_limit() -> int | None:
    """The process's soft limit on open files, None when unknown or unlimited."""
    try:
        import resource
    except ImportError:  # not on Unix
        return None
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else soft


def connection_cap(configured: int) -> int:
    """The HTTP connections allowed open at once: `configured`, but never more than half the
    process's file limit, so idle sockets leave descriptors for gRPC, the store, the decoders."""
    limit = file_limit()
    return configured if limit is None else max(1, min(configured, limit // 2))


MAX_HEAD_BYTES = 32 << 10
"""The request line and headers together."""
LINGER_SECONDS = 2.0
KEEP_ALIVE_WAIT = 0.002
"""How long a worker that just answered waits for the same connection's next request."""
_RECV = 64 << 10
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(;[^\r\n]*)?\r?\n")
_MAX_CHUNK_LINE = 4096
_MAX_TRAILER_LINES = 32


class HttpError(Exception):
    """A request the HTTP layer refuses, with its status (bad framing, too large, too slow)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ClientGone(Exception):
    """The client closed or reset its connection, or stopped reading: nothing more to say."""


RETRYABLE = frozenset({429, 502, 503, 504})
"""The statuses OTLP/HTTP exporters retry (after `Retry-After`); the spec has every other
4xx and 5xx dropped."""


def _timed_out() -> HttpError:
    """A body that did not arrive in time: 503, so an exporter retries it (408 is not among the
    statuses the OTLP/HTTP spec retries)."""
    return HttpError(503, "the request body did not arrive in time, retry later")


class _Reader:
    """The connection's input, as the poller collected it: the request head in `buffer`
    (and whatever followed it), and once read, the request's `body` (decoded when chunked) or
    the `refusal` its reading met. Handlers only ever read what has arrived."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.body: bytes | None = None
        self.refusal: Exception | None = None
        self.held: Ticket | None = None
        """The arriving-bodies share the body still holds: kept until its handler is done with
        it (and has taken its bytes into its own admission), so a whole body waiting for a
        worker stays counted."""

    def let_go(self) -> None:
        """Forget the body read, and what it held of the arriving-bodies budget."""
        self.body = self.refusal = None
        if self.held is not None:
            self.held.release()
            self.held = None

    def take(self, size: int) -> bytes:
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def readline(self, limit: int = -1) -> bytes:
        """A line with its newline, at most `limit` bytes; what is left when none is whole."""
        end = self.buffer.find(b"\n")
        if end >= 0 and (limit < 0 or end < limit):
            return self.take(end + 1)
        return self.take(len(self.buffer) if limit < 0 else limit)

    def pump(self) -> bool:
        """Take what has arrived without blocking (the socket is non-blocking); False at the
        end of the stream or on an error."""
        while len(self.buffer) <= MAX_HEAD_BYTES:
            try:
                data = self.sock.recv(_RECV)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return True
            except (OSError, ValueError):
                return False
            if not data:
                return False
            self.buffer += data
        return True


class ChunkedBody:
    """A chunked body decoded as its bytes arrive, strictly and within `limit` decoded bytes:
    `feed` takes each piece received, in order, and resumes where the last one stopped, so
    decoding is linear however the chunks are cut."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.body = bytearray()
        self.done = False
        self._left = -1
        """Bytes of the current chunk still to come; 0: its line end; -1: a size line; -2: the
        trailer fields."""
        self._partial = b""
        self._trailers = 0

    def feed(self, data: bytes) -> bytes:
        """Decode what `data` completes; once the body is whole, the bytes after it (the next
        request's). Raises HttpError: 400 for bad framing, 413 beyond `limit`."""
        data, self._partial = self._partial + data, b""
        at = 0
        while at < len(data) and not self.done:
            if self._left > 0:
                piece = min(self._left, len(data) - at)
                self.body += data[at : at + piece]
                at += piece
                self._left -= piece
            elif self._left == 0:
                if data.startswith(b"\r\n", at) or data.startswith(b"\n", at):
                    at += 2 if data[at] == 13 else 1
                    self._left = -1
                elif data[at:] != b"\r":
                    raise HttpError(400, "malformed chunked body")
                else:
                    break
            else:
                end = data.find(b"\n", at, at + _MAX_CHUNK_LINE)
                if end < 0:
                    if len(data) - at >= _MAX_CHUNK_LINE:
                        raise HttpError(400, "malformed chunked body")
                    break
                line, at = data[at : end + 1], end + 1
                self._line(line)
        if self.done:
            return data[at:]
        self._partial = data[at:]
        return b""

    def _line(self, line: bytes) -> None:
        if self._left == -2:  # trailer fields are read and ignored
            self._trailers += 1
            if line in (b"\r\n", b"\n"):
                self.done = True
            elif self._trailers >= _MAX_TRAILER_LINES:
                raise HttpError(400, "malformed chunked body trailer")
            return
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            raise HttpError(400, "malformed chunked body")
        size = int(match.group(1), 16)
        if len(self.body) + size > self.limit:
            raise HttpError(413, "request too large")
        self._left = size if size else -2


class BodyPending(Exception):
    """Raised by `read_body` when the body has not all arrived: the poller reads it without a
    thread, held to `client`'s fair share of the bytes waiting, then serves the request
    again."""

    def __init__(self, client: Any, length: int | None, limit: int) -> None:
        super().__init__("the request body is still arriving")
        self.client = client
        self.length = length
        self.limit = limit


class _Writer:
    """The connection's output: writes are gathered and sent on `flush` (one send for a
    response's head and body), within `timeout` seconds in all."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self._sock = sock
        self._timeout = timeout
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._pending.append(bytes(data))
        return len(data)

    def discard(self) -> None:
        """Forget what was written and not sent (a failed answer, replaced by another)."""
        self._pending.clear()

    def flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        try:
            self._sock.settimeout(self._timeout)
            self._sock.sendall(data)  # the timeout bounds the whole call
        except (OSError, ValueError):
            raise ClientGone() from None


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
        client_address: Any,
        server: BoundedHttpServer,
        reader: _Reader,
        writer: _Writer,
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

    def log_message(self, format: str, *args: Any) -> None:
        """Requests go to the DEBUG log, never to stderr line by line (the base class's way,
        which made every scrape a line of the receiver's log)."""
        logger.debug("http: " + format, *args)

    def client(self) -> Any:
        """Who sends this request, for fairness among the bodies waiting: its peer host
        (subclasses may tell senders on one host apart)."""
        return _host(self.client_address)

    def serve_one(self) -> None:
        """Serve the request whose head is in the buffer; every exception becomes an answer
        (or, if the client is gone, a closed connection). A request whose body is still on
        its way sets `pending` instead, its head left in the buffer to be served again."""
        self.close_connection = True
        self.responded = self._parsed = self._body_read = self._expect_continue = False
        self.pending = None
        reader = self._reader
        end = _HEAD_END.search(reader.buffer)
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


_HANDSHAKE, _HEAD, _BODY, _BUSY, _LINGER, _CLOSED = range(6)
_WAITING = (_HANDSHAKE, _HEAD, _BODY, _LINGER)
"""The states in which a connection waits on the poller, under a deadline."""
_CLOSE, _KEEP, _AWAIT = range(3)
"""What a worker hands a connection back for: closing, its next request, or its body."""


class _BodyWait:
    """A request body the poller is reading: its bytes held in a share of the budget."""

    __slots__ = ("chunks", "length", "raw", "received", "ticket")

    def __init__(self, pending: BodyPending, ticket: Ticket) -> None:
        self.length = pending.length
        self.chunks = ChunkedBody(pending.limit) if pending.length is None else None
        self.ticket = ticket
        self.received = bytearray()
        """A `Content-Length` body's bytes so far."""
        self.raw = 0
        """Bytes received for a chunked body, framing included."""


class _Connection:
    __slots__ = (
        "address",
        "deadline",
        "discarded",
        "handler",
        "host",
        "idle",
        "progress",
        "reader",
        "scanned",
        "sock",
        "state",
        "wait",
        "writer",
    )

    def __init__(
        self, sock: socket.socket, address: Any, state: int, deadline: float, write_timeout: float
    ) -> None:
        self.sock = sock
        self.address = address
        self.host = _host(address)
        self.state = state
        self.deadline = deadline
        self.reader = _Reader(sock)
        self.writer = _Writer(sock, write_timeout)
        self.handler: RequestHandler | None = None
        self.idle = False
        """Kept alive and waiting for the first byte of its next request."""
        self.scanned = 0
        self.discarded = 0
        self.wait: _BodyWait | None = None
        self.progress = time.monotonic()
        """When its head or body last brought bytes (or it began to wait for them)."""


def _host(address: Any) -> str:
    """The peer host of an accepted connection's address."""
    return str(address[0]) if isinstance(address, tuple) and address else str(address)


STALLED_SECONDS = 1.0
"""A head or body that brought no byte for this long is stalled, and may be evicted."""


def _first_to_evict(waiting: dict[_Connection, None], now: float) -> _Connection | None:
    """Of a host's waiting connections (the longest waiting first), the one to close for a new
    one: an idle keep-alive or a lingering close if there is one (closing it costs its client
    nothing), else the longest waiting of those whose head or body is stalled; None when every
    one is making progress (the newcomer is then refused: no upload is cut for it)."""
    stalled = None
    for connection in waiting:
        if connection.idle or connection.state == _LINGER:
            return connection
        if stalled is None and now - connection.progress >= STALLED_SECONDS:
            stalled = connection
    return stalled


def _busy_answer(retry_after: int) -> bytes:
    body = b"receiver busy, retry later\n"
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
        b"Retry-After: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (retry_after, len(body), body)
    )


_TOO_LARGE_HEAD = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class BoundedHttpServer:
    """Serves `handler_class` requests with a poller thread (`serve_forever`) and a fixed pool
    of worker threads, within `limits` (see the module docstring)."""

    def __init__(
        self,
        address: tuple[str, int],
        handler_class: type[RequestHandler],
        limits: Limits,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.limits = limits
        self.max_connections = connection_cap(limits.max_connections)
        """`max_connections` in effect (see `connection_cap`)."""
        self._per_host: dict[str, int] = {}
        self._waiting: dict[str, dict[_Connection, None]] = {}
        """Per host, its connections waiting on the poller, the longest waiting first."""
        self._bodies = Gate(
            self.max_connections,
            max(limits.max_bytes_in_flight, limits.max_request_bytes),
            limits.max_request_bytes,
        )
        """The bytes of bodies still arriving, shared fairly among clients."""
        self._evicted = 0
        self._warned_evict = False
        self._handler_class = handler_class
        self._tls = tls
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.create_server(
            address, family=family, backlog=max(1, limits.http_backlog)
        )
        self._listener.setblocking(False)
        self.server_address = self._listener.getsockname()
        self._selector = selectors.DefaultSelector()
        self._waker, self._wake_end = socket.socketpair()
        for end in (self._waker, self._wake_end):
            end.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_end, selectors.EVENT_READ, self._wake_end)
        self._connections: set[_Connection] = set()
        self._deadlines: list[tuple[float, int, _Connection]] = []
        self._sequence = itertools.count()
        self._queue: queue.Queue[_Connection | None] = queue.Queue(max(1, limits.http_queue))
        self._returned: deque[tuple[_Connection, int]] = deque()
        self._stopping = False
        self._serving = False
        self._stopped = threading.Event()
        self._accept_paused_until = 0.0
        self._warned_accept = False
        self._warned_host = False
        self._workers = [
            threading.Thread(target=self._work, name=f"verdictgate-http-{n}", daemon=True)
            for n in range(max(1, limits.http_workers))
        ]
        for worker in self._workers:
            worker.start()

    def open_connections(self) -> int:
        """Connections open now (as the poller last left them)."""
        return len(self._connections)

    def queued(self) -> int:
        """Requests whose head is complete, waiting for a worker."""
        return self._queue.qsize()

    def waiting_connections(self) -> int:
        """Connections waiting on the poller (a handshake, a head or body arriving, an idle
        keep-alive, a lingering close), as the poller last left them."""
        return sum(len(waiting) for waiting in list(self._waiting.values()))

    def awaiting_bodies(self) -> tuple[int, int]:
        """(requests, bytes): requests whose body the poller is reading, and the bytes of
        those bodies received so far."""
        requests, received, _ = self._bodies.in_use()
        return requests, received

    def evicted_connections(self) -> int:
        """Connections closed to make room for a new one from the same host at its cap."""
        return self._evicted

    # -- the poller thread ---------------------------------------------------------------

    def serve_forever(self) -> None:
        self._serving = True
        try:
            while not self._stopping:
                now = time.monotonic()
                timeout = 5.0
                if self._deadlines:
                    timeout = min(timeout, max(0.0, self._deadlines[0][0] - now))
                if self._accept_paused_until:
                    timeout = min(timeout, max(0.0, self._accept_paused_until - now))
                for key, _ in self._selector.select(timeout):
                    self._guarded(self._event, key.data)
                self._guarded(self._expire)
                self._guarded(self._resume_accepting)
        finally:
            for connection in list(self._connections):
                if connection.state != _BUSY:
                    self._close(connection)
            self._stopped.set()

    def _event(self, data: Any) -> None:
        if data is None:
            self._accept()
        elif data is self._wake_end:
            self._take_back()
        else:
            self._ready(data)

    def _guarded(self, step: Callable[..., None], *args: Any) -> None:
        """Run one step of the poller: an error in it closes the connection concerned (if
        any) and is logged, never stopping the server."""
        try:
            step(*args)
        except Exception as error:
            report_unexpected(error, "the HTTP poller")
            for connection in args:
                if isinstance(connection, _Connection):
                    self._close(connection)

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of file descriptors or memory: try again shortly
                if not self._warned_accept:
                    self._warned_accept = True
                    logger.warning("verdictgate: http accept failed: %s", error)
                self._selector.unregister(self._listener)
                self._accept_paused_until = time.monotonic() + 0.1
                return
            sock.setblocking(False)
            host = _host(address)
            if len(self._connections) >= self.max_connections:
                self._refuse_connection(sock)
                continue
            if self._per_host.get(host, 0) >= self.limits.max_connections_per_host:
                waiting = self._waiting.get(host)
                victim = _first_to_evict(waiting, time.monotonic()) if waiting else None
                if victim is None:
                    if not self._warned_host:
                        self._warned_host = True
                        logger.warning(
                            "verdictgate: %s holds %d HTTP connections, all served or making "
                            "progress (max_connections_per_host); more are refused (logged once)",
                            host,
                            self.limits.max_connections_per_host,
                        )
                    self._refuse_connection(sock)
                    continue
                self._evict(victim)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            deadline = time.monotonic() + self.limits.header_timeout_seconds
            state = _HEAD
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                state = _HANDSHAKE
            connection = _Connection(
                sock, address, state, deadline, self.limits.body_timeout_seconds
            )
            self._connections.add(connection)
            self._per_host[host] = self._per_host.get(host, 0) + 1
            self._wait_in(connection)
            self._watch(connection, selectors.EVENT_READ)
            self._set_deadline(connection, deadline)

    def _wait_in(self, connection: _Connection) -> None:
        """The connection waits on the poller from now (the last of its host's to evict)."""
        waiting = self._waiting.setdefault(connection.host, {})
        waiting.pop(connection, None)
        waiting[connection] = None

    def _stop_waiting(self, connection: _Connection) -> None:
        waiting = self._waiting.get(connection.host)
        if waiting is not None:
            waiting.pop(connection, None)
            if not waiting:
                del self._waiting[connection.host]

    def _evict(self, connection: _Connection) -> None:
        """Close a waiting connection of a host at its cap (`_first_to_evict`), so the host's
        new connection is taken: stalled heads and bodies and idle keep-alives never lock
        out a sender behind the same address. A request still arriving is told 503."""
        self._evicted += 1
        if not self._warned_evict:
            self._warned_evict = True
            logger.warning(
                "verdictgate: %s is at its %d HTTP connections (max_connections_per_host): "
                "an idle or stalled one is closed for each new one (logged once)",
                connection.host,
                self.limits.max_connections_per_host,
            )
        if connection.state in (_HEAD, _BODY) and not connection.idle:
            self._answer_and_close(connection, _busy_answer(self.limits.retry_after_seconds))
        else:
            self._close(connection)

    def _resume_accepting(self) -> None:
        if self._accept_paused_until and time.monotonic() >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, None)

    def _refuse_connection(self, sock: socket.socket) -> None:
        """One connection too many: a quick 503 (not over TLS: no handshake yet), then close."""
        try:
            if self._tls is None:
                sock.send(_busy_answer(self.limits.retry_after_seconds))
                sock.shutdown(socket.SHUT_WR)
                sock.recv(_RECV)  # what already arrived, so closing does not reset
        except OSError:
            pass
        sock.close()

    def _watch(self, connection: _Connection, events: int) -> None:
        try:
            self._selector.modify(connection.sock, events, connection)
        except KeyError:
            self._selector.register(connection.sock, events, connection)

    def _unwatch(self, connection: _Connection) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(connection.sock)

    def _set_deadline(self, connection: _Connection, deadline: float) -> None:
        connection.deadline = deadline
        heapq.heappush(self._deadlines, (deadline, next(self._sequence), connection))
        if len(self._deadlines) > 4 * len(self._connections) + 64:  # drop stale entries
            self._deadlines = [
                (c.deadline, next(self._sequence), c)
                for c in self._connections
                if c.state in _WAITING
            ]
            heapq.heapify(self._deadlines)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, connection = heapq.heappop(self._deadlines)
            if connection.deadline != deadline or connection.state not in _WAITING:
                continue
            if connection.state == _BODY:
                self._serve_again(connection, _timed_out())
            else:
                self._close(connection)

    def _ready(self, connection: _Connection) -> None:
        if connection.state == _HANDSHAKE:
            self._handshake(connection)
        elif connection.state == _HEAD:
            before = len(connection.reader.buffer)
            alive = connection.reader.pump()
            if len(connection.reader.buffer) > before:
                connection.progress = time.monotonic()
            self._check_head(connection, alive)
        elif connection.state == _BODY:
            self._read_body(connection)
        elif connection.state == _LINGER:
            self._discard(connection)

    def _handshake(self, connection: _Connection) -> None:
        sock = connection.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            return self._watch(connection, selectors.EVENT_READ)
        except ssl.SSLWantWriteError:
            return self._watch(connection, selectors.EVENT_WRITE)
        except (OSError, ValueError) as error:
            logger.debug("http: TLS handshake with %s failed: %s", connection.address, error)
            return self._close(connection)
        connection.state = _HEAD
        self._watch(connection, selectors.EVENT_READ)
        self._check_head(connection, connection.reader.pump())

    def _check_head(self, connection: _Connection, alive: bool) -> None:
        buffer = connection.reader.buffer
        if buffer:
            if connection.idle:  # the next request began: its head is now due
                connection.idle = False
                self._set_deadline(
                    connection, time.monotonic() + self.limits.header_timeout_seconds
                )
            end = _HEAD_END.search(buffer, max(0, connection.scanned - 3))
            if end is not None and end.start() <= MAX_HEAD_BYTES:
                return self._dispatch(connection)
            connection.scanned = len(buffer)
            if len(buffer) > MAX_HEAD_BYTES:
                return self._answer_and_close(connection, _TOO_LARGE_HEAD)
        if not alive:
            self._close(connection)

    def _dispatch(self, connection: _Connection) -> None:
        self._unwatch(connection)
        self._stop_waiting(connection)
        connection.state = _BUSY
        connection.scanned = 0
        try:
            self._queue.put_nowait(connection)
        except queue.Full:
            self._answer_and_close(connection, _busy_answer(self.limits.retry_after_seconds))

    def _answer_and_close(self, connection: _Connection, answer: bytes) -> None:
        try:
            connection.sock.setblocking(False)
            connection.sock.send(answer)
        except (OSError, ValueError):
            return self._close(connection)
        self._linger(connection)

    def _linger(self, connection: _Connection) -> None:
        """Shut the write side and drop what the client still sends until it closes."""
        self._drop_body(connection)
        try:
            connection.sock.setblocking(False)
            connection.sock.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):
            return self._close(connection)
        connection.state = _LINGER
        connection.reader.buffer.clear()
        self._wait_in(connection)
        self._watch(connection, selectors.EVENT_READ)
        self._set_deadline(connection, time.monotonic() + LINGER_SECONDS)
        self._discard(connection)

    def _discard(self, connection: _Connection) -> None:
        while connection.discarded < self.limits.max_request_bytes:
            try:
                data = connection.sock.recv(_RECV)
            except (BlockingIOError, InterruptedError):
                return
            except (OSError, ValueError):
                break
            if not data:
                break
            connection.discarded += len(data)
        self._close(connection)

    def _close(self, connection: _Connection) -> None:
        if connection.state == _CLOSED:
            return
        connection.state = _CLOSED
        self._unwatch(connection)
        self._stop_waiting(connection)
        self._drop_body(connection)
        if connection in self._connections:
            self._connections.discard(connection)
            left = self._per_host.get(connection.host, 1) - 1
            if left > 0:
                self._per_host[connection.host] = left
            else:
                self._per_host.pop(connection.host, None)
        with contextlib.suppress(OSError):
            connection.sock.close()

    def _take_back(self) -> None:
        try:
            while self._wake_end.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while self._returned:
            connection, outcome = self._returned.popleft()
            if connection.state == _BUSY:
                self._guarded(self._take_back_one, connection, outcome)

    def _take_back_one(self, connection: _Connection, outcome: int) -> None:
        """A connection a worker handed back: close it, read its body, or park it."""
        if self._stopping:
            self._close(connection)
        elif outcome == _AWAIT:
            self._await_body(connection)
        elif outcome == _CLOSE:
            if connection.handler is not None and connection.handler.responded:
                self._linger(connection)
            else:
                self._close(connection)
        else:
            self._park(connection)

    def _park(self, connection: _Connection) -> None:
        """Keep a connection alive between requests, without a thread."""
        try:
            connection.sock.setblocking(False)
        except (OSError, ValueError):
            return self._close(connection)
        connection.state = _HEAD
        connection.idle = True
        self._wait_in(connection)
        self._watch(connection, selectors.EVENT_READ)
        self._set_deadline(connection, time.monotonic() + self.limits.idle_timeout_seconds)
        alive = True
        if isinstance(connection.sock, ssl.SSLSocket) and connection.sock.pending():
            alive = connection.reader.pump()  # decrypted bytes the selector cannot see
        self._check_head(connection, alive)

    # -- bodies, read by the poller -------------------------------------------------------

    def _await_body(self, connection: _Connection) -> None:
        """Read the body of the request a worker found incomplete, without a thread, its
        bytes held to the client's share of the budget, within the body timeout."""
        handler = connection.handler
        assert handler is not None and handler.pending is not None
        pending, handler.pending = handler.pending, None
        try:
            ticket = self._bodies.admit(pending.client, 0)
        except Busy as busy:
            return self._serve_again(connection, busy)
        try:
            connection.sock.setblocking(False)  # the worker's writes left it blocking
        except (OSError, ValueError):
            ticket.release()
            return self._close(connection)
        connection.wait = _BodyWait(pending, ticket)
        connection.state = _BODY
        connection.progress = time.monotonic()
        self._wait_in(connection)
        self._set_deadline(connection, time.monotonic() + self.limits.body_timeout_seconds)
        buffer = connection.reader.buffer
        head = _HEAD_END.search(buffer)
        start = head.end() if head is not None else len(buffer)
        arrived = bytes(buffer[start:])
        del buffer[start:]
        if arrived and not self._take_body(connection, arrived):
            return
        self._watch(connection, selectors.EVENT_READ)
        self._read_body(connection)

    def _read_body(self, connection: _Connection) -> None:
        wait = connection.wait
        for turn in itertools.count():
            if wait is None or connection.state != _BODY:
                return
            if turn >= 16 and not (
                isinstance(connection.sock, ssl.SSLSocket) and connection.sock.pending()
            ):
                return  # other connections get their turn (the selector wakes this again)
            want = _RECV if wait.length is None else min(_RECV, wait.length - len(wait.received))
            try:
                data = connection.sock.recv(want)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except (OSError, ValueError):
                return self._close(connection)
            if not data:
                return self._close(connection)
            if not self._take_body(connection, data):
                return

    def _take_body(self, connection: _Connection, data: bytes) -> bool:
        """Add bytes received to the body; False once the request went back to a worker,
        whole or refused."""
        wait = connection.wait
        assert wait is not None
        connection.progress = time.monotonic()
        try:
            if wait.chunks is None:
                assert wait.length is not None
                piece = data[: wait.length - len(wait.received)]
                wait.ticket.reserve(len(piece))
                wait.received += piece
                connection.reader.buffer += data[len(piece) :]  # the next request's
                if len(wait.received) < wait.length:
                    return True
                body = bytes(wait.received)
            else:
                wait.raw += len(data)
                if wait.raw > 4 * wait.chunks.limit + _RECV:  # framing far beyond the data
                    raise HttpError(413, "request too large")
                before = len(wait.chunks.body)
                after = wait.chunks.feed(data)
                wait.ticket.reserve(len(wait.chunks.body) - before)
                if not wait.chunks.done:
                    return True
                connection.reader.buffer += after
                body = bytes(wait.chunks.body)
        except (Busy, HttpError) as refusal:
            self._serve_again(connection, refusal)
            return False
        connection.reader.body = body
        self._serve_again(connection, None)
        return False

    def _drop_body(self, connection: _Connection) -> None:
        """Let go of a body being read or read (and its share of the budget): the connection
        is closing. Never while a worker holds it: workers' connections are not closed here."""
        if connection.wait is not None:
            connection.wait.ticket.release()
            connection.wait = None
        connection.reader.let_go()

    def _serve_again(self, connection: _Connection, refusal: Exception | None) -> None:
        """Hand the request back to a worker, served again from its head: with its body in
        the reader, or with what refused it (which the handler answers in its own format)."""
        if connection.wait is not None:
            connection.reader.held = connection.wait.ticket
            connection.wait = None
        connection.reader.refusal = refusal
        self._dispatch(connection)

    # -- the workers --------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            connection = self._queue.get()
            if connection is None:
                return
            outcome = _CLOSE
            try:
                outcome = self._serve(connection)
            except BaseException:  # the handler answers what it can; this is a last resort
                logger.exception("verdictgate: http worker failed")
            self._returned.append((connection, outcome))
            with contextlib.suppress(OSError):
                self._waker.send(b"\0")

    def _serve(self, connection: _Connection) -> int:
        handler = connection.handler
        if handler is None:
            handler = connection.handler = self._handler_class(
                connection.sock, connection.address, self, connection.reader, connection.writer
            )
        while True:
            handler.serve_one()
            if handler.pending is not None and not self._stopping:
                return _AWAIT
            if handler.close_connection or self._stopping:
                return _CLOSE
            if not self._queue.empty() or not self._next_request_here(connection):
                return _KEEP  # back to the poller until its next request arrives

    def _next_request_here(self, connection: _Connection) -> bool:
        """Whether the connection's next request head arrives within `KEEP_ALIVE_WAIT`: a
        sender that exports back to back is then served on, without a round trip through the
        poller (taken only when no other request waits for a worker)."""
        try:
            if hasattr(select, "poll"):  # no FD_SETSIZE limit
                waiting = select.poll()
                waiting.register(connection.sock, select.POLLIN)
                ready = bool(waiting.poll(KEEP_ALIVE_WAIT * 1000))
            else:
                ready = bool(select.select([connection.sock], [], [], KEEP_ALIVE_WAIT)[0])
            if not ready:
                return False
            connection.sock.setblocking(False)
        except (OSError, ValueError):
            return False
        connection.reader.pump()
        end = _HEAD_END.search(connection.reader.buffer)
        if end is None or end.start() > MAX_HEAD_BYTES:
            return False  # the poller waits for the rest (or the end of the stream)
        connection.deadline = time.monotonic() + self.limits.header_timeout_seconds
        return True

    # -- stopping -----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop serving: waiting connections are closed, requests being served are cut off."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._waker.send(b"\0")
        if self._serving:
            self._stopped.wait(10)
        for connection in list(self._connections):
            if connection.state == _BUSY:
                with contextlib.suppress(OSError, ValueError):
                    connection.sock.shutdown(socket.SHUT_RDWR)
        while True:
            try:
                waiting = self._queue.get_nowait()
            except queue.Empty:
                break
            if waiting is not None:
                waiting.sock.close()
        for _ in self._workers:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break

    def server_close(self) -> None:
        for connection in list(self._connections):
            connection.sock.close()
        self._connections.clear()
        for sock in (self._listener, self._waker, self._wake_end):
            sock.close()
        self._selector.close()
