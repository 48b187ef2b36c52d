"""The fixed pool of worker threads that serve whole requests, one connection at a time."""

from __future__ import annotations

import contextlib
import logging
import queue
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from .connection import AWAIT, CLOSE, KEEP, Connection
from .framing import head_length
from .handler import RequestHandler
from .refusals import HttpError

logger = logging.getLogger(__name__)

KEEP_ALIVE_WAIT = 0.002
"""How long a worker that just answered waits for the same connection's next request."""


class Workers:
    """`count` threads serving the connections `submit`ted (whose request head arrived), at
    most `queue_size` waiting for one. A worker serves a request, and the next ones the
    connection sends at once, then hands the connection back (`returned`) with what it waits
    for (`CLOSE`, `KEEP` or `AWAIT`), waking the poller through `wake_end`."""

    def __init__(
        self,
        count: int,
        queue_size: int,
        make_handler: Callable[[Connection], RequestHandler],
        header_timeout: float,
    ) -> None:
        self._make_handler = make_handler
        self._header_timeout = header_timeout
        self._queue: queue.Queue[Connection | None] = queue.Queue(max(1, queue_size))
        self._returned: deque[tuple[Connection, int]] = deque()
        self._waker, self.wake_end = socket.socketpair()
        """The poller watches `wake_end`: a byte arrives there for each connection handed back."""
        for end in (self._waker, self.wake_end):
            end.setblocking(False)
        self.stopping = False
        """Set when the server stops: connections handed back are then closed."""
        self._threads = [
            threading.Thread(target=self._work, name=f"verdictgate-http-{n}", daemon=True)
            for n in range(max(1, count))
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, connection: Connection) -> bool:
        """Queue the connection for a worker; False when the queue is full."""
        try:
            self._queue.put_nowait(connection)
        except queue.Full:
            return False
        return True

    def queued(self) -> int:
        return self._queue.qsize()

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            self._waker.send(b"\0")

    def returned(self) -> Iterator[tuple[Connection, int]]:
        """The connections handed back since the last call, each with its outcome."""
        try:
            while self.wake_end.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while self._returned:
            yield self._returned.popleft()

    def stop(self) -> None:
        """Close the connections still queued and let every worker end (after `stopping`)."""
        while True:
            try:
                waiting = self._queue.get_nowait()
            except queue.Empty:
                break
            if waiting is not None:
                waiting.sock.close()
        for _ in self._threads:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break

    def close(self) -> None:
        for end in (self._waker, self.wake_end):
            end.close()

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
            self.wake()

    def _serve(self, connection: Connection) -> int:
        handler = connection.handler
        if handler is None:
            handler = connection.handler = self._make_handler(connection)
        while True:
            handler.serve_one()
            if handler.pending is not None and not self.stopping:
                return AWAIT
            if handler.close_connection or self.stopping:
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
        try:
            if head_length(connection.reader.buffer) is None:
                return False  # the poller waits for the rest (or the end of the stream)
        except HttpError:
            return False  # the poller answers it
        connection.deadline = time.monotonic() + self._header_timeout
        return True
