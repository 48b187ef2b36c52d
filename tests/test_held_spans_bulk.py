"""Framework spans are held, and let go, in bulk on both stores: the statements a write sends do
not grow with the spans and traces it carries (on PostgreSQL, each statement of many rows is one
statement over arrays of its columns), and what the write holds is the same either way."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from typing import Any

import pytest

from postgres_support import StoreMaker
from verdictgate.otel.framework_traces import FrameworkSpan, TrialMark
from verdictgate.receiver.store.connection import (
    Cursor,
    Database,
    Parameters,
    Query,
    open_database,
)
from verdictgate.receiver.store.held_spans import HeldSpans
from verdictgate.receiver.store.schema import migrate
from verdictgate.receiver.store.statements import Statement
from verdictgate.span_facts import SpanFacts


class CountingCursor:
    """A store's cursor that counts the calls it is given (each one statement sent)."""

    def __init__(self, cursor: Cursor) -> None:
        self._cursor = cursor
        self.calls = 0

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def execute(self, statement: Statement, parameters: Parameters = (), /) -> Cursor:
        self.calls += 1
        self._cursor.execute(statement, parameters)
        return self

    def executemany(self, statement: Statement, parameters: Iterable[Parameters], /) -> Cursor:
        self.calls += 1
        self._cursor.executemany(statement, parameters)
        return self

    def returning(self, statement: Statement, rows: Sequence[Parameters], /) -> list[Any]:
        self.calls += 1
        return self._cursor.returning(statement, rows)

    def execute_all(self, queries: Sequence[Query], /) -> list[list[Any]]:
        self.calls += len(queries)
        return self._cursor.execute_all(queries)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()


def trials(first: int, count: int) -> tuple[list[TrialMark], list[FrameworkSpan]]:
    """`count` trials, each in a trace of its own: a trial span with an agent span below it and
    five tool spans below that, the tool spans sent before their agent's."""
    marks, spans = [], []
    for number in range(first, first + count):
        trace, mark, agent = f"{number:032x}", f"{number:08x}00000000", f"{number:08x}00000001"
        marks.append(TrialMark(trace, mark, "r1", f"c{number}", 0, "tools"))
        spans.extend(
            FrameworkSpan(trace, SpanFacts(f"{number:08x}0000001{n}", agent, 10 + n, tool="t"))
            for n in range(5)
        )
        spans.append(FrameworkSpan(trace, SpanFacts(agent, mark, 1, agent="support")))
    return marks, spans


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Database]:
    """A fresh, migrated database of each kind."""
    server = request.getfixturevalue("postgres_server") if request.param == "postgresql" else None
    with closing(open_database(StoreMaker(request.param, tmp_path, server).location())) as opened:
        migrate(opened)
        yield opened


def test_a_writes_spans_take_as_many_statements_however_many_traces_it_holds(
    database: Database,
) -> None:
    """One trial, then 73 (511 spans, a request's worth, in 73 traces): the same statements, and
    every span placed below its trial (none waits for a trial span it already has)."""
    with database.transaction() as cursor:
        held = HeldSpans(cursor)
    calls = []
    for first, count in ((0, 1), (1, 73)):
        marks, spans = trials(first, count)
        with database.transaction() as cursor:
            counting = CountingCursor(cursor)
            intake = held.hold(counting, marks, spans, now=1.0)
        calls.append(counting.calls)
        assert intake.held == len(spans) == 6 * count
        assert intake.heard == {"r1"} and intake.late == {} and intake.dropped == 0
    assert calls[0] == calls[1]
    with database.transaction() as cursor:
        assert held.count(cursor) == 6 * 74


def test_letting_go_of_settled_traces_takes_as_many_statements_however_many(
    database: Database,
) -> None:
    """Settled traces let go once quiet, one, then 73: the same statements, every span gone, and a
    copy of a settled span sent again is late, not held."""
    with database.transaction() as cursor:
        held = HeldSpans(cursor)
    calls = []
    for now, (first, count) in enumerate(((0, 1), (1, 73)), 1):
        marks, spans = trials(first, count)
        with database.transaction() as cursor:
            held.hold(cursor, marks, spans, now=float(now))
            below = [[s.facts.span_id for s in spans if s.trace_id == m.trace_id] for m in marks]
            held.settle(
                cursor,
                [(m.trace_id, [(m.span_id, ids)]) for m, ids in zip(marks, below, strict=True)],
            )
        with database.transaction() as cursor:
            counting = CountingCursor(cursor)
            assert held.release_settled(counting, before=now + 0.5, limit=1000) == count
        calls.append(counting.calls)
    assert calls[0] == calls[1]
    with database.transaction() as cursor:
        assert held.count(cursor) == 0
        again = held.hold(cursor, *trials(5, 1), now=3.0, amend_since=10.0)
    assert again.held == 0 and again.late == {"r1": 6}
