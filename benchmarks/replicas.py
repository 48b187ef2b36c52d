"""Replicas on one PostgreSQL: durable ingest beside SQLite and the parse ceiling, the cost at
rest with 100,000 finished runs, and how long a survivor takes to take over a dead replica's run.

Starts PostgreSQL from the Debian package in a scratch directory (as tests/postgres_support.py
does: fsync stays on here, so a commit is as durable as SQLite's WAL with synchronous=NORMAL or
better). Its parts, each measured in the same run as what it is compared with:

- ingest: `benchmarks/receiver.py`'s requests into one `serve` on SQLite, then on PostgreSQL,
  each pass beside the ceiling (`extract_protobuf` over the same requests);
- framework spans: `benchmarks/receiver_frameworks.py`'s Strands-shaped traces into one `serve`
  on SQLite, then one on PostgreSQL, pass by pass;
- at rest: two replicas on a store holding 100,000 finished runs, their CPU and RSS while idle,
  and the transactions their ticks make (the server's `xact_commit` over the window);
- idle open runs: 10,000 canaries open on one replica and nothing arriving, the row changes and
  WAL a second that keeping them costs (heartbeats: one row a replica, not one a run);
- busy: one run written by three replicas at once, beside the same load spread over runs;
- finish: a run of 100,000 trials finished on one replica, and the slowest answer to another
  run's exports while it was sent and while it was finished;
- sizing: the bytes a trial costs each store, in tables and indexes and in the log written;
- takeover: a run open on the replica that owns it, that replica SIGKILLed, the time until the
  survivor owns the run, and until `status --wait` on it returns the run's admission.

    python benchmarks/replicas.py [--spans 100000] [--passes 8] [--runs 100000] [--lease 3]
        [--open-runs 10000] [--finish-trials 100000] [--sizing-trials 200000]
        [--busy-spans 50000] [--framework-trials 3000]
        [--parts ingest,frameworks,rest,idle,busy,finish,sizing,takeover]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import grpc
from median_interval import median_interval
from receiver import ceiling, encoded_requests, serve, serve_and_send
from receiver_idle import cpu_seconds, rss_mib, status_seconds

from postgres_support import postgresql
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.server import Limits, Server
from verdictgate.receiver.store import Batch, Store


def fresh_database(server: str) -> str:
    """A new, empty database on the server; its URL."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return server.rpartition("/")[0] + "/" + name


def ingest(server: str, spans: int, passes: int) -> None:
    """Each pass a fresh `serve` on SQLite and one on PostgreSQL, in alternating order (a
    machine whose speed drifts favours neither), beside the ceiling; the median ratio with
    its distribution-free 90% interval. Beside it, the CPU each pass cost the machine while
    its requests were sent (receiver and decoder, PostgreSQL's server, the sender): on this
    machine the server shares the receiver's two cores, so PostgreSQL's rate relative to
    SQLite's is bounded by their CPU a span, times how fully each pass used the cores."""
    requests = encoded_requests(spans)
    print(f"ingest: {spans:,} decision spans in {len(requests)} requests, 4 in flight")
    shares, ratios, bounds, uses = [], [], [], []
    for number in range(passes):
        limit = ceiling(requests)
        seconds, cpu = {}, {}
        for kind in ("SQLite", "PostgreSQL") if number % 2 == 0 else ("PostgreSQL", "SQLite"):
            used: list[tuple[float, float, float]] = []
            seconds[kind], latencies, stored, admitted, runs = serve_and_send(
                requests, 4, fresh_database(server) if kind == "PostgreSQL" else None, cpu=used
            )
            cpu[kind] = used[0]
            if kind == "PostgreSQL":
                p99 = statistics.quantiles(latencies, n=100)[98] * 1000
                kept = f"{stored:,} trials stored, {admitted} of {runs} runs admitted"
        sqlite_rate, postgres_rate = spans / seconds["SQLite"], spans / seconds["PostgreSQL"]
        shares.append(postgres_rate / limit)
        ratios.append(postgres_rate / sqlite_rate)
        total = {kind: sum(used) for kind, used in cpu.items()}
        bounds.append(total["SQLite"] / total["PostgreSQL"])
        uses.append({kind: total[kind] / seconds[kind] for kind in total})
        receiver, database, sender = cpu["PostgreSQL"]
        print(
            f"  pass {number + 1}: PostgreSQL {postgres_rate:8,.0f} spans/s (p99 {p99:5.1f} ms), "
            f"SQLite {sqlite_rate:8,.0f}, ceiling {limit:8,.0f}: {postgres_rate / sqlite_rate:.0%}"
            f" of SQLite, {postgres_rate / limit:.0%} of the ceiling; {kept}\n"
            f"          CPU: SQLite pass {total['SQLite']:.2f} s ({uses[-1]['SQLite']:.2f} cores),"
            f" PostgreSQL pass {total['PostgreSQL']:.2f} s ({uses[-1]['PostgreSQL']:.2f} cores:"
            f" receiver {receiver:.2f}, server {database:.2f}, sender {sender:.2f})"
        )
    low, high = median_interval(ratios)
    print(
        f"  PostgreSQL ingest is {statistics.median(ratios):.0%} of SQLite's (90% interval for"
        f" the median {low:.0%}-{high:.0%}) and {statistics.median(shares):.0%} of the ceiling"
        " (medians)"
    )
    use = {kind: statistics.median(u[kind] for u in uses) for kind in ("SQLite", "PostgreSQL")}
    print(
        f"  CPU a span: SQLite's pass {statistics.median(bounds):.0%} of PostgreSQL's (medians),"
        " so at the same use of the cores PostgreSQL reaches at most that share of SQLite's"
        f" rate; the passes used {use['SQLite']:.2f} (SQLite) and {use['PostgreSQL']:.2f}"
        " (PostgreSQL) of the two cores"
    )


def frameworks(server: str, trials: int, passes: int) -> None:
    """Agent-framework spans (`benchmarks/receiver_frameworks.py`'s Strands-shaped traces, 7
    spans a trial, each trial its own trace, 512 spans a request, 4 in flight) into a lone
    `serve` on SQLite and one on PostgreSQL (alternating which goes first), each on a fresh
    store: spans a second, durably
    (a request is acknowledged once committed), while the trials wait to settle."""
    from receiver_frameworks import encoded_requests as framework_requests

    requests, spans = framework_requests(trials)
    print(f"framework spans: {spans:,} spans of {trials:,} trials in {len(requests)} requests")
    ratios = []
    for number in range(passes):
        rates = {}
        with tempfile.TemporaryDirectory() as folder:
            stores = [
                ("SQLite", str(Path(folder) / "store.sqlite")),
                ("PostgreSQL", fresh_database(server)),
            ]
            for kind, location in stores if number % 2 == 0 else stores[::-1]:
                process, port = serve(location, "--idle", "3600s", "--settle", "3600s")
                try:
                    rates[kind] = spans / round_robin([port], requests, per_replica=4)
                finally:  # stopped, not killed: a killed one's decoding workers live on
                    process.terminate()
                    process.wait(30)
        ratios.append(rates["PostgreSQL"] / rates["SQLite"])
        print(
            f"  pass {number + 1}: PostgreSQL {rates['PostgreSQL']:8,.0f} spans/s, SQLite "
            f"{rates['SQLite']:8,.0f}: {ratios[-1]:.0%} of SQLite"
        )
    print(f"  PostgreSQL framework-span ingest is {statistics.median(ratios):.0%} of SQLite's")


def commits(server: str, database: str) -> int:
    with psycopg.connect(server, autocommit=True) as connection:
        row = connection.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def at_rest(server: str, runs: int, seconds: float) -> None:
    location = fresh_database(server)
    Store(location).close()
    day_ago = time.time() - 86_400
    with (
        psycopg.connect(location) as connection,
        connection.cursor() as cursor,
        cursor.copy(
            "COPY runs (run_id, suite, point, first_seen, last_seen, status, final, finished_at,"
            " owner, version) FROM STDIN"
        ) as copy,
    ):
        for n in range(runs):
            copy.write_row(
                (f"run-{n}", "payments", "router", day_ago, day_ago, "qualified", 1,
                 day_ago, "gone", 1)
            )  # fmt: skip
    database = location.rpartition("/")[2]
    replicas = [serve(location, "--lease", "15s") for _ in range(2)]
    try:
        time.sleep(5)  # start-up
        cpu = [cpu_seconds(process.pid) for process, _ in replicas]
        before, start = commits(server, database), time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - start
        sent = (commits(server, database) - before) / elapsed / len(replicas)
        print(f"at rest: {runs:,} finished runs in the store, two replicas idle for {seconds:g} s")
        for number, (process, _) in enumerate(replicas):
            busy = (cpu_seconds(process.pid) - cpu[number]) / elapsed
            print(
                f"  replica {number + 1}: CPU {busy * 100:.2f}% of a core, "
                f"RSS {rss_mib(process.pid):.0f} MiB"
            )
        print(f"  {sent:.1f} transactions/s per replica on the database (ticks: open work only)")
        if runs:
            median = status_seconds(replicas[1][1], f"run-{runs // 2}") * 1e3
            print(f"  `verdictgate status` of one run: median {median:.0f} ms")
    finally:
        for process, _ in replicas:
            process.terminate()
            process.wait(30)


def idle_open(server: str, runs: int, seconds: float, lease: float) -> None:
    """What open runs cost while nothing arrives: `runs` canaries open on one replica (taken
    over from a replica gone), the rows the database changes and the WAL it writes a second."""
    location = fresh_database(server)
    Store(location).close()
    now = time.time()
    with psycopg.connect(location) as connection, connection.cursor() as cursor:
        with cursor.copy(
            "COPY runs (run_id, suite, point, first_seen, last_seen, final, owner, version)"
            " FROM STDIN"
        ) as copy:
            for n in range(runs):
                copy.write_row((f"open-{n}", "payments", "router", now, now, 0, "gone", 1))
        cursor.execute("INSERT INTO replicas (name, alive_until) VALUES ('gone', 0)")
    process, _ = serve(location, "--lease", f"{lease:g}s", "--idle", "3600s")
    try:
        with psycopg.connect(location, autocommit=True) as connection:
            deadline = time.monotonic() + 120
            while connection.execute(
                "SELECT count(*) FROM runs WHERE owner = 'gone'"
            ).fetchone() != (0,):
                if time.monotonic() > deadline:
                    raise SystemExit("the replica did not take the open runs over")
                time.sleep(0.2)
            time.sleep(2 * lease)  # settled in: renewals and ticks as usual

            def counters() -> tuple[int, int, float]:
                rows, hot = connection.execute(
                    "SELECT sum(n_tup_upd + n_tup_ins + n_tup_del), sum(n_tup_hot_upd)"
                    " FROM pg_stat_user_tables"
                ).fetchone()
                (wal,) = connection.execute(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"
                ).fetchone()
                return int(rows), int(hot), float(wal)

            connection.execute("SELECT pg_stat_clear_snapshot()")
            rows, hot, wal = counters()
            cpu, start = cpu_seconds(process.pid), time.monotonic()
            time.sleep(seconds)
            connection.execute("SELECT pg_stat_clear_snapshot()")
            after = counters()
            elapsed = time.monotonic() - start
        busy = (cpu_seconds(process.pid) - cpu) / elapsed
        print(
            f"idle open runs: {runs:,} canaries open on one replica (--lease {lease:g}s), "
            f"nothing arriving for {seconds:g} s: {(after[0] - rows) / elapsed:.1f} row changes/s "
            f"({(after[1] - hot) / elapsed:.1f} HOT updates/s), "
            f"{(after[2] - wal) / elapsed / 1024:.1f} KiB/s of WAL, CPU {busy * 100:.1f}% of a "
            f"core, RSS {rss_mib(process.pid):.0f} MiB"
        )
    finally:
        process.terminate()
        process.wait(30)


def sizing(server: str, trials: int) -> None:
    """Bytes a trial costs each store: its tables and indexes once written, and the log written
    to store it (PostgreSQL's WAL; SQLite's WAL and checkpoints, as the bytes the process wrote
    to its disk), the benchmark's requests decoded and written as the receiver writes them."""
    batches = [extract_protobuf(body) for body in encoded_requests(trials)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "store.sqlite"
        store = Store(path)
        written = bytes_written()
        for contents in batches:
            store.write(Batch(contents.trials, contents.declarations, contents.labels))
        store.close()
        wal = bytes_written() - written
        with sqlite3.connect(path) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        table = path.stat().st_size
    location = fresh_database(server)
    store = Store(location)
    with psycopg.connect(location, autocommit=True) as connection:
        (before,) = connection.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        for contents in batches:
            store.write(Batch(contents.trials, contents.declarations, contents.labels))
        (pg_wal,) = connection.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (before,)
        ).fetchone()
        connection.execute("VACUUM ANALYZE")
        (pg_table,) = connection.execute(
            "SELECT sum(pg_total_relation_size(relid)) FROM pg_stat_user_tables"
        ).fetchone()
    store.close()
    print(
        f"bytes a trial: {trials:,} trials (512 a write, case ids of 71 characters) cost SQLite "
        f"{table / trials:.0f} bytes of file and {wal / trials:.0f} bytes written (WAL and "
        f"checkpoints); PostgreSQL {float(pg_table) / trials:.0f} bytes of tables and indexes "
        f"and {float(pg_wal) / trials:.0f} bytes of WAL"
    )


def bytes_written() -> int:
    """The bytes this process has caused to be written to storage (Linux's /proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise SystemExit("no /proc/self/io on this machine")


def finish(server: str, trials: int, requests: int) -> None:
    """What finishing a large run costs the other requests of its replica: a run of `trials`
    sent in `requests` requests to one replica on PostgreSQL while another client exports one
    trial of another run every 20 ms; that client's slowest answer while the run was sent,
    and from its last request until a second after its admission (the finisher reads the whole
    run back and assesses it)."""
    from receiver_finish import TRACE_EXPORT, encoded, requests_of

    from receiver_support import decision_span, request

    location = fresh_database(server)
    receiver = Receiver(Store(location), None, ReceiverConfig(idle=3600))
    served = Server(receiver, grpc_listen="127.0.0.1:0", http_listen=None, limits=Limits())
    served.start()
    address = f"127.0.0.1:{served.grpc_port}"
    phase, answers = ["sending"], {"sending": [], "finishing": []}
    stop = threading.Event()

    def probe() -> None:
        channel = grpc.insecure_channel(address)
        export = channel.unary_unary(TRACE_EXPORT)
        index = 0
        while not stop.wait(0.02):
            body = request([decision_span("beside", "c", index, "ok", "ok")]).SerializeToString()
            start, current = time.perf_counter(), phase[0]
            export(body, timeout=60)
            answers[current].append(time.perf_counter() - start)
            index += 1
        channel.close()

    channel = grpc.insecure_channel(address)
    export = channel.unary_unary(TRACE_EXPORT)
    export(encoded([]), timeout=30)
    prober = threading.Thread(target=probe)
    prober.start()
    try:
        for body in requests_of("big", trials, requests):
            export(body, timeout=120)
        phase[0] = "finishing"
        assert receiver.flush(300), "the finisher did not admit the run"
        time.sleep(1.0)
    finally:
        stop.set()
        prober.join(60)
        channel.close()
        served.stop()
    sending, finishing = max(answers["sending"]), max(answers["finishing"])
    print(
        f"finish: a run of {trials:,} trials in {requests} requests on PostgreSQL; another "
        f"run's export every 20 ms answered in at most {sending * 1e3:.0f} ms while it was "
        f"sent and {finishing * 1e3:.0f} ms while it was finished ({finishing / sending:.2f}x; "
        f"{len(answers['finishing'])} exports)"
    )


def busy_run(server: str, spans: int, passes: int) -> None:
    """One run written by three replicas at once, against the same load spread over runs: the
    same decision spans in requests of 512, sent round robin to three `serve` replicas on one
    PostgreSQL, two requests in flight to each; the rates, and their ratio, pass by pass."""
    ratios = []
    for number in range(passes):
        rates = {}
        for shape in ("spread", "busy"):
            requests = [
                one_run(body, "busy") if shape == "busy" else body
                for body in encoded_requests(spans)
            ]
            location = fresh_database(server)
            replicas = [serve(location, "--idle", "3600s") for _ in range(3)]
            try:
                rates[shape] = spans / round_robin([port for _, port in replicas], requests)
            finally:  # stopped, not killed: a killed one's decoding workers live on
                for process, _ in replicas:
                    process.terminate()
                for process, _ in replicas:
                    process.wait(30)
        ratios.append(rates["busy"] / rates["spread"])
        print(
            f"busy run, pass {number + 1}: {spans:,} decision spans to three replicas: "
            f"{rates['spread']:,.0f} spans/s spread over runs, {rates['busy']:,.0f} spans/s "
            f"into one run ({ratios[-1]:.0%})"
        )
    print(f"  one busy run written by three replicas: {statistics.median(ratios):.0%} of the rate")


def round_robin(ports: list[int], requests: list[bytes], per_replica: int = 2) -> float:
    """Seconds to send every request, `per_replica` in flight to each replica in turn."""
    from receiver import TRACE_EXPORT as EXPORT

    channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for port in ports]
    exports = [channel.unary_unary(EXPORT) for channel in channels]
    for export in exports:
        export(b"", timeout=30)
    cursor, lock = iter(range(len(requests))), threading.Lock()

    def worker(export: grpc.UnaryUnaryMultiCallable[bytes, bytes]) -> None:
        while True:
            with lock:
                index = next(cursor, None)
            if index is None:
                return
            export(requests[index], timeout=120)

    start = time.perf_counter()
    workers = [
        threading.Thread(target=worker, args=(exports[n % len(exports)],))
        for n in range(per_replica * len(exports))
    ]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    seconds = time.perf_counter() - start
    for channel in channels:
        channel.close()
    return seconds


def one_run(body: bytes, run: str) -> bytes:
    """An export request with every span's run id (and no run span) made `run`, and its case
    id prefixed with the run id it had, so that the trials of the runs it merges keep
    identities of their own (the same load as spread over runs, not repeats of one another)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    message = ExportTraceServiceRequest.FromString(body)
    for resource in message.resource_spans:
        for scope in resource.scope_spans:
            kept = [span for span in scope.spans if span.name != "verdictgate.run"]
            del scope.spans[:]
            scope.spans.extend(kept)
            for span in scope.spans:
                values = {attribute.key: attribute.value for attribute in span.attributes}
                was = values["verdictgate.run.id"].string_value
                values[
                    "verdictgate.case.id"
                ].string_value = f"{was}/{values['verdictgate.case.id'].string_value}"
                values["verdictgate.run.id"].string_value = run
    return message.SerializeToString()


def takeover(server: str, lease: float) -> None:
    from receiver_support import request, run_span, stable_run

    location = fresh_database(server)
    options = ("--lease", f"{lease:g}s", "--idle", "2s")
    (a, a_port), (b, b_port) = serve(location, *options), serve(location, *options)
    import grpc

    spans = stable_run("taken", cases=4, trials=10)
    channel = grpc.insecure_channel(f"127.0.0.1:{a_port}")
    export = channel.unary_unary(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        request_serializer=None,
        response_deserializer=None,
    )
    export(request([run_span("taken", planned=40), *spans[:20]]).SerializeToString(), timeout=10)
    channel.close()
    try:
        with psycopg.connect(location, autocommit=True) as connection:
            (owner,) = connection.execute(
                "SELECT owner FROM runs WHERE run_id = 'taken'"
            ).fetchone()
            killed = a if int(owner.rsplit("-", 2)[1]) == a.pid else b
            survivor_port = b_port if killed is a else a_port
            killed.kill()
            killed.wait(10)
            died = time.monotonic()
            while True:
                (now_owner,) = connection.execute(
                    "SELECT owner FROM runs WHERE run_id = 'taken'"
                ).fetchone()
                if now_owner != owner:
                    break
                time.sleep(0.02)
            owned = time.monotonic() - died
        status = subprocess.run(
            [sys.executable, "-m", "verdictgate", "status", "--endpoint",
             f"127.0.0.1:{survivor_port}", "--run", "taken", "--wait", "120", "--format", "json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        answered = time.monotonic() - died
        admitted = json.loads(status.stdout)["status"]
        print(
            f"takeover with --lease {lease:g}s: the survivor owns the dead replica's run "
            f"{owned:.1f} s after the kill (bound: the lease and a third, {lease * 4 / 3:.1f} s, "
            f"and a tick); `status --wait` on it returns the admission ({admitted}) after "
            f"{answered:.1f} s (its idle period, counted from its last news, had passed)"
        )
    finally:
        for process in (a, b):
            process.terminate()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--open-runs", type=int, default=10_000)
    parser.add_argument("--sizing-trials", type=int, default=200_000)
    parser.add_argument("--finish-trials", type=int, default=100_000)
    parser.add_argument("--busy-spans", type=int, default=50_000)
    parser.add_argument("--framework-trials", type=int, default=3_000)
    parser.add_argument(
        "--parts",
        default="ingest,frameworks,rest,idle,busy,finish,sizing,takeover",
        help="which to measure",
    )
    parser.add_argument("--lease", type=float, action="append")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    with postgresql(fsync=True) as server:
        print(f"PostgreSQL {psycopg.connect(server).info.server_version} on this machine, fsync on")
        if "ingest" in parts:
            ingest(server, args.spans, args.passes)
        if "frameworks" in parts:
            frameworks(server, args.framework_trials, args.passes)
        if "rest" in parts:
            for runs in (0, args.runs):  # the same at rest, whatever the history
                at_rest(server, runs, args.seconds)
        if "idle" in parts:
            idle_open(server, args.open_runs, args.seconds, 3.0)
        if "busy" in parts:
            busy_run(server, args.busy_spans, args.passes)
        if "finish" in parts:
            finish(server, args.finish_trials, 50)
        if "sizing" in parts:
            sizing(server, args.sizing_trials)
        if "takeover" in parts:
            for lease in args.lease or [3.0, 15.0]:
                takeover(server, lease)


if __name__ == "__main__":
    main()
