"""Round trips a PostgreSQL write makes, and what they cost once the server is a network hop
away: each request's 512 decision trials written to a run the store knows (the common write),
through a relay that delays every packet by `--delay` milliseconds each way and counts the
turns of the conversation (each time the server answers after the client spoke: one round
trip).

On this machine the store's server shares the receiver's two cores and answers within tens of
microseconds, so ingest is bound by CPU (`benchmarks/replicas.py`); a deployment's database is
usually another host, 0.2-1 ms away, where every round trip a write saves is that much less
time holding the write path. Starts PostgreSQL from the Debian package in a scratch directory
(fsync on), then, for each delay, prints the round trips a write made and the writes a second.

    python benchmarks/postgres_round_trips.py [--writes 100] [--delay 0 --delay 0.5]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_support import postgresql
from relay_support import TurnCountingRelay, address, relayed
from verdictgate.receiver.store import Batch, Store
from verdictgate.trial_model import Trial

TRIALS_PER_WRITE = 512


def requests(count: int, run: str) -> list[list[Trial]]:
    """`count` requests of TRIALS_PER_WRITE decision trials of one run, 100 cases each."""
    trials = [
        Trial(f"sha256:{n // 100:064x}", n % 100, "refund", run, "refund")
        for n in range(count * TRIALS_PER_WRITE)
    ]
    return [trials[at : at + TRIALS_PER_WRITE] for at in range(0, len(trials), TRIALS_PER_WRITE)]


def measure(server: str, delay_ms: float, writes: int) -> tuple[float, float]:
    """Round trips a write and writes a second, through a relay of `delay_ms` each way."""
    name = f"rt_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    relay = TurnCountingRelay(address(server), delay_ms / 1000)
    store = Store(relayed(server.rpartition("/")[0] + "/" + name, relay.port))
    try:
        run = f"run-{uuid.uuid4().hex[:8]}"
        batches = requests(writes + 1, run)
        store.write(Batch(batches[0]))  # the run made: later writes only add to it
        turns, started = relay.turns, time.perf_counter()
        for batch in batches[1:]:
            store.write(Batch(batch))
        elapsed = time.perf_counter() - started
        return (relay.turns - turns) / writes, writes / elapsed
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--delay", type=float, action="append")
    args = parser.parse_args()
    with postgresql(fsync=True) as server:
        print(f"writes of {TRIALS_PER_WRITE} decision trials to a known run, one at a time")
        for delay in args.delay or [0.0, 0.5]:
            trips, rate = measure(server, delay, args.writes)
            print(
                f"  {delay:4.2f} ms each way: {trips:4.1f} round trips a write,"
                f" {rate:6.1f} writes/s ({rate * TRIALS_PER_WRITE:8,.0f} trials/s)"
            )


if __name__ == "__main__":
    main()
