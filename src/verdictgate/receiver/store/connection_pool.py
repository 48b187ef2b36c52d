"""A small pool of PostgreSQL connections, each made in the thread that needs one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg


class ConnectionPool:
    """Connections to one database, made in the thread that needs one and kept for the next use
    while they are sound: at most `size` in use at once (a use beyond waits `wait` seconds for
    one, then fails as the store being away). A connection is made when a use needs one, so a
    server away fails that use at once and a server back is used at once: no thread of the
    pool's own retries on a schedule of its own."""

    def __init__(
        self, connect: Callable[[], psycopg.Connection[tuple[Any, ...]]], size: int, wait: float
    ) -> None:
        self._connect = connect
        self._slots = threading.BoundedSemaphore(size)
        self._wait = wait
        self._idle: list[psycopg.Connection[tuple[Any, ...]]] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A sound connection for the block, given back after it (closed instead when it broke
        or is left inside a transaction)."""
        if not self._slots.acquire(timeout=self._wait):
            import psycopg

            raise psycopg.OperationalError(
                f"no connection to the store came free within {self._wait:g} s"
            )
        try:
            connection = self._idle_one() or self._connect()
            try:
                yield connection
            finally:
                self._give_back(connection)
        finally:
            self._slots.release()

    def _idle_one(self) -> psycopg.Connection[tuple[Any, ...]] | None:
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if not (connection.closed or connection.broken):
                    return connection
        return None

    def _give_back(self, connection: psycopg.Connection[tuple[Any, ...]]) -> None:
        from psycopg.pq import TransactionStatus

        status = connection.info.transaction_status
        with self._lock:
            if not (self._closed or connection.closed or connection.broken) and (
                status == TransactionStatus.IDLE
            ):
                self._idle.append(connection)
                return
        connection.close()

    def drop_idle(self) -> None:
        """Close the connections kept idle (the server went away: they went with it)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def close(self) -> None:
        """Close every connection: those idle now, and those in use once given back."""
        with self._lock:
            self._closed = True
        self.drop_idle()
