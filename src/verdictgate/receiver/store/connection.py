"""Where the store's statements run, written in transactions (committed when the block ends,
rolled back on error): a SQLite file's one connection under one lock (here), or a PostgreSQL
database's pool of connections (`postgres`), each running the text of its dialect of the
statements it is given (`statements`). A PostgreSQL store is `shared`: other replicas write to it too, so what this
process counts is an estimate that is read again from the tables when it matters."""

from __future__ import annotations

import itertools
import os
import re
import sqlite3
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from ...errors import StoreError
from .locations import is_postgres_url
from .statements import Each, Index, Statement, sql, values_text

SqlRow = tuple[Any, ...]  # boundary: a driver's row as it returns it (its columns' values)
Parameters = Sequence[object]
Query = tuple[Statement, Parameters]
"""A statement and its parameters."""

CACHE_KIB = 65536
"""SQLite's page cache (64 MiB, against its 2 MiB default): inserts into a large trials table
then rarely read pages back from disk."""
DEFAULT_LEASE = 15.0
"""Seconds a replica's claims (its heartbeat, an outbox entry) hold unless renewed (`serve
--lease`): a dead replica's runs are taken over after about this long (and a third of it), and a
shared store bounds its transactions by it."""
OLDEST_SQLITE = (3, 35)
"""The oldest SQLite a store runs on: its statements use `RETURNING` (SQLite 3.35, 2021)."""

if sys.version_info < (3, 12):
    # CPython's sqlite3 before 3.12 looks for an adapter for every NULL it binds by an attribute
    # lookup that fails and formats its AttributeError (about 0.2 us, four times per stored
    # decision span); registered, None's own adapter is one dictionary hit. It binds None (an
    # adapter for None registered later, by anyone in the process, would bind for the store too).
    sqlite3.register_adapter(type(None), lambda value: value)

_TABLES = sql(
    Each(
        "SELECT name FROM sqlite_master WHERE type = 'table'",
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()",
    )
)
_INDEXES = sql(
    Each(
        "SELECT name FROM sqlite_master WHERE type = 'index'",
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND i.indisvalid",
    )
)
_TABLE_COLUMNS = sql(
    Each(
        "SELECT name FROM pragma_table_info(?)",
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = ?",
    )
)


class Cursor(Protocol):
    """What the aggregates use of a cursor: statements run in its store's dialect."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, statement: Statement, parameters: Parameters = (), /) -> Cursor: ...

    def executemany(
        self, statement: Statement, parameters: Iterable[Parameters], /, shared: Parameters = ()
    ) -> Cursor:
        """Run a statement for each row of `parameters`, every row's parameters followed by
        `shared` (given once for them all)."""
        ...

    def returning(self, statement: Statement, rows: Sequence[Parameters], /) -> list[Any]:
        """Run a statement that returns rows (`RETURNING`) for each of `rows`, on PostgreSQL as
        one statement over arrays (`Statement.postgres_arrays`); every row returned."""
        ...

    def execute_all(self, queries: Sequence[Query], /) -> list[list[Any]]:
        """Run each query in order, the later ones whatever the earlier returned; the rows each
        returned ([] for a statement that returns none). On PostgreSQL they travel together: one
        round trip for them all."""
        ...

    def fetchone(self) -> Any: ...  # boundary: a row, or None

    def fetchall(self) -> list[Any]: ...  # boundary: rows


class CopyRepeated(Exception):
    """A row copied in repeats one held: its transaction is undone, to be done again inserting
    rows as written (a copy is all or none, and costs a subtransaction to undo alone)."""


class Database(ABC):
    """Where the store's statements run: a SQLite file's one connection, shared by threads
    under `lock`, or a pool of PostgreSQL connections, one for each use."""

    shared = False
    """Whether other processes write the same tables (then counts kept here are estimates)."""

    @abstractmethod
    def transaction(self, copying: bool = False) -> AbstractContextManager[Cursor]:
        """A cursor in a write transaction of its own: committed when the block ends (however it
        returns), rolled back when it or the commit raises. `copying`: many rows of an insert
        that has a copied form may be copied in (on a shared store), a row that repeats one held
        then failing the whole transaction with `CopyRepeated`, for its caller to do it again
        without."""

    def heartbeat(self) -> AbstractContextManager[Cursor]:
        """A write transaction for a replica's heartbeat alone: on a shared store over a
        connection kept for it, so that a renewal never waits behind a full pool."""
        return self.transaction()

    def snapshot(self) -> AbstractContextManager[Cursor]:
        """A cursor whose statements all read the store at one moment: on a shared store a
        read-only transaction at REPEATABLE READ (a run's row and its parts read apart would
        else straddle another replica's commit); a file's one connection, under its lock."""
        return self.locked()

    @abstractmethod
    def locked(self) -> AbstractContextManager[Cursor]:
        """A cursor outside any explicit transaction, for the block: each statement reads, or
        commits, on its own."""

    @abstractmethod
    def now(self) -> float:
        """The store's time, epoch seconds: the server's clock for a shared store, what replicas
        compare their leases and deadlines on (this process's wall clock for a file)."""

    @abstractmethod
    def migrating(self) -> AbstractContextManager[None]:
        """Held while this process migrates the schema: processes migrate one at a time (a
        process waiting for it holds nothing another one's migration waits for)."""

    def tables(self, cursor: Cursor) -> set[str]:
        """The tables the store has."""
        return {name for (name,) in cursor.execute(_TABLES).fetchall()}

    def columns(self, cursor: Cursor, table: str) -> set[str]:
        """The columns a table has."""
        return {name for (name,) in cursor.execute(_TABLE_COLUMNS, (table,)).fetchall()}

    def indexes(self, cursor: Cursor) -> set[str]:
        """The indexes the store has that are ready for use (on PostgreSQL, not one a build
        that was interrupted left invalid)."""
        return {name for (name,) in cursor.execute(_INDEXES).fetchall()}

    @abstractmethod
    def build_index(self, index: Index) -> None:
        """Build an index on a table in use, outside any transaction, without blocking its
        writers where the database can (`Index.build`)."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection (after any use in progress)."""


class SqliteDatabase(Database):
    """A SQLite file (made owner-only) in WAL mode, or `:memory:`; written in `BEGIN IMMEDIATE`.
    A SQLite older than OLDEST_SQLITE is refused."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.lock = threading.Lock()
        """Held by every use of the one connection."""
        if sqlite3.sqlite_version_info < OLDEST_SQLITE:
            raise StoreError(
                f"a SQLite store needs SQLite {'.'.join(map(str, OLDEST_SQLITE))} or later;"
                f" this Python's is {sqlite3.sqlite_version}"
            )
        if str(path) != ":memory:" and not Path(path).exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # trial data: owner only
        self._connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        with self.lock:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes
            self._connection.execute(f"PRAGMA cache_size=-{CACHE_KIB}")

    @contextmanager
    def transaction(self, copying: bool = False) -> Iterator[Cursor]:
        with self.lock:
            cursor = self._connection.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            try:
                yield SqliteCursor(cursor)
                cursor.execute("COMMIT")
            except BaseException:
                if self._connection.in_transaction:  # a failed COMMIT leaves it open
                    cursor.execute("ROLLBACK")
                raise

    @contextmanager
    def locked(self) -> Iterator[Cursor]:
        with self.lock:
            yield SqliteCursor(self._connection.cursor())

    def now(self) -> float:
        return time.time()

    def build_index(self, index: Index) -> None:
        """SQLite builds it holding the file's write lock (one writer at a time in any case)."""
        with self.locked() as cursor:
            cursor.execute(index.build)

    @contextmanager
    def migrating(self) -> Iterator[None]:
        """Nothing to hold: a migration's transaction takes the file's write lock, and the
        indexes it builds after are created only if they still do not exist."""
        yield

    def close(self) -> None:
        with self.lock:
            self._connection.close()


VALUES_ROWS = (64, 16, 4)
"""Rows an insert of rows runs in one statement on SQLite, largest first: a few texts per
statement (sqlite3 keeps 128 prepared), each run as often as its rows allow."""


def _each_with(rows: Iterable[Parameters], shared: Parameters) -> Iterable[Parameters]:
    """Each row's parameters followed by the shared ones."""
    return rows if not shared else ((*row, *shared) for row in rows)


class SqliteCursor:
    """A sqlite3 cursor that runs statements' SQLite text."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor
        self._rowcount: int | None = None
        """Rows of the last call when it ran more than one statement."""

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount if self._rowcount is None else self._rowcount

    def execute(self, statement: Statement, parameters: Parameters = (), /) -> Cursor:
        self._rowcount = None
        self._cursor.execute(statement.sqlite, parameters)
        return self

    def executemany(
        self, statement: Statement, parameters: Iterable[Parameters], /, shared: Parameters = ()
    ) -> Cursor:
        """An insert of rows (`insert_rows`) takes them VALUES_ROWS (then fewer) to a statement;
        any other statement, and the last few rows, run once a row."""
        self._rowcount = None
        if statement.sqlite_values is None:
            self._cursor.executemany(statement.sqlite, _each_with(parameters, shared))
            return self
        rows = parameters if isinstance(parameters, list) else list(parameters)
        own = statement.parameters - len(shared)
        if rows and set(map(len, rows)) != {own}:  # flattened, a short row would shift the rest
            raise sqlite3.ProgrammingError(f"each row needs {own} parameters besides the shared")
        done = start = 0
        for size in VALUES_ROWS:
            while len(rows) - start >= size:
                block = itertools.chain.from_iterable(rows[start : start + size])
                text = values_text(statement, size, len(shared))
                done += self._cursor.execute(text, [*shared, *block]).rowcount
                start += size
        if start < len(rows):
            self._cursor.executemany(statement.sqlite, _each_with(rows[start:], shared))
            done += self._cursor.rowcount
        self._rowcount = done
        return self

    def returning(self, statement: Statement, rows: Sequence[Parameters], /) -> list[Any]:
        self._rowcount = None
        returned: list[Any] = []
        for row in rows:  # in process: a statement a row costs no round trip
            returned.extend(self._cursor.execute(statement.sqlite, row).fetchall())
        return returned

    def execute_all(self, queries: Sequence[Query], /) -> list[list[Any]]:
        self._rowcount = None
        return [
            self._cursor.execute(query.sqlite, parameters).fetchall()
            for query, parameters in queries
        ]

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()


def open_database(location: str | Path = ":memory:", lease: float = DEFAULT_LEASE) -> Database:
    """The database a store location names: a PostgreSQL URL (its transactions bounded by the
    replicas' `lease`), or a SQLite file (`:memory:`). libpq's other form (`host=db dbname=vg`)
    is refused, rather than taken for a file name."""
    if is_postgres_url(location):
        from .postgres import PostgresDatabase  # the driver is loaded only for such a store

        return PostgresDatabase(str(location), lease)
    if re.match(r"\w+=\S*(\s+\w+=\S*)*\s*$", str(location)):
        raise StoreError(
            "a PostgreSQL store is named by a URL: postgresql://user@host:port/database"
        )
    return SqliteDatabase(location)
