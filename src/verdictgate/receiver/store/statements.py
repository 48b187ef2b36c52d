"""Statements both stores run, each written once, with `?` for each of its parameters: in SQL
that SQLite and PostgreSQL both take, and where the dialects differ, with the piece that differs
given in each side by side (`Each`). Each driver's text is made when the statement is built, at
import (sqlite3's `?`, psycopg's raw `$1`, `$2`, ...), never rewritten at run time; every
statement built is kept in `STATEMENTS`, so that a test runs them all on both stores."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import NamedTuple


class BulkCopy(NamedTuple):
    """An insert of many new rows as PostgreSQL's binary `COPY` (the fastest path psycopg has,
    on both sides: `benchmarks/postgres_bulk.py`), for an insert that adds every row or skips
    the ones it holds (`ON CONFLICT DO NOTHING`): when a row repeats, the copy is undone and
    the insert runs as written."""

    text: str
    """`COPY table (columns) FROM STDIN (FORMAT BINARY)`."""
    types: tuple[str, ...]
    """Each column's PostgreSQL type, in the row's order."""
    returned: tuple[int, ...]
    """The columns the insert returns (`RETURNING`), as positions in a row: every row copied is
    one it added."""


class Each(NamedTuple):
    """A piece of a statement each dialect spells its own way."""

    sqlite: str
    postgres: str


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement in each driver's text."""

    sqlite: str
    """sqlite3's: `?` for each parameter."""
    postgres: str
    """psycopg's raw form (`RawCursor`): `$1`, `$2`, ... for the parameters in order."""
    parameters: int
    """How many parameters it takes."""
    postgres_arrays: str | None = None
    """For a statement of one row, the same statement of many rows on PostgreSQL: each
    column's values as one array, in the row's order (see `insert_rows`, `each_row`)."""
    postgres_copy: BulkCopy | None = None
    """For an insert of rows (`insert_rows`) that adds each or skips it, the same rows copied."""
    postgres_literal: str = field(default="", repr=False)
    """psycopg's client-side form (`ClientCursor`): `%s` for each parameter (a `%` of the text
    doubled), its values bound as literals by the driver, so that it travels with others in one
    simple query: one round trip for them all. Made from the text above (left out of the repr
    that fingerprints the schema)."""
    sqlite_values: tuple[str, str] | None = field(default=None, repr=False)
    """For an insert of one row (`insert_rows`) that returns nothing and has no parameter after
    its values, SQLite's text before and after them, so that many rows go in one statement
    (`values_text`). Made from the text above, so left out of the repr that fingerprints the
    schema."""

    @classmethod
    def of(cls, *pieces: str | Each) -> Statement:
        """The statement the pieces make, in order: text both dialects take, and `Each`
        pieces. ValueError when a `?` is inside a literal, a quoted name or a comment, when the
        dialects' texts take different numbers of parameters, or when a text holds another
        marker of parameters (`?1`, `$`; in SQLite's, `:` and `@` too)."""
        sqlite = _between_markers("".join(_spelling(piece, 0) for piece in pieces), ":@$")
        postgres = _between_markers("".join(_spelling(piece, 1) for piece in pieces), "$")
        if len(sqlite) != len(postgres):
            raise ValueError(f"the dialects take different parameters: {'?'.join(sqlite)!r}")
        literal = "%s".join(piece.replace("%", "%%") for piece in postgres)
        return cls("?".join(sqlite), _numbered(postgres), len(sqlite) - 1, postgres_literal=literal)


STATEMENTS: list[Statement] = []
"""Every statement of the store (`sql`, `insert_rows`, `each_row`), in the order built."""

SKIP_LOCKED = Each("", " FOR UPDATE SKIP LOCKED")
"""What a claiming `SELECT` ends with, so that replicas claim different rows (a SQLite store
has one writer at a time)."""
IS_NOT_DISTINCT_FROM = Each(" IS ", " IS NOT DISTINCT FROM ")
"""Equal, NULL equal to NULL (SQLite spells it `IS` before 3.39)."""
IS_DISTINCT_FROM = Each(" IS NOT ", " IS DISTINCT FROM ")
"""Not equal, NULL equal to NULL (SQLite spells it `IS NOT` before 3.39)."""


def sql(*pieces: str | Each) -> Statement:
    """A statement of the store (`Statement.of`), kept in STATEMENTS."""
    return _kept(Statement.of(*pieces))


def insert_rows(table: str, columns: dict[str, str], then: str = "") -> Statement:
    """An insert of one row into `table`'s `columns` (each given with its PostgreSQL type), and
    what follows it (`then`), which PostgreSQL also takes for many rows at once: each column's
    values as one array (`Statement.postgres_arrays`)."""
    names = ", ".join(columns)
    head = f"INSERT INTO {table} ({names}) VALUES "
    row = Statement.of(f"{head}({', '.join('?' * len(columns))}){then}")
    arrays = ", ".join(f"?::{kind}[]" for kind in columns.values())
    in_arrays = _between_markers(
        f"INSERT INTO {table} ({names}) SELECT * FROM unnest({arrays}){then}", "$"
    )
    return _kept(
        replace(
            row,
            postgres_arrays=_numbered(in_arrays),
            postgres_copy=_bulk_copy(table, columns, then),
            sqlite_values=None if "?" in then or " RETURNING " in then else (head, then),
        )
    )


@functools.lru_cache(maxsize=64)
def values_text(statement: Statement, rows: int, shared: int) -> str:
    """SQLite's text of an insert of one row (`insert_rows`) for `rows` rows in one statement,
    the last `shared` parameters of every row bound once, as its first: its parameters are the
    shared ones, then each row's own, row after row. A row then costs its values alone, not a
    statement's step: 2.8 against 3.9 us a trial row, measured in isolation (docs/benchmarks.md)."""
    if statement.sqlite_values is None:
        raise ValueError("only an insert of rows (`insert_rows`) takes many rows at once")
    head, then = statement.sqlite_values
    own = statement.parameters - shared
    tail = "".join(f", ?{number}" for number in range(1, shared + 1))
    numbered = ", ".join(f"?{number}" for number in range(shared + 1, shared + own + 1))
    first = f"({numbered}{tail})"  # numbered: a bare `?` after it is the next number
    later = f"({', '.join('?' * own)}{tail})"
    return head + ", ".join([first, *[later] * (rows - 1)]) + then


def _bulk_copy(table: str, columns: dict[str, str], then: str) -> BulkCopy | None:
    """The copy of an insert's rows, when what follows its values (`then`) is nothing, or
    `ON CONFLICT DO NOTHING` and perhaps `RETURNING` some of its columns; None otherwise (an
    insert that updates the rows it holds)."""
    rest = then.removeprefix(" ON CONFLICT DO NOTHING")
    returned = rest.removeprefix(" RETURNING ")
    if returned == rest != "":
        return None
    names = list(columns)
    positions = [name.strip() for name in returned.split(",")] if returned else []
    if not set(positions) <= set(names):
        return None
    return BulkCopy(
        f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)",
        tuple(columns.values()),
        tuple(names.index(name) for name in positions),
    )


def each_row(row: str, arrays: str) -> Statement:
    """A statement run once a row (`row`, in SQL both dialects take), with the one statement
    PostgreSQL runs instead for many rows (`arrays`: the same parameters in the same order, each
    given the column of the rows' values as an array, cast to its type); ValueError when the
    two take different numbers of parameters."""
    one = Statement.of(row)
    many = _between_markers(arrays, "$")
    if len(many) - 1 != one.parameters:
        raise ValueError(f"the form over arrays takes other parameters: {arrays!r}")
    return _kept(replace(one, postgres_arrays=_numbered(many)))


class Index(NamedTuple):
    """An index of the store, made with its table or built on a table in use."""

    table: str
    name: str
    create: Statement
    """Inside the transaction that creates its table."""
    build: Statement
    """On a table in use, outside any transaction: `CONCURRENTLY` on PostgreSQL, so that its
    writers go on meanwhile."""
    definition: str = ""
    """Its columns, and a `WHERE` for a partial one (an index of each partition of a
    partitioned table is made from it: `trial_days.build_index`)."""


def index(name: str, table: str, definition: str) -> Index:
    """The index `name` on `table` (`definition`: its columns, and a `WHERE` for a partial one),
    its statements kept in STATEMENTS."""
    on = f" {name} ON {table} {definition}"
    return Index(
        table,
        name,
        sql("CREATE INDEX IF NOT EXISTS", on),
        sql(Each("CREATE INDEX IF NOT EXISTS", "CREATE INDEX CONCURRENTLY IF NOT EXISTS"), on),
        definition,
    )


def _kept(statement: Statement) -> Statement:
    """A statement, kept in STATEMENTS."""
    STATEMENTS.append(statement)
    return statement


def _spelling(piece: str | Each, dialect: int) -> str:
    """A piece as one dialect spells it (0: SQLite, 1: PostgreSQL)."""
    return piece if isinstance(piece, str) else piece[dialect]


def _between_markers(text: str, refused: str) -> list[str]:
    """The text between its `?` markers (outside literals, quoted names and comments); a
    `refused` character outside them, or a `?` inside one, is a ValueError."""
    pieces, start, at = [], 0, 0
    while at < len(text):
        end = _quoted_end(text, at)
        if end is not None:
            if "?" in text[at:end]:
                raise ValueError(
                    f"a `?` marks a parameter, never in a literal or comment: {text!r}"
                )
            at = end
        elif text[at] == "?":
            if text[at + 1 : at + 2].isdigit():
                raise ValueError(f"a `?` with a number is SQLite's marker alone: {text!r}")
            pieces.append(text[start:at])
            start = at = at + 1
        elif text[at] in refused:
            raise ValueError(f"{text[at]!r} marks a parameter in a dialect: {text!r}")
        else:
            at += 1
    pieces.append(text[start:])
    return pieces


def _quoted_end(text: str, at: int) -> int | None:
    """Where the literal, quoted name or comment that opens at `at` ends (None when none opens
    there; ValueError when it never closes). A quote doubled inside a literal reads as two
    literals side by side: the same characters."""
    for opening, closing in _QUOTED:
        if text.startswith(opening, at):
            end = text.find(closing, at + len(opening))
            if end < 0 and opening != "--":
                raise ValueError(f"a literal, quoted name or comment is left open: {text!r}")
            return len(text) if end < 0 else end + len(closing)
    return None


_QUOTED = (("'", "'"), ('"', '"'), ("--", "\n"), ("/*", "*/"))
"""How a literal, a quoted name or a comment opens, and what closes it."""


def _numbered(pieces: list[str]) -> str:
    """PostgreSQL's text: the pieces joined by `$1`, `$2`, ..."""
    return pieces[0] + "".join(f"${n}{piece}" for n, piece in enumerate(pieces[1:], 1))
