"""The store's one connection, to a SQLite file or a PostgreSQL server: used under one lock,
written in transactions (committed when the block ends, rolled back on error), the SQL of the
aggregates spoken in either dialect.

The aggregates write SQLite's SQL; `to_postgres` translates it (cached per statement): `?`
placeholders, `INSERT OR IGNORE`, `IS ?` comparisons and SQLite's column types. A PostgreSQL
store is `shared`: other replicas write to it too, so what this process counts is an estimate
that is read again from the tables when it matters."""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import psycopg

SqlRow = tuple[Any, ...]  # boundary: a driver's row as it returns it (its columns' values)
Parameters = Sequence[object]

CACHE_KIB = 65536
"""SQLite's page cache (64 MiB, against its 2 MiB default): inserts into a large trials table
then rarely read pages back from disk."""
MIGRATION_LOCK = 0x76657264
"""The advisory lock replicas starting together migrate a PostgreSQL store under, one at a time."""


class Cursor(Protocol):
    """What the aggregates use of a cursor (sqlite3's, or a translating PostgreSQL one)."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: str, parameters: Parameters = (), /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Parameters], /) -> Cursor: ...

    def fetchone(self) -> Any: ...  # boundary: a row, or None

    def fetchall(self) -> list[Any]: ...  # boundary: rows


def is_store_error(error: BaseException) -> bool:
    """Whether an exception is the store failing in a way a retry may not meet (a sender is
    told to retry): any SQLite error; on PostgreSQL a lost connection, a server shutting down
    or out of resources, a deadlock or a lock not had in time, a transaction ended for idling,
    or a write that reached a standby; not an error in what was sent to it."""
    if isinstance(error, sqlite3.Error):
        return True
    if not is_driver_error(error):
        return False
    state = getattr(error, "sqlstate", None)
    if state is None:  # the driver's own: a connection that failed or was lost
        return any(
            kind.__name__ in ("OperationalError", "InterfaceError") for kind in type(error).__mro__
        )
    return state[:2] in _RETRYABLE_CLASSES or state in _RETRYABLE_STATES


def is_driver_error(error: BaseException) -> bool:
    """Whether an exception is a store driver's (sqlite3's or psycopg's), of any kind."""
    return isinstance(error, sqlite3.Error) or type(error).__module__.startswith("psycopg")


def is_connection_lost(error: BaseException) -> bool:
    """Whether a store error is the store being away (the connection, or the server), rather
    than a conflict with another replica."""
    state = getattr(error, "sqlstate", None)
    return is_store_error(error) and (state is None or state[:2] in ("08", "57", "53", "58"))


_RETRYABLE_CLASSES = ("08", "40", "53", "57", "58")
"""SQLSTATE classes a retry may not meet: connection exceptions, transaction rollbacks
(deadlocks, serialization failures), insufficient resources, operator intervention (a shutdown,
a cancel), system errors."""
_RETRYABLE_STATES = ("55P03", "25P03", "25006")
"""And these: a lock not had in time, a transaction ended for idling, a read-only transaction
(a write that reached a standby during a failover)."""


def is_postgres_url(location: str | Path) -> bool:
    """Whether a store location names a PostgreSQL server (`postgresql://` or `postgres://`)."""
    return str(location).startswith(("postgresql://", "postgres://"))


def redacted(location: str | Path) -> str:
    """A store location fit for a log line: a PostgreSQL URL rebuilt from what libpq reads in
    it, with `***` for its password, wherever it was given (one that cannot be read is not
    shown at all)."""
    text = str(location)
    if not is_postgres_url(text):
        return text
    try:
        from psycopg.conninfo import conninfo_to_dict

        given = {key: str(value) for key, value in conninfo_to_dict(text).items()}
    except Exception:
        return "postgresql://(a URL that cannot be read)"
    user, password = given.pop("user", ""), given.pop("password", None)
    host, port, database = given.pop("host", ""), given.pop("port", ""), given.pop("dbname", "")
    who = f"{user}:***@" if password is not None else f"{user}@" if user else ""
    where = f"{host}:{port}" if port else host
    query = "&".join(f"{key}={value}" for key, value in sorted(given.items()))
    return f"postgresql://{who}{where}/{database}" + (f"?{query}" if query else "")


class Database(ABC):
    """One connection shared by threads: every use of it holds `lock`."""

    shared = False
    """Whether other processes write the same tables (then counts kept here are estimates)."""
    skip_locked = ""
    """What a claiming `SELECT` ends with, so that replicas claim different rows."""
    lock_row = ""
    """What a `SELECT` of a row a transaction goes on to change ends with, to hold it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Cursor]:
        """A cursor in a write transaction, under the lock: committed when the block ends
        (however it returns), rolled back when it or the commit raises."""

    @abstractmethod
    def locked(self) -> AbstractContextManager[Cursor]:
        """A cursor under the lock, outside any explicit transaction: each statement reads, or
        commits, on its own."""

    @abstractmethod
    def ping(self) -> None:
        """One round trip to the store (the lock is held); the driver's error if it fails."""

    @abstractmethod
    def migrating(self) -> AbstractContextManager[Cursor]:
        """A cursor to create and migrate the schema with, one process at a time."""

    @abstractmethod
    def columns(self, cursor: Cursor, table: str) -> set[str]:
        """The columns a table has."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection (after any use in progress)."""


class SqliteDatabase(Database):
    """A SQLite file (made owner-only) in WAL mode, or `:memory:`; written in `BEGIN IMMEDIATE`."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        super().__init__()
        if str(path) != ":memory:" and not Path(path).exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # trial data: owner only
        self._connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        with self.lock:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes
            self._connection.execute(f"PRAGMA cache_size=-{CACHE_KIB}")

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        with self.lock:
            cursor = self._connection.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            try:
                yield cursor
                cursor.execute("COMMIT")
            except BaseException:
                if self._connection.in_transaction:  # a failed COMMIT leaves it open
                    cursor.execute("ROLLBACK")
                raise

    @contextmanager
    def locked(self) -> Iterator[Cursor]:
        with self.lock:
            yield self._connection.cursor()

    def ping(self) -> None:
        self._connection.execute("SELECT 1").fetchone()

    def columns(self, cursor: Cursor, table: str) -> set[str]:
        return {row[1] for row in cursor.execute(f"PRAGMA table_info({table})").fetchall()}

    @contextmanager
    def migrating(self) -> Iterator[Cursor]:
        with self.locked() as cursor:
            yield cursor

    def close(self) -> None:
        with self.lock:
            self._connection.close()


class PostgresDatabase(Database):
    """A PostgreSQL database through psycopg 3, shared with other replicas. The URL (or the
    standard `PG*` environment variables it leaves out) says where and who; a connection lost
    is made again at the next use. Transactions are READ COMMITTED: rows a transaction changes
    are locked until it ends, which is what orders replicas' writes to one run or trace."""

    shared = True
    skip_locked = " FOR UPDATE SKIP LOCKED"
    lock_row = " FOR UPDATE"

    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            import psycopg
        except ImportError:
            raise RuntimeError(
                "a PostgreSQL store needs psycopg, in the `postgres` extra (verdictgate[postgres])"
            ) from None
        self._psycopg = psycopg
        self._types: dict[str, dict[str, str]] = {}
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
        """A connection, with the SESSION settings the URL leaves out."""
        return self._psycopg.connect(self._conninfo, autocommit=True)

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
                yield PostgresCursor(connection.cursor(), self._column_types)

    @contextmanager
    def locked(self) -> Iterator[Cursor]:
        with self.lock:
            yield PostgresCursor(self._live().cursor(), self._column_types)

    def ping(self) -> None:
        self._live().execute("SELECT 1").fetchone()

    def columns(self, cursor: Cursor, table: str) -> set[str]:
        rows = cursor.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        ).fetchall()
        return {name for (name,) in rows}

    def _column_types(self, table: str) -> dict[str, str]:
        """A table's columns and their types, read once (the lock is held)."""
        if table not in self._types:
            rows = (
                self._live()
                .execute(
                    "SELECT column_name, data_type FROM information_schema.columns"
                    " WHERE table_schema = current_schema() AND table_name = %s",
                    (table,),
                )
                .fetchall()
            )
            self._types[table] = dict(rows)
        return self._types[table]

    @contextmanager
    def migrating(self) -> Iterator[Cursor]:
        with self.transaction() as cursor:
            cursor.execute("SET LOCAL lock_timeout = 0")  # another replica's may take a while
            cursor.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
            yield cursor

    def close(self) -> None:
        with self.lock:
            self._connection.close()


class PostgresCursor:
    """A psycopg cursor that takes the aggregates' SQLite SQL (see `to_postgres`). An insert of
    many rows is sent as one statement over arrays of its columns (`unnest`), which PostgreSQL
    takes in about two thirds of the time of a row at a time, even pipelined."""

    def __init__(
        self, cursor: psycopg.Cursor[tuple[Any, ...]], types: Callable[[str], dict[str, str]]
    ) -> None:
        self._cursor = cursor
        self._types = types
        self._none = False
        """The last call was an executemany of no rows (psycopg would keep the rowcount before)."""

    @property
    def rowcount(self) -> int:
        return 0 if self._none else self._cursor.rowcount

    def execute(self, sql: str, parameters: Parameters = (), /) -> Cursor:
        self._none = False
        self._cursor.execute(to_postgres(sql), parameters or None)
        return self

    def executemany(self, sql: str, parameters: Iterable[Parameters], /) -> Cursor:
        rows = list(parameters)
        self._none = not rows
        statement = to_postgres(sql)
        insert = _INSERT_VALUES.match(statement) if len(rows) >= BULK_ROWS else None
        if insert is not None:
            table, columns, rest = insert.group(1), insert.group(2).split(","), insert.group(3)
            types = self._types(table)
            arrays = ", ".join(f"%b::{types[column.strip()]}[]" for column in columns)
            self._cursor.execute(
                f"INSERT INTO {table} ({insert.group(2)}) SELECT * FROM unnest({arrays}){rest}",
                [list(column) for column in zip(*rows, strict=True)],
            )
        elif rows:
            self._cursor.executemany(statement, rows)
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
_INSERT_VALUES = re.compile(
    r"INSERT INTO (\w+)\s*\(([^)]*)\)\s*VALUES\s*\((?:%s\s*,\s*)*%s\)(.*)", re.DOTALL
)
"""An insert of one row of placeholders: its table, its columns, and what follows the row."""
_TYPES = (
    (
        re.compile(r"INTEGER PRIMARY KEY AUTOINCREMENT"),
        "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    ),
    (re.compile(r"\bWITHOUT ROWID\b"), ""),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),  # PostgreSQL's REAL is 4 bytes
    (re.compile(r"\bBLOB\b"), "BYTEA"),
)


@functools.lru_cache(maxsize=512)
def to_postgres(sql: str) -> str:
    """A statement of the aggregates' SQLite SQL in PostgreSQL's."""
    text = sql.strip()
    if text.upper().startswith(("CREATE", "ALTER")):
        text = re.sub(r"--[^\n]*", "", text)
        for pattern, replacement in _TYPES:
            text = pattern.sub(replacement, text)
        text = text.strip()
    if text.startswith("INSERT OR IGNORE INTO"):
        text = (
            "INSERT INTO" + text.removeprefix("INSERT OR IGNORE INTO") + " ON CONFLICT DO NOTHING"
        )
    text = re.sub(r"\bIS NOT \?", "IS DISTINCT FROM ?", text)
    text = re.sub(r"\bIS \?", "IS NOT DISTINCT FROM ?", text)
    return text.replace("?", "%s")


def open_database(location: str | Path = ":memory:") -> Database:
    """The database a store location names: a PostgreSQL URL, or a SQLite file (`:memory:`).
    libpq's other form (`host=db dbname=vg`) is refused, rather than taken for a file name."""
    if is_postgres_url(location):
        return PostgresDatabase(str(location))
    if re.match(r"\w+=\S*(\s+\w+=\S*)*\s*$", str(location)):
        raise RuntimeError(
            "a PostgreSQL store is named by a URL: postgresql://user@host:port/database"
        )
    return SqliteDatabase(location)


def _unreadable(url: str) -> RuntimeError:
    """The error of a store URL PostgreSQL cannot read (never quoting it: a password may be in
    any part)."""
    return RuntimeError(
        f"the store URL {redacted(url)} is not one PostgreSQL reads "
        "(postgresql://[user[:password]@]host[:port]/database[?parameter=value&...])"
    )


def first_line(error: BaseException) -> str:
    """An error's message, its first line (a server error's primary message)."""
    diagnosis = getattr(error, "diag", None)
    primary = getattr(diagnosis, "message_primary", None)
    return str(primary) if primary else (str(error).splitlines() or [""])[0]
