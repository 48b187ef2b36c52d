"""The receiver's transports against hostile senders, through the real wire: slow and silent
sockets, floods of connections, bodies refused before they are read, every gzip and chunked
oddity, failures inside, and one sender that would take every slot."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import multiprocessing
import os
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import types

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from receiver_support import request, run_span, running_server, stable_run
from verdictgate.receiver.ingest.decoding import DecoderUnavailable
from verdictgate.receiver.ingest.fair_gate import Busy, Gate
from verdictgate.receiver.server import Limits

PROTOBUF = "application/x-protobuf"
METRICS = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
TRACES = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

AWAY = str(Limits().unavailable_retry_after_seconds)
"""What a sender refused because the store or a decoder is away is told to wait."""


def body_of(run: str, cases: int = 1, trials: int = 2) -> bytes:
    return request(stable_run(run, cases, trials)).SerializeToString()


def head(
    length: int | None = None, *, path: str = "/v1/traces", method: str = "POST", **headers: str
) -> bytes:
    """A request head; header names are given with `_` for `-`."""
    lines = [f"{method} {path} HTTP/1.1", "Host: receiver"]
    if method == "POST":
        lines.append(f"Content-Type: {PROTOBUF}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def connect(server, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.http_port), timeout=timeout)


def answer(sock, method: str = "POST") -> http.client.HTTPResponse:
    """Read one response from `sock` (within the socket's timeout)."""
    response = http.client.HTTPResponse(sock, method=method)
    response.begin()
    response.read()
    return response


class OneStream:
    """A socket whose answers are all read through one buffered file, so an answer that came
    in the same read as the one before it is not lost between two readers."""

    def __init__(self, sock: socket.socket) -> None:
        self._file = sock.makefile("rb")

    def makefile(self, mode: str):
        return self

    def close(self) -> None:  # an answer read whole closes its file: this one stays open
        pass

    def __getattr__(self, name: str):
        return getattr(self._file, name)


def closed(sock: socket.socket, within: float = 5.0) -> bool:
    """Whether the server closes `sock` within `within` seconds (what it sends is dropped)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            try:
                if not sock.recv(65536):
                    return True
            except ConnectionError:
                return True
    return False


def post(server, body: bytes, *, headers: dict | None = None, chunked: bool = False):
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
    try:
        payload = iter([body[: len(body) // 2], body[len(body) // 2 :]]) if chunked else body
        connection.request(
            "POST",
            "/v1/traces",
            payload,
            {"Content-Type": PROTOBUF, **(headers or {})},
            encode_chunked=chunked,
        )
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def wait_until(condition, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.01)


@contextlib.contextmanager
def ingest_held(server, monkeypatch):
    """While inside, the receiver takes no export in: requests being served stay on their
    workers, holding their admission, until the event yielded is set (or the block ends)."""
    release = threading.Event()
    ingest = server.receiver.ingest

    def held(extract):
        release.wait(10)
        return ingest(extract)

    monkeypatch.setattr(server.receiver, "ingest", held)
    try:
        yield release
    finally:
        release.set()


def grpc_call(server, method: str, body: bytes, token: str | None = None):
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    try:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        metadata = [("authorization", f"Bearer {token}")] if token else None
        return call(body, timeout=5, metadata=metadata)
    finally:
        channel.close()


# -- slow, silent and numerous connections ---------------------------------------------------


def test_silent_sockets_are_closed_by_the_header_timeout_and_exports_go_on():
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    from otel_support import run_spans

    with running_server(limits=Limits(header_timeout_seconds=1.0)) as server:
        silent = [connect(server) for _ in range(200)]
        try:
            exporter = OTLPSpanExporter(
                endpoint=f"http://127.0.0.1:{server.http_port}/v1/traces",
                compression=Compression.Gzip,
                timeout=5,
            )
            assert (
                exporter.export(run_spans("beside-silent", flips=False)) is SpanExportResult.SUCCESS
            )
            exporter.shutdown()
            assert all(closed(sock) for sock in silent)
        finally:
            for sock in silent:
                sock.close()
        assert server.receiver.assessment("beside-silent").trials.received == 12


def test_a_dribbled_head_is_cut_off_at_the_header_deadline():
    with (
        running_server(limits=Limits(header_timeout_seconds=1.0)) as server,
        connect(server) as sock,
    ):
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\n")
        deadline = time.monotonic() + 6
        cut = False
        while not cut and time.monotonic() < deadline:
            try:
                sock.sendall(b"X")  # one byte at a time, never a whole head
            except OSError:
                cut = True
            cut = cut or closed(sock, within=0.1)
        assert cut


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_slow_body_is_answered_503_with_retry_after_and_closed(chunked):
    """503, not 408: OTLP/HTTP exporters retry 429, 502, 503 and 504 only."""
    start = head(Transfer_Encoding="chunked") + b"64\r\n" if chunked else head(100)
    with running_server(limits=Limits(body_timeout_seconds=0.5)) as server, connect(server) as sock:
        sock.sendall(start + b"0123456789")
        slow = answer(sock)
        assert slow.status == 503 and slow.getheader("Retry-After") == "1"
        assert closed(sock)


def test_keep_alive_serves_several_requests_and_idle_connections_time_out():
    with running_server(limits=Limits(idle_timeout_seconds=0.5)) as server, connect(server) as sock:
        for run in ("ka-1", "ka-2"):
            body = body_of(run)
            sock.sendall(head(len(body)) + body)
            assert answer(sock).status == 200
        sock.sendall(head(path="/v1/runs", method="GET") * 2)  # pipelined
        assert answer(sock, "GET").status == answer(sock, "GET").status == 200
        assert closed(sock)
        assert server.receiver.assessment("ka-2").trials.received == 2


def test_200_connections_at_once_are_accepted_and_answered():
    with running_server() as server:
        sockets = [socket.socket() for _ in range(200)]
        try:
            for sock in sockets:
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", server.http_port))
            pending, deadline = set(sockets), time.monotonic() + 10
            while pending and time.monotonic() < deadline:
                _, ready, _ = select.select([], list(pending), [], 1)
                pending -= set(ready)
            assert not pending
            assert all(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for sock in sockets)
            for sock in sockets:
                sock.setblocking(True)
                sock.settimeout(10)
                sock.sendall(head(path="/v1/runs", method="GET", Connection="close"))
            assert [answer(sock, "GET").status for sock in sockets] == [200] * 200
        finally:
            for sock in sockets:
                sock.close()


def retried_until_taken(server, request: bytes, method: str = "GET"):
    """Send `request` on a new connection, again after each 503 (as exporters retry it), for
    up to 5 s; the answer that was not a 503."""
    deadline = time.monotonic() + 5
    while True:
        with connect(server) as sock:
            sock.sendall(request)
            got = answer(sock, method)
        if got.status != 503 or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_a_host_at_its_connection_limit_has_its_longest_stalled_connection_closed():
    """At its cap a host's new connection is refused while the others make progress; once
    they have brought nothing for STALLED_SECONDS, the one waiting longest is closed (told
    503) for the new one: silent sockets cannot lock out a sender behind the same address."""
    with running_server(limits=Limits(max_connections_per_host=3)) as server:
        held = [connect(server) for _ in range(3)]
        try:
            wait_until(lambda: server.http.open_connections() == 3)
            assert retried_until_taken(server, head(path="/v1/runs", method="GET")).status == 200
            evicted = answer(held[0], "GET")
            assert evicted.status == 503 and evicted.getheader("Retry-After") == "1"
            assert closed(held[0])
            assert server.http.evicted_connections() == 1
            assert not closed(held[1], within=0.2)  # the others wait on
        finally:
            for sock in held:
                sock.close()


def test_at_the_cap_an_idle_keep_alive_is_closed_before_a_request_still_arriving():
    """Closing an idle keep-alive costs its client nothing, so it goes first, silently; the
    older connection whose head is still arriving waits on."""
    with running_server(limits=Limits(max_connections_per_host=3)) as server:
        arriving = connect(server)
        arriving.sendall(b"GET /v1/runs HTTP/1.1\r\n")  # a head still arriving
        idle = [connect(server) for _ in range(2)]
        try:
            for sock in idle:
                sock.sendall(head(path="/v1/runs", method="GET"))
                assert answer(sock, "GET").status == 200  # then kept alive, idle
            wait_until(lambda: server.http.waiting_connections() == 3)
            with connect(server) as newcomer:
                newcomer.sendall(head(path="/v1/runs", method="GET"))
                assert answer(newcomer, "GET").status == 200
            assert sum(closed(sock, within=1) for sock in idle) == 1  # one of them, silently
            assert server.http.evicted_connections() == 1
            assert not closed(arriving, within=0.2)
            arriving.sendall(b"Host: receiver\r\n\r\n")
            assert answer(arriving, "GET").status == 200
        finally:
            for sock in (arriving, *idle):
                sock.close()


def test_a_host_whose_connections_are_all_being_served_gets_a_quick_503_and_others_are_served(
    monkeypatch,
):
    with (
        running_server(limits=Limits(max_connections_per_host=2)) as server,
        ingest_held(server, monkeypatch) as release,
    ):
        busy = [connect(server) for _ in range(2)]
        try:
            for number, sock in enumerate(busy):
                body = body_of(f"served-{number}")
                sock.sendall(head(len(body), User_Agent=f"sender-{number}") + body)
            wait_until(lambda: server.ingest.gate.in_use()[0] == 2)
            with connect(server) as third:
                third.sendall(head(path="/v1/runs", method="GET"))
                refused = answer(third, "GET")
                assert refused.status == 503 and refused.getheader("Retry-After") == "1"
                assert closed(third)
            try:  # another loopback address is another host (Linux routes all of 127/8)
                other = socket.create_connection(
                    ("127.0.0.1", server.http_port), timeout=5, source_address=("127.0.0.2", 0)
                )
            except OSError:
                other = None
            if other is not None:
                with other:
                    other.sendall(head(path="/v1/runs", method="GET"))
                    assert answer(other, "GET").status == 200
            release.set()
            assert [answer(sock).status for sock in busy] == [200, 200]
        finally:
            for sock in busy:
                sock.close()


_SERVE_UNDER_256_FILES = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    from verdictgate.receiver.core import Receiver
    from verdictgate.receiver.server import Limits, Server
    from verdictgate.receiver.store import Store
    server = Server(Receiver(Store()), grpc_listen="127.0.0.1:0", http_listen="127.0.0.1:0",
                    limits=Limits(header_timeout_seconds=30))
    server.start()
    print(server.grpc_port, server.http_port, flush=True)
    sys.stdin.read()
    server.stop()
    """
)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="Linux rlimits")
def test_idle_http_sockets_cannot_take_the_file_descriptors_grpc_needs():
    """Under a 256-file limit HTTP holds at most 128 connections: more are refused (503), and
    gRPC still gets a descriptor for its connection."""
    child = subprocess.Popen(
        [sys.executable, "-c", _SERVE_UNDER_256_FILES],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sockets: list[socket.socket] = []
    try:
        assert child.stdout is not None
        grpc_port, http_port = map(int, child.stdout.readline().split())
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", http_port), timeout=5)
            sock.setblocking(False)
            sockets.append(sock)
        refused: set[socket.socket] = set()
        deadline = time.monotonic() + 10  # until the server took them all (or failed to)
        while len(refused) < 300 - 128 and time.monotonic() < deadline:
            ready, _, _ = select.select([s for s in sockets if s not in refused], [], [], 0.2)
            for sock in ready:
                with contextlib.suppress(OSError):
                    if sock.recv(65536).startswith(b"HTTP/1.1 503"):
                        refused.add(sock)
        exported = grpc_call(
            types.SimpleNamespace(grpc_port=grpc_port), TRACES, body_of("beside-idle-sockets")
        )
        assert not ExportTraceServiceResponse.FromString(exported).HasField("partial_success")
        assert len(refused) >= 300 - 128
    finally:
        for sock in sockets:
            sock.close()
        _, errors = child.communicate("", timeout=20)
    assert "serving at most 128 HTTP connections, not 1024" in errors


def test_a_connection_beyond_the_limit_gets_a_quick_503():
    with running_server(limits=Limits(max_connections=2)) as server:
        held = [connect(server), connect(server)]
        try:
            wait_until(lambda: server.http.open_connections() == 2)
            with connect(server) as third:
                third.sendall(head(path="/v1/runs", method="GET"))
                refused = answer(third, "GET")
            assert refused.status == 503 and refused.getheader("Retry-After") == "1"
        finally:
            for sock in held:
                sock.close()


def test_a_full_worker_queue_answers_503_at_once(monkeypatch):
    limits = Limits(http_workers=1, http_queue=1, body_timeout_seconds=5)
    with running_server(limits=limits) as server, ingest_held(server, monkeypatch) as release:
        body = body_of("queued")
        with connect(server) as first, connect(server) as second, connect(server) as third:
            first.sendall(head(len(body)) + body)  # the only worker is taken by it
            wait_until(lambda: server.ingest.gate.in_use()[0] == 1)
            second.sendall(head(path="/v1/runs", method="GET"))
            wait_until(lambda: server.http.queued() == 1)
            third.sendall(head(path="/v1/runs", method="GET"))
            refused = answer(third, "GET")
            assert refused.status == 503 and refused.getheader("Retry-After") == "1"
            release.set()
            assert answer(first).status == 200
            assert answer(second, "GET").status == 200


def test_over_tls_handshakes_wait_without_a_thread_and_keep_alive_works(tmp_path):
    import shutil
    import ssl
    import subprocess

    from verdictgate.receiver.core import Receiver
    from verdictgate.receiver.server import Server, Tls
    from verdictgate.receiver.store import Store

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    server = Server(
        Receiver(Store()),
        grpc_listen=None,
        http_listen="127.0.0.1:0",
        tls=Tls(str(cert), str(key)),
        limits=Limits(header_timeout_seconds=1.0, http_workers=1),
    )
    server.start()
    try:
        silent = [connect(server) for _ in range(5)]  # more than the one worker
        plaintext = connect(server)
        plaintext.sendall(head(path="/v1/runs", method="GET"))
        context = ssl.create_default_context(cafile=str(cert))
        client = http.client.HTTPSConnection(
            "127.0.0.1", server.http_port, context=context, timeout=5
        )
        sockets = []
        for run in ("tls-1", "tls-2"):
            client.request("POST", "/v1/traces", body_of(run), {"Content-Type": PROTOBUF})
            reply = client.getresponse()
            assert reply.status == 200 and reply.read() == b""
            sockets.append(client.sock)
        assert sockets[0] is sockets[1]  # one connection, kept alive
        client.close()
        assert all(closed(sock) for sock in [*silent, plaintext])
        assert server.receiver.assessment("tls-2").trials.received == 2
    finally:
        server.stop()


# -- refused before the body is read ---------------------------------------------------------


def test_an_unauthenticated_16_mib_request_is_answered_401_without_its_body():
    with running_server(token="s3cret") as server, connect(server) as sock:
        sock.sendall(head(16 << 20))  # the body is never sent: the answer must come anyway
        refused = answer(sock)
        assert refused.status == 401 and refused.getheader("Connection") == "close"
        assert refused.getheader("WWW-Authenticate") == "Bearer"
        assert status_pb2.Status.FromString(refused.read() or b"") is not None
        assert closed(sock)


def test_expect_100_continue_is_sent_only_to_an_admitted_request():
    body = body_of("expect")
    with running_server(token="s3cret") as server:
        with connect(server) as sock:
            sock.sendall(head(len(body), Expect="100-continue"))
            assert answer(sock).status == 401  # no 100 first: the body need not be sent
        with connect(server) as sock:
            sock.sendall(head(len(body), Expect="100-continue", Authorization="Bearer s3cret"))
            assert sock.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
            sock.sendall(body)
            assert answer(sock).status == 200


def test_a_stalled_body_after_100_continue_holds_back_no_other_connection():
    """The poller reads a body after `100 Continue` without blocking: another connection's
    request is answered while the stalled one still waits (its body timeout is 30 s; the
    other's answer is awaited 5 s at most)."""
    with (
        running_server(limits=Limits(body_timeout_seconds=30)) as server,
        connect(server) as stalled,
        connect(server, timeout=5) as other,
    ):
        stalled.sendall(head(1000, Expect="100-continue"))
        assert stalled.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
        stalled.sendall(b"x" * 10)  # then nothing more
        wait_until(lambda: server.http.awaiting_bodies() == (1, 10))
        for _ in range(3):
            other.sendall(head(path="/v1/runs", method="GET"))
            assert answer(other, "GET").status == 200
        assert server.http.awaiting_bodies() == (1, 10)


def test_whole_bodies_waiting_for_a_worker_stay_counted(monkeypatch):
    """Bodies the poller read whole, queued behind busy workers, still hold their share of the
    arriving-bodies budget until their handler is done: queued bodies are bounded too."""
    body = body_of("queued-bodies", 4, 10)
    limits = Limits(http_workers=2, body_timeout_seconds=10)
    with (
        running_server(limits=limits) as server,
        ingest_held(server, monkeypatch) as release,
        connect(server) as busy,
    ):
        busy.sendall(head(len(body)) + body)  # holds one worker
        wait_until(lambda: server.ingest.gate.in_use()[0] == 1)
        senders = [connect(server) for _ in range(3)]
        try:
            for sock in senders:
                sock.sendall(head(len(body), User_Agent="queued"))
            wait_until(lambda: server.http.awaiting_bodies()[0] == 3)
            for sock in senders:
                sock.sendall(body)  # the first takes the other worker, two wait for one
            wait_until(  # two queued, one in the held handler: all three still counted
                lambda: (
                    server.http.queued() == 2
                    and server.http.awaiting_bodies() == (3, 3 * len(body))
                )
            )
            release.set()
            assert [answer(sock).status for sock in [busy, *senders]] == [200] * 4
            wait_until(lambda: server.http.awaiting_bodies() == (0, 0))
        finally:
            for sock in senders:
                sock.close()


def test_a_full_gate_answers_429_without_reading_the_body():
    with running_server(limits=Limits(max_in_flight=0)) as server, connect(server) as sock:
        sock.sendall(head(8 << 20))
        busy = answer(sock)
        assert busy.status == 429 and busy.getheader("Retry-After") == "1"
        assert closed(sock)


def test_an_exhausted_byte_budget_answers_429_without_reading_the_body(monkeypatch):
    body = body_of("budget", 4, 10)
    limits = Limits(max_request_bytes=len(body), max_bytes_in_flight=len(body))
    with running_server(limits=limits) as server:
        with (
            ingest_held(server, monkeypatch) as release,
            connect(server) as holder,
            connect(server) as other,
        ):
            holder.sendall(head(len(body), User_Agent="holder") + body)
            wait_until(lambda: server.ingest.gate.in_use()[1] == len(body))
            other.sendall(head(10, User_Agent="other"))  # its body is never sent
            busy = answer(other)
            assert busy.status == 429 and busy.getheader("Retry-After") == "1"
            release.set()
            assert answer(holder).status == 200
        assert server.ingest.gate.in_use() == (0, 0, 0)
        status, _, _ = post(server, body_of("after"), headers={"User-Agent": "other"})
        assert status == 200


def test_chunks_announced_but_not_sent_hold_no_bytes_of_the_budget():
    """One client announcing 1 MiB chunks on 4 requests, 10 bytes sent each, must not fill the
    4 MiB budget: bytes are held as they arrive, by the poller, without a slot of the gate,
    so others' HTTP and gRPC exports go through."""
    limits = Limits(max_request_bytes=1 << 20, max_bytes_in_flight=4 << 20, body_timeout_seconds=10)
    with running_server(token="s3cret", limits=limits) as server:
        hogs = [connect(server) for _ in range(4)]
        try:
            for sock in hogs:
                sock.sendall(
                    head(
                        Transfer_Encoding="chunked", User_Agent="hog", Authorization="Bearer s3cret"
                    )
                    + b"FFFFF\r\n"
                    + b"x" * 10
                )
            wait_until(lambda: server.http.awaiting_bodies() == (4, 40))
            body = body_of("beside-announced", 8, 20)
            assert 40_000 < len(body) < 64 << 10
            status, _, _ = post(
                server, body, headers={"User-Agent": "other", "Authorization": "Bearer s3cret"}
            )
            assert status == 200
            exported = grpc_call(server, TRACES, body_of("grpc-beside-announced"), token="s3cret")
            assert not ExportTraceServiceResponse.FromString(exported).HasField("partial_success")
            assert server.http.awaiting_bodies() == (4, 40)  # the bytes that came, no more
            assert server.ingest.gate.in_use() == (0, 0, 0)
        finally:
            for sock in hogs:
                sock.close()


def test_a_growing_chunked_body_is_held_to_its_clients_share():
    """A client's share is `(budget - reserve) / clients` bytes, however its requests came to
    hold them: growing chunks past it is 429 with Retry-After, and others still get in."""
    limits = Limits(max_request_bytes=64 << 10, max_bytes_in_flight=256 << 10)  # share: 192 KiB
    chunk = b"%x\r\n" % (60 << 10) + b"x" * (60 << 10)
    with running_server(limits=limits) as server:
        hogs = [connect(server) for _ in range(4)]
        try:
            for number, sock in enumerate(hogs[:3], 1):
                sock.sendall(head(Transfer_Encoding="chunked", User_Agent="hog") + chunk)
                wait_until(lambda n=number: server.http.awaiting_bodies() == (n, n * 60 << 10))
            hogs[3].sendall(head(Transfer_Encoding="chunked", User_Agent="hog") + chunk)
            refused = answer(hogs[3])
            assert refused.status == 429 and refused.getheader("Retry-After") == "1"
            status, _, _ = post(server, body_of("beside-grown", 8, 20), headers={"User-Agent": "b"})
            assert status == 200
        finally:
            for sock in hogs:
                sock.close()


# -- bodies ------------------------------------------------------------------------------------


def test_every_member_of_a_multi_member_gzip_body_is_read():
    body = gzip.compress(body_of("member-1")) + gzip.compress(body_of("member-2", 2, 3))
    with running_server() as server:
        status, _, _ = post(server, body, headers={"Content-Encoding": "gzip"})
        assert status == 200
        assert server.receiver.assessment("member-1").trials.received == 2
        assert server.receiver.assessment("member-2").trials.received == 6


def bad_crc(data: bytes) -> bytes:
    return data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:]


@pytest.mark.parametrize(
    ("make", "status"),
    [
        (lambda data: data[:-8], 400),  # no CRC and length trailer
        (lambda data: data[:-4], 400),  # CRC, no length
        (bad_crc, 400),
        (lambda data: data + b"trailing garbage", 400),
        (lambda data: data + b"\x00" * 8, 400),
        (lambda data: data + gzip.compress(b"x")[:-8], 400),  # a truncated second member
        (lambda data: b"", 400),
        (lambda data: data + gzip.compress(b"\x00" * (2 << 20)), 413),  # the cap spans members
    ],
    ids=[
        "no-trailer",
        "no-length",
        "bad-crc",
        "garbage",
        "zeros",
        "truncated-member",
        "empty",
        "bomb-in-second-member",
    ],
)
def test_a_broken_gzip_body_is_refused(make, status):
    with running_server(limits=Limits(max_request_bytes=1 << 20)) as server:
        got, _, payload = post(
            server, make(gzip.compress(body_of("gz"))), headers={"Content-Encoding": "gzip"}
        )
        assert got == status and status_pb2.Status.FromString(payload).message
        assert server.receiver.assessment("gz") is None
        assert post(server, body_of("ok"))[0] == 200  # still serving


@pytest.mark.parametrize("encoding", ["zstd", "br", "deflate", "x-custom", "gzip, gzip"])
def test_an_unsupported_content_encoding_is_415(encoding):
    with running_server() as server:
        status, headers, _ = post(server, body_of("enc"), headers={"Content-Encoding": encoding})
        assert status == 415 and "gzip" in headers["Accept-Encoding"]
        assert post(server, body_of("enc"), headers={"Content-Encoding": "identity"})[0] == 200


def test_a_chunked_body_is_accepted_and_gzip_may_be_chunked_too():
    with running_server() as server:
        assert post(server, body_of("chunked", 2, 3), chunked=True)[0] == 200
        zipped = gzip.compress(body_of("chunked-gz"))
        assert post(server, zipped, chunked=True, headers={"Content-Encoding": "gzip"})[0] == 200
        assert server.receiver.assessment("chunked").trials.received == 6
        assert server.receiver.assessment("chunked-gz").trials.received == 2


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_requests_pipelined_behind_a_body_read_by_the_poller_are_served_in_order(chunked):
    """A body that did not come with its head is read by the poller; the requests sent right
    behind it on the connection are served after it, in order."""
    body = body_of("pipelined", 4, 10)
    if chunked:
        framed = head(Transfer_Encoding="chunked") + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    else:
        framed = head(len(body)) + body
    after = head(path="/v1/runs/pipelined", method="GET")
    with running_server() as server, connect(server) as sock:
        split = len(framed) - 10  # the body's end arrives later, with the next request
        sock.sendall(framed[:split])
        wait_until(lambda: server.http.awaiting_bodies()[0] == 1)
        sock.sendall(framed[split:] + after)
        stream = OneStream(sock)  # both answers may arrive in one read
        assert answer(stream).status == 200
        assert answer(stream, "GET").status == 200
    assert server.receiver.assessment("pipelined").trials.received == 40


@pytest.mark.parametrize(
    ("framing", "status"),
    [
        (b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nabcde\r\n0\r\n\r\n", 400),
        (b"Transfer-Encoding: chunked\r\n\r\n5\r\nabcdefgh\r\n0\r\n\r\n", 400),
        (b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400),
        (b"Transfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n", 400),
        (b"Content-Length: -5\r\n\r\n", 400),
        (b"\r\n", 411),
    ],
)
def test_malformed_framing_is_refused(framing, status):
    start = b"POST /v1/traces HTTP/1.1\r\nHost: r\r\nContent-Type: application/x-protobuf\r\n"
    with running_server() as server, connect(server) as sock:
        sock.sendall(start + framing)
        assert answer(sock).status == status


def test_a_chunked_body_is_bounded_by_the_request_limit():
    with running_server(limits=Limits(max_request_bytes=1000)) as server, connect(server) as sock:
        sock.sendall(head(Transfer_Encoding="chunked") + b"800\r\n" + b"x" * 2048 + b"\r\n")
        assert answer(sock).status == 413


def test_json_nested_5000_deep_is_400_not_a_dropped_connection():
    nested = b'{"resourceSpans": [' + b"[" * 5000 + b"]" * 5000 + b"]}"
    with running_server() as server:
        status, _, payload = post(server, nested, headers={"Content-Type": "application/json"})
        assert status == 400 and "message" in json.loads(payload)


# -- every failure is an answer ----------------------------------------------------------------


def retry_info(error: grpc.RpcError) -> error_details_pb2.RetryInfo:
    """The RetryInfo in a gRPC error's status details (where the Collector looks)."""
    metadata = dict(error.trailing_metadata())
    status = status_pb2.Status.FromString(metadata["grpc-status-details-bin"])
    info = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info)
    assert error_details_pb2.RetryInfo.FromString(metadata["google.rpc.retryinfo-bin"]) == info
    return info


def test_a_busy_grpc_export_is_resource_exhausted_with_retry_info():
    with (
        running_server(limits=Limits(max_in_flight=0)) as server,
        pytest.raises(grpc.RpcError) as busy,
    ):
        grpc_call(server, TRACES, body_of("busy"))
    assert busy.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert retry_info(busy.value).retry_delay.seconds == 1


def test_a_decoder_that_is_unavailable_is_503_and_unavailable_with_retry_hints(monkeypatch):
    def unavailable(body, content_type):
        raise DecoderUnavailable()

    with running_server() as server:
        monkeypatch.setattr(server.ingest.decoder, "decode", unavailable)
        status, headers, _ = post(server, body_of("dead"))
        assert status == 503 and headers["Retry-After"] == AWAY
        with pytest.raises(grpc.RpcError) as failed:
            grpc_call(server, TRACES, body_of("dead"))
        assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
        assert retry_info(failed.value).retry_delay.seconds == int(AWAY)


def test_a_killed_decoder_process_is_503_then_the_pool_is_back():
    big = request([run_span("big", 400), *stable_run("big", 4, 100)]).SerializeToString()
    assert len(big) > 32 << 10  # decoded in the worker
    with running_server(limits=Limits(decoders=1)) as server:
        assert post(server, big)[0] == 200
        workers = multiprocessing.active_children()
        assert workers
        for worker in workers:
            os.kill(worker.pid, signal.SIGKILL)
            worker.join(5)
        status, headers, payload = post(server, big)
        assert status == 503 and headers["Retry-After"] == AWAY
        assert "retry" in status_pb2.Status.FromString(payload).message
        assert post(server, big)[0] == 200


def test_an_unexpected_error_is_500_and_internal_logged_once(monkeypatch, caplog):
    def broken(extract):
        raise RuntimeError("a detail only the log may hold")

    with running_server() as server:
        monkeypatch.setattr(server.receiver, "ingest", broken)
        status, _, payload = post(server, body_of("boom"))
        assert status == 500
        assert status_pb2.Status.FromString(payload).message == "internal error"
        with pytest.raises(grpc.RpcError) as failed:
            grpc_call(server, TRACES, body_of("boom"))
        assert failed.value.code() is grpc.StatusCode.INTERNAL
        assert failed.value.details() == "internal error"
        assert post(server, body_of("boom"))[0] == 500
    logged = [r for r in caplog.records if r.levelname == "ERROR" and "unexpected" in r.message]
    assert len(logged) == 1 and logged[0].exc_info is not None


def admission_call(server, method: str, request, token: str | None = None):
    from verdictgate.receiver.transport.grpc_api import ADMISSION_SERVICE
    from verdictgate.v1 import verdictgate_pb2 as pb

    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    try:
        reply = pb.ListRunsResponse if method == "ListRuns" else pb.Admission
        make = channel.unary_stream if method == "WatchAdmission" else channel.unary_unary
        call = make(
            f"/{ADMISSION_SERVICE}/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=reply.FromString,
        )
        metadata = [("authorization", f"Bearer {token}")] if token else None
        result = call(request, timeout=5, metadata=metadata)
        return list(result) if method == "WatchAdmission" else result
    finally:
        channel.close()


def test_query_failures_are_unavailable_with_retry_info_or_internal(monkeypatch, caplog):
    """The query API on both transports: a store error is retryable (UNAVAILABLE with
    RetryInfo, 503 with Retry-After), anything else INTERNAL / 500 "internal error", logged once
    with its traceback; never UNKNOWN with the exception's text."""
    from verdictgate.v1 import verdictgate_pb2 as pb

    def store_error(*args):
        raise sqlite3.OperationalError("disk I/O error")

    def bug(*args):
        raise RuntimeError("a detail only the log may hold")

    calls = [
        ("GetAdmission", pb.GetAdmissionRequest(run_id="q")),
        ("WatchAdmission", pb.WatchAdmissionRequest(run_id="q")),
        ("ListRuns", pb.ListRunsRequest()),
    ]
    with running_server(token="s3cret") as server:
        auth = {"Authorization": "Bearer s3cret"}
        for failure, code in (
            (store_error, grpc.StatusCode.UNAVAILABLE),
            (bug, grpc.StatusCode.INTERNAL),
        ):
            monkeypatch.setattr(server.receiver, "cached_assessment", failure)
            monkeypatch.setattr(server.receiver.store, "page", failure)
            for method, message in calls:
                with pytest.raises(grpc.RpcError) as failed:
                    admission_call(server, method, message, token="s3cret")
                assert failed.value.code() is code, method
                if code is grpc.StatusCode.UNAVAILABLE:
                    assert retry_info(failed.value).retry_delay.seconds == int(AWAY)
                else:
                    assert failed.value.details() == "internal error"
            for path in ("/v1/runs/q", "/v1/runs"):
                with connect(server) as sock:
                    sock.sendall(head(path=path, method="GET", **auth))
                    got = answer(sock, "GET")
                if code is grpc.StatusCode.UNAVAILABLE:
                    assert got.status == 503 and got.getheader("Retry-After") == AWAY
                else:
                    assert got.status == 500
    logged = [r for r in caplog.records if r.levelname == "ERROR" and "unexpected" in r.message]
    assert len(logged) == 1 and logged[0].exc_info is not None


def test_a_store_failure_while_querying_is_503(monkeypatch):
    def failing(*args):
        raise sqlite3.OperationalError("disk I/O error")

    with running_server() as server:
        for listing in ("runs", "page"):  # whichever the query API reads
            if hasattr(server.receiver.store, listing):
                monkeypatch.setattr(server.receiver.store, listing, failing)
        with connect(server) as sock:
            sock.sendall(head(path="/v1/runs", method="GET"))
            failed = answer(sock, "GET")
        assert failed.status == 503 and failed.getheader("Retry-After") == AWAY


# -- gRPC ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", [METRICS, LOGS])
def test_metrics_and_logs_need_the_token_too(method):
    with running_server(token="s3cret") as server:
        with pytest.raises(grpc.RpcError) as denied:
            grpc_call(server, method, b"\xff" * 1000)
        assert denied.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert grpc_call(server, method, b"", token="s3cret") == b""


def test_unauthenticated_calls_that_never_send_their_message_hold_no_thread():
    """More unauthenticated calls than `grpc_max_concurrent_rpcs`, none sending its message, on
    every service: each is refused UNAUTHENTICATED at once, so an export still gets through."""
    from verdictgate.receiver.transport.grpc_api import ADMISSION_SERVICE

    stall = threading.Event()

    def never():
        stall.wait()
        return
        yield

    methods = [
        (TRACES, False),
        (METRICS, False),
        (f"/{ADMISSION_SERVICE}/GetAdmission", False),
        (f"/{ADMISSION_SERVICE}/WatchAdmission", True),
        (f"/{ADMISSION_SERVICE}/ListRuns", False),
        ("/no.such.Service/Method", False),
    ]
    with running_server(token="s3cret", limits=Limits(grpc_max_concurrent_rpcs=4)) as server:
        channels = [grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") for _ in range(3)]
        calls = []
        try:
            for number in range(12):
                method, streaming = methods[number % len(methods)]
                channel = channels[number % len(channels)]
                if streaming:
                    call = channel.stream_stream(method)(never(), timeout=30)
                else:
                    call = channel.stream_unary(method).future(never(), timeout=30)
                calls.append(call)
            with contextlib.suppress(AssertionError):
                wait_until(lambda: all(call.done() for call in calls))
            exported = None
            deadline = time.monotonic() + 5  # a slot frees just after its call's status is sent
            while exported is None:
                try:
                    exported = grpc_call(server, TRACES, body_of("beside-stalled"), token="s3cret")
                except grpc.RpcError as error:
                    busy = error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
                    if not busy or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            assert not ExportTraceServiceResponse.FromString(exported).HasField("partial_success")
            assert all(call.done() for call in calls)
            codes = {call.code() for call in calls}  # beyond the cap at once, gRPC refuses
            assert grpc.StatusCode.UNAUTHENTICATED in codes
            assert codes <= {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED}
        finally:
            stall.set()
            for call in calls:
                call.cancel()
            for channel in channels:
                channel.close()


def test_grpc_calls_beyond_capacity_get_one_answer_resource_exhausted_with_retry_info(
    monkeypatch,
):
    """400 calls at once on one channel, 4 allowed in progress: each is served or refused
    RESOURCE_EXHAUSTED with RetryInfo (which every OTLP exporter retries), never a stream reset
    (UNAVAILABLE), and every call served is stored."""
    with (
        running_server(limits=Limits(grpc_max_concurrent_rpcs=4)) as server,
        ingest_held(server, monkeypatch) as release,
    ):
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        try:
            export = channel.unary_unary(TRACES)
            calls = [export.future(body_of(f"burst-{n}"), timeout=30) for n in range(400)]
            wait_until(lambda: server.ingest.gate.in_use()[0] == 4)
            release.set()
            served, refused = [], []
            for number, call in enumerate(calls):
                try:
                    call.result()
                    served.append(number)
                except grpc.RpcError as error:
                    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, error
                    assert retry_info(error).retry_delay.seconds == 1
                    refused.append(number)
            assert len(served) >= 4 and len(refused) >= 200
            assert all(
                server.receiver.assessment(f"burst-{n}").trials.received == 2 for n in served
            )
        finally:
            channel.close()


def test_grpc_calls_beyond_the_limit_are_refused_with_retry_info():
    from verdictgate.receiver.transport.grpc_api import ADMISSION_SERVICE
    from verdictgate.v1 import verdictgate_pb2 as pb

    with running_server(limits=Limits(grpc_max_concurrent_rpcs=1)) as server:
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        watch = channel.unary_stream(
            f"/{ADMISSION_SERVICE}/WatchAdmission",
            request_serializer=pb.WatchAdmissionRequest.SerializeToString,
            response_deserializer=pb.Admission.FromString,
        )
        assert (
            post(
                server,
                request([run_span("open", 80), *stable_run("open", 1, 2)]).SerializeToString(),
            )[0]
            == 200
        )
        waiting = watch(pb.WatchAdmissionRequest(run_id="open"), timeout=30)
        try:
            assert next(waiting).run_id == "open"  # the one call allowed is in progress
            with pytest.raises(grpc.RpcError) as refused:
                grpc_call(server, TRACES, body_of("many"))
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert retry_info(refused.value).retry_delay.seconds == 1
        finally:
            waiting.cancel()
            channel.close()


def test_a_silent_grpc_connection_is_closed_by_the_handshake_timeout():
    with running_server(limits=Limits(header_timeout_seconds=1.0)) as server:
        with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=5) as sock:
            assert closed(sock)
        exported = ExportTraceServiceResponse.FromString(
            grpc_call(server, TRACES, ExportTraceServiceRequest().SerializeToString())
        )
        assert not exported.HasField("partial_success")


# -- HTTP semantics --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/traces", "POST"),
        ("PUT", "/v1/traces", "POST"),
        ("POST", "/v1/runs", "GET"),
        ("DELETE", "/v1/runs/some-run", "GET"),
        ("HEAD", "/v1/runs", "GET"),
    ],
)
def test_another_method_on_a_known_path_is_405_with_allow(method, path, allow):
    with running_server() as server, connect(server) as sock:
        sock.sendall(head(0 if method in ("POST", "PUT") else None, path=path, method=method))
        refused = http.client.HTTPResponse(sock, method=method)
        refused.begin()
        payload = refused.read()
        assert refused.status == 405 and refused.getheader("Allow") == allow
        if method == "HEAD":
            return
        if refused.getheader("Content-Type") == PROTOBUF:
            assert "use" in status_pb2.Status.FromString(payload).message
        else:
            assert "use" in json.loads(payload)["message"]
        sock.sendall(head(path="/v1/runs", method="GET"))  # the connection stays usable
        assert answer(sock, "GET").status == 200


def test_serve_on_every_ipv6_address_takes_ipv4_and_ipv6_clients_on_both_transports():
    """`--http-listen [::]:PORT` is dual-stack as `--grpc-listen [::]:PORT` is: a client of
    either family is answered on each port."""
    if not socket.has_dualstack_ipv6():
        pytest.skip("this system has no dual-stack IPv6 sockets")
    with running_server(host="[::]") as server:
        for client in ("127.0.0.1", "::1"):
            connection = http.client.HTTPConnection(client, server.http_port, timeout=10)
            connection.request("GET", "/healthz")
            assert connection.getresponse().status == 200, client
            connection.close()
            target = f"[{client}]" if ":" in client else client
            channel = grpc.insecure_channel(f"{target}:{server.grpc_port}")
            try:
                answered = channel.unary_unary(TRACES)(body_of(f"from-{client}"), timeout=10)
            finally:
                channel.close()
            assert not ExportTraceServiceResponse.FromString(answered).HasField("partial_success")


def test_other_methods_elsewhere_are_404_and_401_asks_for_a_bearer_token():
    with running_server(token="s3cret") as server:
        with connect(server) as sock:
            sock.sendall(head(path="/elsewhere", method="OPTIONS"))
            assert answer(sock, "OPTIONS").status == 404
        with connect(server) as sock:
            sock.sendall(head(path="/v1/runs", method="GET"))
            refused = answer(sock, "GET")
            assert refused.status == 401 and refused.getheader("WWW-Authenticate") == "Bearer"


@pytest.mark.parametrize(
    "garbage",
    [
        b"HELLO\r\n\r\n",
        b"\x16\x03\x01\x02\x00 \xff\xfe\r\n\r\n",
        b"GET /v1/runs\r\n\r\n",
        b"GET /v1/runs HTTP/1.1 extra\r\n\r\n",
        b"GET /v1/runs HTTX/1.1\r\n\r\n",
    ],
    ids=["one-word", "binary", "http-0.9", "four-words", "bad-version"],
)
def test_a_malformed_request_line_is_a_plain_400_and_closed(garbage):
    with running_server() as server, connect(server) as sock:
        sock.sendall(garbage)
        refused = answer(sock, "GET")
        assert refused.status == 400
        assert refused.getheader("Content-Type").startswith("text/plain")
        assert refused.getheader("Connection") == "close"
        assert closed(sock)


# -- fairness --------------------------------------------------------------------------------

HOG, OTHER = ("10.0.0.1", "collector"), ("10.0.0.2", "agent")


def test_the_gate_keeps_a_slot_for_another_client():
    gate = Gate(slots=4, budget=1000, request_bytes=100)
    held = [gate.admit(HOG, 10) for _ in range(3)]
    with pytest.raises(Busy):
        gate.admit(HOG, 10)  # a lone client may take all but one slot
    other = gate.admit(OTHER, 10)
    held[0].release()
    with pytest.raises(Busy):
        gate.admit(HOG, 10)  # two clients now: at most (4 - 1) // 2 = 1 each; the hog has 2
    held[1].release()
    with pytest.raises(Busy):
        gate.admit(HOG, 10)
    held[2].release()
    again = gate.admit(HOG, 10)
    assert gate.in_use() == (2, 20, 2)
    other.release()
    again.release()
    assert gate.in_use() == (0, 0, 0)


def test_the_gate_keeps_the_bytes_of_one_request_for_another_client():
    gate = Gate(slots=16, budget=400, request_bytes=100)
    held = [gate.admit(HOG, 100) for _ in range(3)]
    with pytest.raises(Busy):
        gate.admit(HOG, 100)  # 300 of 400 bytes: one largest request stays free
    other = gate.admit(OTHER, 100)  # a first request needs only the global room
    with pytest.raises(Busy):
        gate.admit(("10.0.0.3", "late"), 1)  # the budget is full
    with pytest.raises(Busy):
        other.reserve(1)  # a body that grows must fit too
    for ticket in [*held, other]:
        ticket.release()
    assert gate.in_use() == (0, 0, 0)
    with pytest.raises(Busy):
        Gate(slots=0, budget=400).admit(OTHER, 0)


def test_a_growing_request_is_held_to_its_clients_share_like_an_admitted_one():
    gate = Gate(slots=16, budget=400, request_bytes=100)  # reserve 100: one client may hold 300
    first, second = gate.admit(HOG, 0), gate.admit(HOG, 0)
    first.reserve(200)
    with pytest.raises(Busy):
        second.reserve(101)  # 301 > 300, although the budget has 200 free
    second.reserve(100)
    other = gate.admit(OTHER, 0)  # two clients: 150 each; the hog holds 300 and may not grow
    with pytest.raises(Busy):
        first.reserve(1)
    other.reserve(100)  # its only request: held to the budget alone, as at admission
    assert gate.in_use() == (3, 400, 2)
    for ticket in (first, second, other):
        ticket.release()
    assert gate.in_use() == (0, 0, 0)


def test_the_gate_stays_consistent_under_threads():
    gate = Gate(slots=8, budget=10_000, request_bytes=1000)
    peak = [0]

    def client(number: int) -> None:
        for size in range(200):
            try:
                with gate.admit((f"10.0.0.{number % 3}", "x"), size):
                    peak[0] = max(peak[0], gate.in_use()[0])
            except Busy:
                pass

    threads = [threading.Thread(target=client, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert gate.in_use() == (0, 0, 0) and 1 <= peak[0] <= 8


def test_bodies_that_never_come_hold_no_slot_and_no_worker():
    """Requests whose heads came and bodies never do wait on the poller: the gate's slots and
    the workers stay free, so the same client, and any other, still exports."""
    body = body_of("fair")
    limits = Limits(max_in_flight=4, http_workers=2, body_timeout_seconds=5)
    with running_server(limits=limits) as server:
        hogs = [connect(server) for _ in range(6)]
        try:
            for sock in hogs:
                sock.sendall(head(len(body), User_Agent="hog"))  # bodies never sent
            wait_until(lambda: server.http.awaiting_bodies() == (6, 0))
            assert server.ingest.gate.in_use() == (0, 0, 0)
            for agent in ("hog", "other"):
                status, _, _ = post(server, body, headers={"User-Agent": agent})
                assert status == 200
            assert server.receiver.assessment("fair").trials.received == 2
        finally:
            for sock in hogs:
                with contextlib.suppress(OSError):
                    sock.close()


def test_300_stalled_bodies_on_one_host_cannot_lock_out_an_exporter_beside_them():
    """Behind one collector: 300 connections from the exporter's own host send a complete head
    and no body. The host's cap (256) evicts the longest waiting for each new connection, so
    the honest export is stored, and the stalled requests are told 503 as they are evicted."""
    with running_server() as server:
        stalled = []
        try:
            for _ in range(300):
                sock = connect(server)
                sock.sendall(head(1000))
                stalled.append(sock)
            wait_until(lambda: server.http.awaiting_bodies()[0] == 256)
            for number in range(3):
                body = body_of(f"beside-stalled-{number}")
                assert retried_until_taken(server, head(len(body)) + body, "POST").status == 200
                assert server.receiver.assessment(f"beside-stalled-{number}").trials.received == 2
            assert server.http.evicted_connections() >= 1
            told = answer(stalled[0])
            assert told.status == 503 and told.getheader("Retry-After") == "1"
            assert server.ingest.gate.in_use() == (0, 0, 0)
        finally:
            for sock in stalled:
                with contextlib.suppress(OSError):
                    sock.close()
