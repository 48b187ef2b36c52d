"""Which of psycopg's bulk paths holds a request's framework spans fastest on PostgreSQL: each
request's 512 span facts inserted into `trace_spans` (first copy wins, the new ones returned, as
`HeldSpans.hold` needs them) and committed, five ways:

- pipeline: `executemany` of the one-row insert, pipelined, each row's `RETURNING` read back;
- unnest: one insert over arrays of the columns (`unnest`, in binary: `Statement.postgres_arrays`,
  what the store runs when a row of the request is held already);
- COPY into a temporary table, then one insert from it;
- COPY in a savepoint: the rows copied in, undone alone when one is held already;
- COPY straight in (`Statement.postgres_copy`, what the store runs first): all or none with its
  transaction, which a row held already fails (the store then does it again over arrays).

Starts PostgreSQL from the Debian package in a scratch directory (fsync on, so each commit is
durable), then, in rounds that alternate the five on fresh stores, prints each one's spans a
second (the median round) and its ratio to the pipeline's.

    python benchmarks/postgres_bulk.py [--requests 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import msgspec
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_support import postgresql
from verdictgate.receiver.store import Store
from verdictgate.span_facts import SpanFacts

SPANS_PER_REQUEST = 512
ONE_ROW = (
    "INSERT INTO trace_spans (trace_id, span_id, facts, parent_id) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT DO NOTHING RETURNING trace_id, span_id"
)
ARRAYS = (
    "INSERT INTO trace_spans (trace_id, span_id, facts, parent_id) SELECT * FROM"
    " unnest(%b::text[], %b::text[], %b::bytea[], %b::text[])"
    " ON CONFLICT DO NOTHING RETURNING trace_id, span_id"
)
Row = tuple[str, str, bytes, str | None]


def requests(count: int) -> list[list[Row]]:
    """Strands-shaped span facts (7 a trial, each trial its own trace), 512 a request."""
    pack = msgspec.msgpack.Encoder()
    rows: list[Row] = []
    for trial in range(count * SPANS_PER_REQUEST // 7 + 1):
        trace = f"{trial + 1:032x}"
        for n in range(7):
            span, parent = f"{trial * 8 + n + 1:016x}", f"{trial * 8 + max(n // 2, 1):016x}"
            facts = SpanFacts(span, parent if n else None, 1_000 + n, tool="refund")
            rows.append((trace, span, pack.encode(facts), parent if n else None))
    return [
        rows[start : start + SPANS_PER_REQUEST]
        for start in range(0, count * SPANS_PER_REQUEST, SPANS_PER_REQUEST)
    ]


def pipeline(cursor: psycopg.Cursor[tuple[str, str]], rows: list[Row]) -> int:
    cursor.executemany(ONE_ROW, rows, returning=True)
    held = 0
    while True:
        held += len(cursor.fetchall())
        if not cursor.nextset():
            return held


def arrays(cursor: psycopg.Cursor[tuple[str, str]], rows: list[Row]) -> int:
    cursor.execute(ARRAYS, [list(column) for column in zip(*rows, strict=True)])
    return len(cursor.fetchall())


def copied(cursor: psycopg.Cursor[tuple[str, str]], rows: list[Row]) -> int:
    cursor.execute(
        "CREATE TEMPORARY TABLE IF NOT EXISTS incoming (trace_id TEXT, span_id TEXT,"
        " facts BYTEA, parent_id TEXT) ON COMMIT DELETE ROWS"
    )
    with cursor.copy("COPY incoming FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["text", "text", "bytea", "text"])
        for row in rows:
            copy.write_row(row)
    cursor.execute(
        "INSERT INTO trace_spans SELECT * FROM incoming ON CONFLICT DO NOTHING"
        " RETURNING trace_id, span_id"
    )
    return len(cursor.fetchall())


def copied_straight(cursor: psycopg.Cursor[tuple[str, str]], rows: list[Row]) -> int:
    with cursor.copy(
        "COPY trace_spans (trace_id, span_id, facts, parent_id) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["text", "text", "bytea", "text"])
        for row in rows:
            copy.write_row(row)
    return len(rows)


def copied_in_savepoint(cursor: psycopg.Cursor[tuple[str, str]], rows: list[Row]) -> int:
    cursor.execute("SAVEPOINT bulk_copy")
    copied = copied_straight(cursor, rows)
    cursor.execute("RELEASE SAVEPOINT bulk_copy")
    return copied


WAYS: dict[str, Callable[[psycopg.Cursor[tuple[str, str]], list[Row]], int]] = {
    "pipeline (executemany)": pipeline,
    "unnest (one insert over arrays)": arrays,
    "COPY into a temporary table, then insert": copied,
    "COPY in a savepoint": copied_in_savepoint,
    "COPY straight in": copied_straight,
}


def fresh_store(server: str) -> str:
    name = f"b_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    location = server.rpartition("/")[0] + "/" + name
    Store(location).close()
    return location


def rate(server: str, way: Callable[..., int], batches: list[list[Row]]) -> float:
    """Spans a second the way holds, a request a transaction, on a fresh store."""
    with psycopg.connect(fresh_store(server)) as connection:
        started = time.perf_counter()
        for rows in batches:
            with connection.transaction(), connection.cursor() as cursor:
                assert way(cursor, rows) == len(rows)
        return sum(map(len, batches)) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batches = requests(args.requests)
    measured: dict[str, list[float]] = {name: [] for name in WAYS}
    with postgresql(fsync=True) as server:
        for _ in range(args.rounds):
            for name, way in WAYS.items():
                measured[name].append(rate(server, way, batches))
    base = statistics.median(measured["pipeline (executemany)"])
    print(f"{args.requests} requests of {SPANS_PER_REQUEST} framework spans, a transaction each")
    for name, rates in measured.items():
        median = statistics.median(rates)
        print(f"  {name:42} {median:9,.0f} spans/s ({median / base:.2f}x the pipeline)")


if __name__ == "__main__":
    main()
