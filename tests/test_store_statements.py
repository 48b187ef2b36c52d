"""Every statement of the store, run on SQLite and on a real PostgreSQL: each is written once,
with the pieces that differ given in each dialect, and each driver's text made when it is built
(never rewritten at run time). Values a parameter may hold come from PostgreSQL's reading of
the statement (PREPARE), so a statement one dialect cannot run fails here."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postgres_support import StoreMaker
from verdictgate.errors import StoreError
from verdictgate.receiver.store import Store
from verdictgate.receiver.store.connection import CopyRepeated, Database, open_database
from verdictgate.receiver.store.faults import first_line
from verdictgate.receiver.store.postgres import BULK_ROWS
from verdictgate.receiver.store.schema import (
    ADDED_COLUMNS,
    INDEXES,
    SHARED_INDEXES,
    TABLES,
    migrate,
)
from verdictgate.receiver.store.statements import (
    IS_DISTINCT_FROM,
    IS_NOT_DISTINCT_FROM,
    SKIP_LOCKED,
    STATEMENTS,
    Each,
    Statement,
    values_text,
)

KINDS = ["sqlite", "postgresql"]
PLAUSIBLE = {
    "text": "r1",
    "name": "runs",  # a table's, in the information schema
    "bigint": 1,
    "integer": 1,
    "double precision": 1.5,
    "bytea": b"\x90",
}
"""A value for a parameter of each type PostgreSQL reads the store's parameters as."""


@contextmanager
def database(kind: str, server: str, directory: Path, name: str) -> Iterator[Database]:
    """A fresh database of that kind (a SQLite file, or a PostgreSQL database), closed after."""
    maker = StoreMaker(kind, directory, server if kind == "postgresql" else None)
    opened = open_database(maker.location(name))
    try:
        yield opened
    finally:
        opened.close()


def parameter_types(server: str, directory: Path) -> dict[Statement, list[str]]:
    """The type PostgreSQL reads each parameter of each statement as, on a store's tables."""
    location = StoreMaker("postgresql", directory, server).location("types")
    with closing(open_database(location)) as store:
        migrate(store)
    types = {}
    with psycopg.connect(location, autocommit=True) as connection:
        for statement in STATEMENTS:
            if statement.parameters:
                try:
                    connection.execute(f"PREPARE probe AS {statement.postgres}")
                except psycopg.Error as error:
                    pytest.fail(f"PostgreSQL cannot read {statement.postgres}: {first_line(error)}")
                (types[statement],) = connection.execute(
                    "SELECT parameter_types::text[] FROM pg_prepared_statements"
                    " WHERE name = 'probe'"
                ).fetchone() or ([],)
                connection.execute("DEALLOCATE probe")
    return types


@pytest.mark.parametrize("kind", KINDS)
def test_every_statement_runs_on_either_store(
    kind: str, postgres_server: str, tmp_path: Path
) -> None:
    types = parameter_types(postgres_server, tmp_path)
    columns_added = {statement for added in ADDED_COLUMNS.values() for statement in added.values()}
    builds = {index.build: index for index in INDEXES + SHARED_INDEXES}
    failed = []
    with database(kind, postgres_server, tmp_path, "store") as store:
        migrate(store)
        for statement in STATEMENTS:
            if statement in columns_added:
                continue
            if statement in builds:  # on a table in use, outside any transaction
                if kind == "postgresql" and builds[statement].table == "trials":
                    continue  # partitioned: its indexes are made with it (test_trial_days)
                try:
                    store.build_index(builds[statement])
                except Exception as error:
                    failed.append(f"{statement.postgres}: {first_line(error)}")
                continue
            values = [PLAUSIBLE[type_] for type_ in types.get(statement, [])]
            rows = [
                [f"{value}{n}" if isinstance(value, str) else value for value in values]
                for n in range(BULK_ROWS)
            ]
            try:
                with store.transaction() as cursor:
                    cursor.execute(statement, values)
                    if statement.postgres_arrays and " RETURNING " in statement.sqlite:
                        assert len(cursor.returning(statement, rows)) == BULK_ROWS
                    elif statement.postgres_arrays is not None:
                        cursor.executemany(statement, rows)
                        if statement.sqlite.startswith("INSERT"):  # others find no such rows
                            assert cursor.rowcount == BULK_ROWS
            except Exception as error:
                failed.append(f"{statement.sqlite}: {first_line(error)}")
    with database(kind, postgres_server, tmp_path, "first release") as store:
        with store.transaction() as cursor:  # every table as the first release made it
            for table in ADDED_COLUMNS:
                cursor.execute(Statement.of(f"CREATE TABLE {table} (first_column TEXT)"))
        for added in ADDED_COLUMNS.values():
            for statement in added.values():
                try:
                    with store.transaction() as cursor:
                        cursor.execute(statement)
                except Exception as error:
                    failed.append(f"{statement.sqlite}: {first_line(error)}")
    assert failed == []


def test_a_copied_insert_adds_and_returns_what_the_insert_as_written_would(
    postgres_server: str, tmp_path: Path
) -> None:
    """Each insert with a copied form (`Statement.postgres_copy`), on PostgreSQL: rows all new
    are copied; rows of which some repeat held ones fail the copying transaction
    (`CopyRepeated`), which done again without copying inserts them as written, and either way
    the rows added, and those returned, are the ones SQLite adds row by row."""
    types = parameter_types(postgres_server, tmp_path)
    copied = [statement for statement in STATEMENTS if statement.postgres_copy is not None]
    assert copied, "no insert is copied"

    def rows(statement: Statement, numbers: range) -> list[list[object]]:
        values = [PLAUSIBLE[type_] for type_ in types[statement]]
        return [
            [f"{value}{n}" if isinstance(value, str) else value for value in values]
            for n in numbers
        ]

    def insert(store: Database, statement: Statement, numbers: range) -> tuple[int, list[Any]]:
        """What the insert adds and returns, copying first, then as written on a repeat."""
        for copying in (True, False):
            try:
                with store.transaction(copying) as cursor:
                    if " RETURNING " in statement.sqlite:
                        returned = cursor.returning(statement, rows(statement, numbers))
                        return len(returned), sorted(map(tuple, returned))
                    cursor.executemany(statement, rows(statement, numbers))
                    return cursor.rowcount, []
            except CopyRepeated:
                repeats.append(statement)
        raise AssertionError("inserted as written, it still failed")

    outcomes: dict[str, list[tuple[int, list[Any]]]] = {}
    repeats: list[Statement] = []
    for kind in KINDS:
        with database(kind, postgres_server, tmp_path, f"copied {kind}") as store:
            migrate(store)
            outcome = outcomes.setdefault(kind, [])
            for statement in copied:
                for numbers in (range(BULK_ROWS), range(BULK_ROWS // 2, BULK_ROWS * 2)):
                    outcome.append(insert(store, statement, numbers))
    assert outcomes["postgresql"] == outcomes["sqlite"]
    assert [added for added, _ in outcomes["postgresql"]] == [BULK_ROWS, BULK_ROWS] * len(copied)
    assert repeats == copied  # each copy of repeats failed, on PostgreSQL only


def test_both_dialects_make_the_same_tables(postgres_server: str, tmp_path: Path) -> None:
    columns = {}
    for kind in KINDS:
        with database(kind, postgres_server, tmp_path, "tables") as store:
            migrate(store)
            with store.locked() as cursor:
                columns[kind] = {table: store.columns(cursor, table) for table in TABLES}
    assert columns["sqlite"] == columns["postgresql"]
    for table, added in ADDED_COLUMNS.items():
        assert set(added) <= columns["sqlite"][table]


def test_each_dialect_gets_its_text_when_the_statement_is_built() -> None:
    statement = Statement.of(
        "SELECT run_id FROM runs WHERE suite",
        IS_NOT_DISTINCT_FROM,
        "? AND point",
        IS_DISTINCT_FROM,
        "? LIMIT ?",
        SKIP_LOCKED,
    )
    assert statement.sqlite == (
        "SELECT run_id FROM runs WHERE suite IS ? AND point IS NOT ? LIMIT ?"
    )
    assert statement.postgres == (
        "SELECT run_id FROM runs WHERE suite IS NOT DISTINCT FROM $1 AND point"
        " IS DISTINCT FROM $2 LIMIT $3 FOR UPDATE SKIP LOCKED"
    )
    assert statement.parameters == 3


@pytest.mark.parametrize(
    "pieces",
    [
        ("SELECT '?'",),  # the marker inside a literal
        ("SELECT 1 -- why?",),
        ('SELECT "a?" FROM runs',),
        ("SELECT 'open",),
        ("SELECT ?1",),  # SQLite's numbered marker
        ("SELECT $1",),  # PostgreSQL's
        ("SELECT :name",),  # SQLite's named one
        (Each("SELECT ?", "SELECT 1"),),  # dialects that take different parameters
    ],
)
def test_a_statement_a_dialect_would_read_otherwise_is_refused_when_built(
    pieces: tuple[str | Each, ...],
) -> None:
    with pytest.raises(ValueError):
        Statement.of(*pieces)


@pytest.mark.parametrize("kind", KINDS)
def test_literals_reach_either_store_as_written(
    kind: str, postgres_server: str, tmp_path: Path
) -> None:
    with database(kind, postgres_server, tmp_path, "literals") as store:
        migrate(store)
        with store.locked() as cursor:
            row = cursor.execute(
                Statement.of("SELECT ?, 'a%', 'it''s $1 :x @y %s', ? LIKE 'a%' -- 100%"),
                ("v", "abc"),
            ).fetchone()
        assert tuple(row) == ("v", "a%", "it's $1 :x @y %s", True if kind != "sqlite" else 1)
        insert = Statement.of(
            "INSERT INTO traces (trace_id, last_seen) VALUES (?, ?)"
            " ON CONFLICT DO NOTHING RETURNING trace_id"
        )
        with store.transaction() as cursor:
            assert cursor.execute(insert, ("t1", 1.0)).fetchall() == [("t1",)]
            assert cursor.execute(insert, ("t1", 2.0)).fetchall() == []


@pytest.mark.parametrize("kind", KINDS)
def test_any_literal_text_reaches_either_store_unchanged(
    kind: str, postgres_server: str, tmp_path: Path
) -> None:
    with database(kind, postgres_server, tmp_path, "any literal") as store:

        @settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00?")))
        def reaches(text: str) -> None:
            literal = "'" + text.replace("'", "''") + "'"
            with store.locked() as cursor:
                row = cursor.execute(Statement.of(f"SELECT ?, {literal}"), (1,)).fetchone()
            assert tuple(row) == (1, text)

        reaches()


def test_a_sqlite_older_than_the_statements_need_is_refused_in_one_line(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.34.1")
    with pytest.raises(StoreError, match=r"needs SQLite 3\.35 or later; this Python's is 3\.34\.1"):
        Store(tmp_path / "store.sqlite")
    result = cli("serve", "--store", str(tmp_path / "store.sqlite"), "--grpc-listen", "127.0.0.1:0")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "SQLite 3.35" in result.output
    assert not (tmp_path / "store.sqlite").exists()


def test_a_transaction_of_many_copies_holds_no_subtransaction(
    postgres_server: str, tmp_path: Path
) -> None:
    """A copy is all or none with its transaction, never undone alone: a transaction of many
    copies holds its own transaction id only (no subtransaction, whose ids past 64 every
    session's snapshot would look up on disk), and stores every row."""
    from verdictgate.receiver.store.statements import insert_rows

    insert = insert_rows("settled_spans", {"trace_id": "text", "span_id": "text", "mark": "text"})
    held = Statement.of(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND pid = pg_backend_pid()"
    )
    with database("postgresql", postgres_server, tmp_path, "copies") as store:
        migrate(store)
        with store.transaction(copying=True) as cursor:
            for write in range(100):
                rows = [(f"t{write}", f"s{n}", "m") for n in range(BULK_ROWS)]
                cursor.executemany(insert, rows)
                assert cursor.rowcount == BULK_ROWS
            (transactions,) = cursor.execute(held).fetchone()
        with store.transaction() as cursor:
            (stored,) = cursor.execute(
                Statement.of("SELECT count(*) FROM settled_spans")
            ).fetchone()
    assert transactions == 1 and stored == 100 * BULK_ROWS


TRIALS_INSERT = next(s for s in STATEMENTS if s.sqlite.startswith("INSERT INTO trials "))
STORED_TRIALS = Statement.of(
    "SELECT run_id, case_id, trial, decision, latency_ms, batch, day, relayed FROM trials"
    " ORDER BY run_id, case_id, trial"
)
TRIAL_IDENTITIES = st.tuples(st.sampled_from(["r1", "r2"]), st.sampled_from(["c1", "c2"]))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            TRIAL_IDENTITIES,
            st.integers(0, 40),
            st.sampled_from(["l:a", "l:b", None]),
            st.sampled_from([None, 1.5]),
        ),
        max_size=150,
    )
)
def test_rows_in_one_statement_add_what_one_row_at_a_time_would(rows) -> None:
    """SQLite takes an insert's rows many to a statement (`values_text`), the shared parameters
    given once: whatever the rows' number and repeats (within a statement, across two), it adds
    the rows, counts them and keeps the first of a repeat as one statement a row does."""
    parameters = [
        (run, case, trial, decision, "l:a", None, latency, None, None)
        for (run, case), trial, decision, latency in rows
    ]
    shared = (7, 0, 1)  # batch, day, relayed
    outcomes = []
    for together in (True, False):
        store = open_database()
        migrate(store)
        with store.transaction() as cursor:
            if together:
                before = values_text.cache_info()
                added = cursor.executemany(TRIALS_INSERT, parameters, shared=shared).rowcount
                made = values_text.cache_info()
                blocks = made.hits + made.misses - before.hits - before.misses
                assert blocks == len(parameters) // 64 + len(parameters) % 64 // 16 + (
                    len(parameters) % 16 // 4
                )  # the rows went in blocks, and the last few one a row
            else:
                added = sum(
                    cursor.execute(TRIALS_INSERT, (*row, *shared)).rowcount for row in parameters
                )
            stored = cursor.execute(STORED_TRIALS).fetchall()
        outcomes.append((added, stored))
        store.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == len({(run, case, trial) for (run, case), trial, *_ in rows})


def test_only_an_insert_of_rows_takes_many_rows_in_one_statement() -> None:
    """Shared parameters are numbered once and used by every row; a statement that is not an
    insert of rows, or one of rows of the wrong length, is refused."""
    text = values_text(TRIALS_INSERT, 2, 3)
    assert re.findall(r"\?1\b", text) == ["?1", "?1"]  # shared: given once, used by each row
    with pytest.raises(ValueError, match="insert of rows"):
        values_text(Statement.of("UPDATE runs SET final = 1 WHERE run_id = ?"), 2, 0)
    store = open_database()
    migrate(store)
    with (
        pytest.raises(sqlite3.ProgrammingError, match="each row needs 9"),
        store.transaction() as cursor,
    ):
        cursor.executemany(TRIALS_INSERT, [("r", "c", 1)] * 4, shared=(7, 0, 1))
