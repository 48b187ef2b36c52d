"""A replica stalled anywhere, inside a write included, loses its runs within two leases (issue
35): its heartbeat lapses after a lease, and the server ends its session (and the row locks its
open transaction holds) after a lease of idling in it, so a survivor takes the run over at its
next look. Two `serve` processes on a real PostgreSQL; one is frozen (SIGSTOP) while its
connection is inside a write."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import grpc
import psycopg
import pytest

from components import free_port
from postgres_support import StoreMaker
from receiver_support import decision_span, request, start_serve

LEASE = 3.0
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def socket_ports(pid: int) -> set[int]:
    """The local TCP ports of a process's sockets (its connections to the store among them)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def in_a_write(connection: psycopg.Connection, ports: set[int]) -> bool:
    """Whether a session of the process (by its client ports) waits inside a transaction."""
    rows = connection.execute(
        "SELECT client_port FROM pg_stat_activity WHERE state = 'idle in transaction'"
    ).fetchall()
    return any(port in ports for (port,) in rows)


def owner(connection: psycopg.Connection, run: str) -> str | None:
    row = connection.execute("SELECT owner FROM runs WHERE run_id = %s", (run,)).fetchone()
    return None if row is None else row[0]


def test_a_replica_frozen_inside_a_write_loses_its_runs_within_two_leases(
    postgres_server: str, tmp_path: Path
) -> None:
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("frozen")
    options = ("--lease", f"{LEASE:g}s", "--idle", "600s")
    a_port, b_port = free_port(), free_port()
    a = start_serve(location, a_port, *options)
    b = start_serve(location, b_port, *options)
    stop = threading.Event()

    def send() -> None:  # a canary's trials, to a, until stopped: each write locks its run
        channel = grpc.insecure_channel(f"127.0.0.1:{a_port}")
        export = channel.unary_unary(TRACE_EXPORT)
        index = 0
        while not stop.is_set():
            body = request([decision_span("busy", f"c{c}", index, "ok", "ok") for c in range(8)])
            index += 1
            with contextlib.suppress(grpc.RpcError):  # a frozen: nothing answers
                export(body.SerializeToString(), timeout=2)
        channel.close()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        with psycopg.connect(location, autocommit=True) as connection:
            deadline = time.monotonic() + 60
            while owner(connection, "busy") is None:
                assert time.monotonic() < deadline, "the run never opened"
                time.sleep(0.05)
            first = owner(connection, "busy")
            assert first is not None and f"-{a.pid}-" in first  # a's write opened it
            ports = socket_ports(a.pid)
            for _ in range(500):  # freeze a inside a write: stop, look, go on if not
                os.kill(a.pid, signal.SIGSTOP)
                time.sleep(0.05)  # a statement under way ends; the transaction stays open
                if in_a_write(connection, ports):
                    break
                os.kill(a.pid, signal.SIGCONT)
                time.sleep(0.01)
            else:
                pytest.fail("never caught the replica inside a write")
            frozen_at = time.monotonic()
            stop.set()
            while owner(connection, "busy") == first:
                elapsed = time.monotonic() - frozen_at
                assert elapsed < 2 * LEASE, f"still the frozen replica's after {elapsed:.1f} s"
                time.sleep(0.05)
            assert owner(connection, "busy") != first
    finally:
        stop.set()
        for process in (a, b):
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
            process.wait(10)
        sender.join(10)


def test_a_replica_stopped_and_continued_still_stops_at_sigterm(tmp_path: Path) -> None:
    """A stop signal the kernel hands another thread (as after SIGSTOP and SIGCONT) still stops
    `serve`: its main thread looks for it again and again, rather than waiting for ever."""
    process = start_serve(tmp_path / "store.sqlite", free_port())
    try:
        os.kill(process.pid, signal.SIGSTOP)
        os.kill(process.pid, signal.SIGTERM)
        os.kill(process.pid, signal.SIGCONT)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
