"""A PostgreSQL database as the store's connection, through psycopg 3: the URL read once, the
session settings a URL leaves out, and statements run in their PostgreSQL text (psycopg's raw
form, `$1`), an insert of many rows sent as arrays of its columns."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .connection import Cursor, Database, Parameters
from .faults import first_line
from .locations import redacted
from .statements import Statement

if TYPE_CHECKING:
    import psycopg

MIGRATION_LOCK = 0x76657264
"""The advisory lock replicas starting together migrate a PostgreSQL store under, one at a time."""


class PostgresDatabase(Database):
    """A PostgreSQL database through psycopg 3, shared with other replicas. The URL (or the
    standard `PG*` environment variables it leaves out) says where and who. Each use takes a
    connection of a small pool (`ConnectionPool`), so ingest, the tick, the heartbeat, the
    forwarder, queries and the finisher's read of a whole run never queue behind one another;
    a connection lost is dropped from the pool and made again at the next use. Transactions are READ
    COMMITTED: rows a transaction changes are locked until it ends, which is what orders
    replicas' writes to one run or trace."""

    shared = True

    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            import psycopg
        except ImportError:
            raise RuntimeError(
                "a PostgreSQL store needs psycopg, in the `postgres` extra (verdictgate[postgres])"
            ) from None
        self._psycopg = psycopg
        try:  # the driver's text may quote the URL, password and all: never shown
            given = psycopg.conninfo.conninfo_to_dict(url)
            self._conninfo = psycopg.conninfo.make_conninfo(
                url, **{key: value for key, value in SESSION.items() if key not in given}
            )
        except (psycopg.Error, ValueError):
            raise _unreadable(url) from None
        self._pool = ConnectionPool(self._connect, POOL_SIZE, POOL_WAIT)
        try:  # one connection first: a store away or a refused role is one clear line
            with self._pool.connection():
                pass
        except psycopg.OperationalError as error:  # its text names no password
            raise RuntimeError(
                f"cannot reach the store {redacted(url)}: {first_line(error)}"
            ) from None
        except psycopg.Error:  # a parameter libpq refuses: its text may quote any of them
            raise _unreadable(url) from None

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A new connection, with the SESSION settings the URL leaves out; lists (the columns
        of an insert of many rows) are sent in binary, which spares the client quoting them."""
        from psycopg.types.array import ListBinaryDumper

        connection = self._psycopg.connect(self._conninfo, autocommit=True)
        connection.adapters.register_dumper(list, ListBinaryDumper)
        return connection

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A connection of the pool for the block (a server away raises the driver's error,
        which a sender is told to retry). A connection lost lets go of the idle ones too, so
        that one server restart fails one use, not one use per connection."""
        try:
            with self._pool.connection() as connection:
                yield connection
        except self._psycopg.OperationalError:
            self._pool.drop_idle()
            raise

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        with self._connection() as connection, connection.transaction():
            yield PostgresCursor(self._psycopg.RawCursor(connection))

    @contextmanager
    def locked(self) -> Iterator[Cursor]:
        with self._connection() as connection:
            yield PostgresCursor(self._psycopg.RawCursor(connection))

    def now(self) -> float:
        with self._connection() as connection:
            cursor = connection.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())")
            (seconds,) = cursor.fetchone() or (None,)
        return float(seconds)

    @contextmanager
    def migrating(self) -> Iterator[Cursor]:
        with self._connection() as connection, connection.transaction():
            # another replica's may take a while (on the connection: PostgreSQL's own statements)
            connection.execute("SET LOCAL lock_timeout = 0")
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            yield PostgresCursor(self._psycopg.RawCursor(connection))

    def close(self) -> None:
        self._pool.close()


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


class PostgresCursor:
    """A psycopg raw cursor that runs statements' PostgreSQL text. An insert of many rows whose
    statement has a form over arrays (`Statement.postgres_arrays`) is sent as that one
    statement, which PostgreSQL takes in about two thirds of the time of a row at a time, even
    pipelined."""

    def __init__(self, cursor: psycopg.RawCursor[tuple[Any, ...]]) -> None:
        self._cursor = cursor
        self._none = False
        """The last call was an executemany of no rows (psycopg would keep the rowcount before)."""

    @property
    def rowcount(self) -> int:
        return 0 if self._none else self._cursor.rowcount

    def execute(self, statement: Statement, parameters: Parameters = (), /) -> Cursor:
        self._none = False
        self._cursor.execute(statement.postgres, parameters)
        return self

    def executemany(self, statement: Statement, parameters: Iterable[Parameters], /) -> Cursor:
        rows = list(parameters)
        self._none = not rows
        if statement.postgres_arrays is not None and len(rows) >= BULK_ROWS:
            columns = [list(column) for column in zip(*rows, strict=True)]
            self._cursor.execute(statement.postgres_arrays, columns)
        elif rows:
            self._cursor.executemany(statement.postgres, rows)
        return self

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()


SESSION = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "options": (
        "-c lock_timeout=5000 -c idle_in_transaction_session_timeout=15000"
        " -c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3"
        " -c tcp_user_timeout=30000"
    ),
    "application_name": "verdictgate",
    "target_session_attrs": "read-write",  # never a standby, after a failover
}
"""libpq parameters a store URL leaves out. How long to try to connect, and TCP keepalives on
the connection, so that this replica notices a server that is gone. For the server's side of
it: a write waits for a row another replica holds 5 s at most (then it fails, and its sender
retries), a transaction left idle is ended after 15 s (this store's never wait on anything but
the server), and the server's own keepalives end the connection (and its locks) of a replica
whose host vanished, within about half a minute. A URL that sets `options` sets all of those
itself."""
BULK_ROWS = 8
"""Rows from which an insert is sent as arrays of its columns."""
POOL_SIZE = 8
"""Connections one replica holds at most: ingest (one write at a time), the tick, the heartbeat,
the forwarder, the finisher's reads and a few queries at once."""
POOL_WAIT = 10.0
"""Seconds a use waits for a connection of the pool when every one is in use: then it fails as
the store being away, and its sender is told to retry."""


def _unreadable(url: str) -> RuntimeError:
    """The error of a store URL PostgreSQL cannot read (never quoting it: a password may be in
    any part)."""
    return RuntimeError(
        f"the store URL {redacted(url)} is not one PostgreSQL reads "
        "(postgresql://[user[:password]@]host[:port]/database[?parameter=value&...])"
    )
