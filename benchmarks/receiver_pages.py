"""How fast `verdictgate serve` answers its pages: `GET /` (the newest 200 runs; filtered by
status, and by a suite no run has, which reads every run), and `GET /runs/{id}` of a run with
904 trials, in a store of 1,000 runs and of 100,000.

    python benchmarks/receiver_pages.py [--runs 1000 100000] [--requests 20]
"""

from __future__ import annotations

import argparse
import http.client
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verdictgate.receiver.store import Store, encode_decision

STATUSES = ("qualified", "rejected", "inconclusive")


def fill(store: Path, runs: int) -> None:
    """`runs` runs of a canary fleet, a few still open; the newest holds 904 trials."""
    Store(store).close()
    start = time.time() - runs * 60
    with sqlite3.connect(store) as connection:
        connection.executemany(
            "INSERT INTO runs (run_id, suite, point, planned_trials, first_seen, last_seen,"
            " status, final, received, finished_at) VALUES (?, ?, 'router', 904, ?, ?, ?, ?, 904, ?)",
            [
                (f"run-{n}", f"suite-{n % 7}", start + 60 * n, start + 60 * n + 30,
                 STATUSES[n % 3], int(n % 50 != 0), start + 60 * n + 30)
                for n in range(runs)
            ],
        )  # fmt: skip
        newest = f"run-{runs - 1}"
        connection.executemany(
            "INSERT INTO trials (run_id, case_id, trial, decision, expected, batch)"
            " VALUES (?, ?, ?, ?, ?, 0)",
            [
                (newest, f"c{c}", i, encode_decision("approve"), "approve")
                for c in range(12)
                for i in range(76)
            ],
        )


def timed_gets(port: int, path: str, requests: int) -> list[float]:
    """Milliseconds of each GET, over one keep-alive connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times = []
    for _ in range(requests):
        began = time.perf_counter()
        connection.request("GET", path)
        answer = connection.getresponse()
        body = answer.read()
        times.append((time.perf_counter() - began) * 1000)
        assert answer.status == 200 and body.startswith(b"<!DOCTYPE html>"), answer.status
    connection.close()
    return times


def measure(runs: int, requests: int) -> None:
    store = Path(tempfile.mkdtemp()) / "store.sqlite"
    fill(store, runs)
    server = subprocess.Popen(
        [sys.executable, "-m", "verdictgate", "serve", "--store", str(store), "--grpc-listen",
         "127.0.0.1:0", "--http-listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        port = int(re.search(r"http [\d.]+:(\d+)", server.stderr.readline()).group(1))  # type: ignore[union-attr]
        for path in ("/", "/?status=rejected", "/?suite=no-such-suite", f"/runs/run-{runs - 1}"):
            times = timed_gets(port, path, requests)
            print(
                f"{runs:>7,} runs: GET {path:<24} first {times[0]:6.1f} ms, median "
                f"{statistics.median(times):6.1f} ms"
            )
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    for runs in args.runs:
        measure(runs, args.requests)


if __name__ == "__main__":
    main()
