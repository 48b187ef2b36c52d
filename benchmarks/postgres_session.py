"""What a pooler-safe session would cost a replica connected to PostgreSQL directly: statements
never prepared on the server (as through a pooler, against psycopg's default of 5, which a
direct connection keeps), and each transaction's bounds set in its `BEGIN` (`SET LOCAL`, one
simple query, on every connection), against a bare `BEGIN`.

Starts PostgreSQL from the Debian package in a scratch directory (fsync on), then, in rounds
that alternate the four settings on fresh databases, times a store's writes of one run's
trials (four a write, as a busy exporter sends them) and reads of that run; prints each
setting's rate (the median round) and its ratio to psycopg's defaults.

    python benchmarks/postgres_session.py [--writes 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_support import postgresql
from verdictgate import Trial
from verdictgate.receiver.store import Batch, Store, postgres

SETTINGS = {
    "prepared after 5, bare BEGIN": (5, lambda lease: "BEGIN"),
    "prepared after 5, bounds in BEGIN (direct)": (5, postgres.begin),
    "never prepared, bare BEGIN": (None, lambda lease: "BEGIN"),
    "never prepared, bounds in BEGIN (pooled)": (None, postgres.begin),
}


def fresh_database(server: str) -> str:
    name = f"b_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return server.rpartition("/")[0] + "/" + name


def rates(server: str, writes: int) -> tuple[float, float]:
    """Writes and reads a second, on a fresh store, with the module's settings as they are."""
    store = Store(fresh_database(server))
    started = time.perf_counter()
    for number in range(writes):
        store.write(
            Batch([Trial(f"c{case}", number, "approve", "r", "approve") for case in range(4)])
        )
    written = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(writes):
        store.run("r")
    read = time.perf_counter() - started
    store.close()
    return writes / written, writes / read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    measured: dict[str, list[tuple[float, float]]] = {name: [] for name in SETTINGS}
    with postgresql(fsync=True) as server:
        names = list(SETTINGS)
        for round_ in range(options.rounds):  # each round in another order: no setting is last
            for name in names[round_ % 4 :] + names[: round_ % 4]:
                postgres.PREPARE_THRESHOLD, postgres.begin = SETTINGS[name]
                measured[name].append(rates(server, options.writes))
    base_write, base_read = (
        statistics.median(rate[part] for rate in measured["prepared after 5, bare BEGIN"])
        for part in (0, 1)
    )
    for name, rounds in measured.items():
        write = statistics.median(rate[0] for rate in rounds)
        read = statistics.median(rate[1] for rate in rounds)
        print(
            f"{name:48} writes {write:7.0f}/s ({write / base_write:.2f})"
            f"  reads {read:7.0f}/s ({read / base_read:.2f})"
        )


if __name__ == "__main__":
    main()
