"""The server: a poller thread that accepts and reads without blocking, a fixed pool of
workers that serve whole requests, and every bound of the package docstring."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import queue
import select
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable

from ..failures import report_unexpected
from ..fair_gate import Busy, Gate
from ..limits import Limits
from .connection import (
    AWAIT,
    BODY,
    BUSY,
    CLOSE,
    CLOSED,
    HANDSHAKE,
    HEAD,
    KEEP,
    LINGER,
    WAITING,
    BodyWait,
    Connection,
    first_to_evict,
)
from .handler import RequestHandler, peer_host
from .refusals import HttpError, timed_out
from .streams import HEAD_END, MAX_HEAD_BYTES, RECV_BYTES

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


LINGER_SECONDS = 2.0
KEEP_ALIVE_WAIT = 0.002
"""How long a worker that just answered waits for the same connection's next request."""


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
    of worker threads, within `limits` (see the module docstring). Listening on `::` is
    dual-stack where the system allows it (IPv4 clients too, as gRPC's `[::]` is)."""

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
        self._waiting: dict[str, dict[Connection, None]] = {}
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
            address,
            family=family,
            backlog=max(1, limits.http_backlog),
            dualstack_ipv6=address[0] == "::" and socket.has_dualstack_ipv6(),
        )
        self._listener.setblocking(False)
        self.server_address = self._listener.getsockname()
        self._selector = selectors.DefaultSelector()
        self._waker, self._wake_end = socket.socketpair()
        for end in (self._waker, self._wake_end):
            end.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_end, selectors.EVENT_READ, self._wake_end)
        self._connections: set[Connection] = set()
        self._deadlines: list[tuple[float, int, Connection]] = []
        self._sequence = itertools.count()
        self._queue: queue.Queue[Connection | None] = queue.Queue(max(1, limits.http_queue))
        self._returned: deque[tuple[Connection, int]] = deque()
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
                if connection.state != BUSY:
                    self._close(connection)
            self._stopped.set()

    def _event(self, data: object) -> None:
        """What the selector saw, by what was registered: None the listener, the wake-up
        socket, or a connection."""
        if data is None:
            self._accept()
        elif data is self._wake_end:
            self._take_back()
        else:
            assert isinstance(data, Connection)
            self._ready(data)

    def _guarded(self, step: Callable[..., None], *args: object) -> None:
        """Run one step of the poller: an error in it closes the connection concerned (if
        any) and is logged, never stopping the server."""
        try:
            step(*args)
        except Exception as error:
            report_unexpected(error, "the HTTP poller")
            for connection in args:
                if isinstance(connection, Connection):
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
            host = peer_host(address)
            if len(self._connections) >= self.max_connections:
                self._refuse_connection(sock)
                continue
            if self._per_host.get(host, 0) >= self.limits.max_connections_per_host:
                waiting = self._waiting.get(host)
                victim = first_to_evict(waiting, time.monotonic()) if waiting else None
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
            state = HEAD
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                state = HANDSHAKE
            connection = Connection(
                sock, address, state, deadline, self.limits.body_timeout_seconds
            )
            self._connections.add(connection)
            self._per_host[host] = self._per_host.get(host, 0) + 1
            self._wait_in(connection)
            self._watch(connection, selectors.EVENT_READ)
            self._set_deadline(connection, deadline)

    def _wait_in(self, connection: Connection) -> None:
        """The connection waits on the poller from now (the last of its host's to evict)."""
        waiting = self._waiting.setdefault(connection.host, {})
        waiting.pop(connection, None)
        waiting[connection] = None

    def _stop_waiting(self, connection: Connection) -> None:
        waiting = self._waiting.get(connection.host)
        if waiting is not None:
            waiting.pop(connection, None)
            if not waiting:
                del self._waiting[connection.host]

    def _evict(self, connection: Connection) -> None:
        """Close a waiting connection of a host at its cap (`first_to_evict`), so the host's
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
        if connection.state in (HEAD, BODY) and not connection.idle:
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
                sock.recv(RECV_BYTES)  # what already arrived, so closing does not reset
        except OSError:
            pass
        sock.close()

    def _watch(self, connection: Connection, events: int) -> None:
        try:
            self._selector.modify(connection.sock, events, connection)
        except KeyError:
            self._selector.register(connection.sock, events, connection)

    def _unwatch(self, connection: Connection) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(connection.sock)

    def _set_deadline(self, connection: Connection, deadline: float) -> None:
        connection.deadline = deadline
        heapq.heappush(self._deadlines, (deadline, next(self._sequence), connection))
        if len(self._deadlines) > 4 * len(self._connections) + 64:  # drop stale entries
            self._deadlines = [
                (c.deadline, next(self._sequence), c)
                for c in self._connections
                if c.state in WAITING
            ]
            heapq.heapify(self._deadlines)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, connection = heapq.heappop(self._deadlines)
            if connection.deadline != deadline or connection.state not in WAITING:
                continue
            if connection.state == BODY:
                self._serve_again(connection, timed_out())
            else:
                self._close(connection)

    def _ready(self, connection: Connection) -> None:
        if connection.state == HANDSHAKE:
            self._handshake(connection)
        elif connection.state == HEAD:
            before = len(connection.reader.buffer)
            alive = connection.reader.pump()
            if len(connection.reader.buffer) > before:
                connection.progress = time.monotonic()
            self._check_head(connection, alive)
        elif connection.state == BODY:
            self._read_body(connection)
        elif connection.state == LINGER:
            self._discard(connection)

    def _handshake(self, connection: Connection) -> None:
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
        connection.state = HEAD
        self._watch(connection, selectors.EVENT_READ)
        self._check_head(connection, connection.reader.pump())

    def _check_head(self, connection: Connection, alive: bool) -> None:
        buffer = connection.reader.buffer
        if buffer:
            if connection.idle:  # the next request began: its head is now due
                connection.idle = False
                self._set_deadline(
                    connection, time.monotonic() + self.limits.header_timeout_seconds
                )
            end = HEAD_END.search(buffer, max(0, connection.scanned - 3))
            if end is not None and end.start() <= MAX_HEAD_BYTES:
                return self._dispatch(connection)
            connection.scanned = len(buffer)
            if len(buffer) > MAX_HEAD_BYTES:
                return self._answer_and_close(connection, _TOO_LARGE_HEAD)
        if not alive:
            self._close(connection)

    def _dispatch(self, connection: Connection) -> None:
        self._unwatch(connection)
        self._stop_waiting(connection)
        connection.state = BUSY
        connection.scanned = 0
        try:
            self._queue.put_nowait(connection)
        except queue.Full:
            self._answer_and_close(connection, _busy_answer(self.limits.retry_after_seconds))

    def _answer_and_close(self, connection: Connection, answer: bytes) -> None:
        try:
            connection.sock.setblocking(False)
            connection.sock.send(answer)
        except (OSError, ValueError):
            return self._close(connection)
        self._linger(connection)

    def _linger(self, connection: Connection) -> None:
        """Shut the write side and drop what the client still sends until it closes."""
        self._drop_body(connection)
        try:
            connection.sock.setblocking(False)
            connection.sock.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):
            return self._close(connection)
        connection.state = LINGER
        connection.reader.buffer.clear()
        self._wait_in(connection)
        self._watch(connection, selectors.EVENT_READ)
        self._set_deadline(connection, time.monotonic() + LINGER_SECONDS)
        self._discard(connection)

    def _discard(self, connection: Connection) -> None:
        while connection.discarded < self.limits.max_request_bytes:
            try:
                data = connection.sock.recv(RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except (OSError, ValueError):
                break
            if not data:
                break
            connection.discarded += len(data)
        self._close(connection)

    def _close(self, connection: Connection) -> None:
        if connection.state == CLOSED:
            return
        connection.state = CLOSED
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
            if connection.state == BUSY:
                self._guarded(self._take_back_one, connection, outcome)

    def _take_back_one(self, connection: Connection, outcome: int) -> None:
        """A connection a worker handed back: close it, read its body, or park it."""
        if self._stopping:
            self._close(connection)
        elif outcome == AWAIT:
            self._await_body(connection)
        elif outcome == CLOSE:
            if connection.handler is not None and connection.handler.responded:
                self._linger(connection)
            else:
                self._close(connection)
        else:
            self._park(connection)

    def _park(self, connection: Connection) -> None:
        """Keep a connection alive between requests, without a thread."""
        try:
            connection.sock.setblocking(False)
        except (OSError, ValueError):
            return self._close(connection)
        connection.state = HEAD
        connection.idle = True
        self._wait_in(connection)
        self._watch(connection, selectors.EVENT_READ)
        self._set_deadline(connection, time.monotonic() + self.limits.idle_timeout_seconds)
        alive = True
        if isinstance(connection.sock, ssl.SSLSocket) and connection.sock.pending():
            alive = connection.reader.pump()  # decrypted bytes the selector cannot see
        self._check_head(connection, alive)

    # -- bodies, read by the poller -------------------------------------------------------

    def _await_body(self, connection: Connection) -> None:
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
        connection.wait = BodyWait(pending, ticket)
        connection.state = BODY
        connection.progress = time.monotonic()
        self._wait_in(connection)
        self._set_deadline(connection, time.monotonic() + self.limits.body_timeout_seconds)
        buffer = connection.reader.buffer
        head = HEAD_END.search(buffer)
        start = head.end() if head is not None else len(buffer)
        arrived = bytes(buffer[start:])
        del buffer[start:]
        if arrived and not self._take_body(connection, arrived):
            return
        self._watch(connection, selectors.EVENT_READ)
        self._read_body(connection)

    def _read_body(self, connection: Connection) -> None:
        wait = connection.wait
        for turn in itertools.count():
            if wait is None or connection.state != BODY:
                return
            if turn >= 16 and not (
                isinstance(connection.sock, ssl.SSLSocket) and connection.sock.pending()
            ):
                return  # other connections get their turn (the selector wakes this again)
            want = (
                RECV_BYTES
                if wait.length is None
                else min(RECV_BYTES, wait.length - len(wait.received))
            )
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

    def _take_body(self, connection: Connection, data: bytes) -> bool:
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
                if wait.raw > 4 * wait.chunks.limit + RECV_BYTES:  # framing far beyond the data
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

    def _drop_body(self, connection: Connection) -> None:
        """Let go of a body being read or read (and its share of the budget): the connection
        is closing. Never while a worker holds it: workers' connections are not closed here."""
        if connection.wait is not None:
            connection.wait.ticket.release()
            connection.wait = None
        connection.reader.let_go()

    def _serve_again(self, connection: Connection, refusal: Exception | None) -> None:
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
            outcome = CLOSE
            try:
                outcome = self._serve(connection)
            except BaseException:  # the handler answers what it can; this is a last resort
                logger.exception("verdictgate: http worker failed")
            self._returned.append((connection, outcome))
            with contextlib.suppress(OSError):
                self._waker.send(b"\0")

    def _serve(self, connection: Connection) -> int:
        handler = connection.handler
        if handler is None:
            handler = connection.handler = self._handler_class(
                connection.sock, connection.address, self, connection.reader, connection.writer
            )
        while True:
            handler.serve_one()
            if handler.pending is not None and not self._stopping:
                return AWAIT
            if handler.close_connection or self._stopping:
                return CLOSE
            if not self._queue.empty() or not self._next_request_here(connection):
                return KEEP  # back to the poller until its next request arrives

    def _next_request_here(self, connection: Connection) -> bool:
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
        end = HEAD_END.search(connection.reader.buffer)
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
            if connection.state == BUSY:
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
