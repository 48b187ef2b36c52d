"""A PostgreSQL database as the store's connection, through psycopg 3: the URL read once, the
session settings a URL leaves out, and statements run in their PostgreSQL text (psycopg's raw
form, `$1`), an insert of many rows sent as arrays of its columns."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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
    standard `PG*` environment variables it leaves out) says where and who; a connection lost
    is made again at the next use. Transactions are READ COMMITTED: rows a transaction changes
    are locked until it ends, which is what orders replicas' writes to one run or trace."""

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
        try:
            self._connection: psycopg.Connection[tuple[Any, ...]] = self._connect()
        except psycopg.OperationalError as error:  # its text names no password
            raise RuntimeError(
                f"cannot reach the store {redacted(url)}: {first_line(error)}"
            ) from None
        except psycopg.Error:  # a parameter libpq refuses: its text may quote any of them
            raise _unreadable(url) from None

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A connection, with the SESSION settings the URL leaves out; lists (the columns of an
        insert of many rows) are sent in binary, which spares the client quoting them."""
        from psycopg.types.array import ListBinaryDumper

        connection = self._psycopg.connect(self._conninfo, autocommit=True)
        connection.adapters.register_dumper(list, ListBinaryDumper)
        return connection

    def _live(self) -> psycopg.Connection[tuple[Any, ...]]:
        """The connection, made again when the last one was lost (the lock is held; a server
        still away raises the driver's error, which a sender is told to retry)."""
        if self._connection.closed or self._connection.broken:
            self._connection = self._connect()
        return self._connection

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        with self.lock:
            connection = self._live()
            with connection.transaction():
                yield PostgresCursor(self._psycopg.RawCursor(connection))

    @contextmanager
    def locked(self) -> Iterator[Cursor]:
        with self.lock:
            yield PostgresCursor(self._psycopg.RawCursor(self._live()))

    def now(self) -> float:
        with self.lock:
            cursor = self._live().execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())")
            (seconds,) = cursor.fetchone() or (None,)
        return float(seconds)

    @contextmanager
    def migrating(self) -> Iterator[Cursor]:
        with self.transaction() as cursor:
            # another replica's may take a while (on the connection: PostgreSQL's own statements)
            self._connection.execute("SET LOCAL lock_timeout = 0")
            self._connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            yield cursor

    def close(self) -> None:
        with self.lock:
            self._connection.close()


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


def _unreadable(url: str) -> RuntimeError:
    """The error of a store URL PostgreSQL cannot read (never quoting it: a password may be in
    any part)."""
    return RuntimeError(
        f"the store URL {redacted(url)} is not one PostgreSQL reads "
        "(postgresql://[user[:password]@]host[:port]/database[?parameter=value&...])"
    )
