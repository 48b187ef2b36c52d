"""What `verdictgate serve` costs at rest with a long history: idle CPU and RSS while it holds
100,000 finished runs, and the latency of `verdictgate status` for one of them.

    python benchmarks/receiver_idle.py [--runs 100000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from process_stats import cpu_seconds

from verdictgate.receiver.store import Store


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def status_seconds(grpc_port: int, run_id: str, times: int = 5) -> float:
    """The median time `verdictgate status` takes to answer for one run (a new process each
    time, start-up included)."""
    latencies = []
    for _ in range(times):
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "verdictgate", "status", "--endpoint",
             f"127.0.0.1:{grpc_port}", "--run", run_id],
            capture_output=True, check=False,
        )  # fmt: skip
        latencies.append(time.perf_counter() - began)
    return statistics.median(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    store = Path(tempfile.mkdtemp()) / "store.sqlite"
    Store(store).close()
    day_ago = time.time() - 86_400
    with sqlite3.connect(store) as connection:  # finished runs, as a day of canaries leaves them
        connection.executemany(
            "INSERT INTO runs (run_id, suite, point, first_seen, last_seen, status, final)"
            " VALUES (?, 'payments', 'router', ?, ?, 'qualified', 1)",
            [(f"run-{n}", day_ago, day_ago) for n in range(args.runs)],
        )
    grpc_port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "verdictgate", "serve", "--store", str(store),
         "--grpc-listen", f"127.0.0.1:{grpc_port}", "--http-listen", f"127.0.0.1:{free_port()}"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(5)  # start-up
        cpu, start = cpu_seconds(server.pid), time.monotonic()
        time.sleep(args.seconds)
        busy = (cpu_seconds(server.pid) - cpu) / (time.monotonic() - start)
        print(f"{args.runs:,} finished runs in the store, idle for {args.seconds:g} s:")
        print(
            f"  CPU {busy * 100:.2f}% of a core (target <= 1%), RSS {rss_mib(server.pid):.0f} MiB"
        )
        print(
            f"  `verdictgate status` of one run: median "
            f"{status_seconds(grpc_port, f'run-{args.runs // 2}') * 1e3:.0f} ms"
            " (a new process each time, start-up included)"
        )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
