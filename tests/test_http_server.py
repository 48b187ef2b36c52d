"""The bounded HTTP server as a component of its own, through its interface only
(`BoundedHttpServer`, `RequestHandler`, `HttpError`): an echo handler behind it, raw sockets in
front. The receiver's attack and transport tests exercise it again behind the OTLP port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from verdictgate.receiver.http import BoundedHttpServer, HttpError, RequestHandler
from verdictgate.receiver.limits import Limits


class Echo(RequestHandler):
    """Answers a POST with its body, a GET /fail with a handler's refusal."""

    def do_POST(self) -> None:
        body = self.read_body(1 << 20)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        raise HttpError(418, "refused by the handler")


@contextmanager
def serving(host: str = "127.0.0.1", **limits: Any) -> Iterator[BoundedHttpServer]:
    server = BoundedHttpServer((host, 0), Echo, Limits(**limits))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(timeout=30)


def until(condition: Callable[[], bool]) -> None:
    """Wait for a condition of the server (a deadline only keeps a failing test from hanging)."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "the server never got there"
        time.sleep(0.005)


def connect(server: BoundedHttpServer) -> socket.socket:
    sock = socket.create_connection(server.server_address[:2], timeout=10)
    return sock


def answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def post(body: bytes, *, close: bool = True) -> bytes:
    connection = "close" if close else "keep-alive"
    head = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: {connection}"
    return f"{head}\r\n\r\n".encode() + body


def test_listening_on_every_ipv6_address_takes_ipv4_clients_too():
    """`[::]` is dual-stack, as gRPC's is: a client of either family is answered."""
    if not socket.has_dualstack_ipv6():
        pytest.skip("this system has no dual-stack IPv6 sockets")
    with serving("::") as server:
        port = server.server_address[1]
        for client in ("127.0.0.1", "::1"):
            with socket.create_connection((client, port), timeout=10) as sock:
                sock.sendall(post(client.encode()))
                assert answer(sock).endswith(b"\r\n\r\n" + client.encode()), client


def test_a_keep_alive_connection_is_served_request_after_request():
    with serving() as server, connect(server) as sock:
        sock.sendall(post(b"first", close=False) + post(b"second"))
        received = answer(sock)
    assert received.count(b"HTTP/1.1 200") == 2
    assert received.index(b"first") < received.index(b"second")


def test_a_body_sent_in_pieces_after_its_head_is_read_by_the_poller():
    with serving() as server, connect(server) as sock:
        chunked = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close"
        sock.sendall(chunked + b"\r\n\r\n")
        for piece in (b"5\r\nhel", b"lo\r\n6\r\n wor", b"ld\r\n0\r\n\r\n"):
            sock.sendall(piece)
        received = answer(sock)
    assert received.startswith(b"HTTP/1.1 200") and received.endswith(b"hello world")


def test_a_head_that_never_completes_is_closed_at_its_deadline():
    with serving(header_timeout_seconds=0.2) as server, connect(server) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        assert answer(sock) == b""  # closed by the server, without an answer
        assert server.open_connections() == 0


def test_a_head_over_its_limit_is_answered_431():
    with serving() as server, connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nX: " + b"a" * (40 << 10) + b"\r\n\r\n")
        assert answer(sock).startswith(b"HTTP/1.1 431")


def test_a_handler_refusal_is_its_status_and_bytes_that_are_not_http_are_400():
    with serving() as server:
        with connect(server) as sock:
            sock.sendall(b"GET /fail HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answer(sock).startswith(b"HTTP/1.1 418")
        with connect(server) as sock:
            sock.sendall(b"\x16\x03\x01 not http\r\n\r\n")
            assert answer(sock).startswith(b"HTTP/1.1 400")


def test_at_a_hosts_cap_an_idle_keep_alive_gives_way_to_a_newcomer():
    with serving(max_connections_per_host=2) as server:
        idle = [connect(server) for _ in range(2)]
        for sock in idle:  # each served once, then kept alive and waiting: idle
            sock.sendall(post(b"once", close=False))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        until(lambda: server.waiting_connections() == 2)  # both back on the poller, idle
        try:
            with connect(server) as newcomer:
                newcomer.sendall(post(b"hello"))
                received = answer(newcomer)
        finally:
            for sock in idle:
                sock.close()
        assert received.startswith(b"HTTP/1.1 200") and received.endswith(b"hello")
        assert server.evicted_connections() == 1


def test_at_a_hosts_cap_uploads_in_progress_are_not_cut_for_a_newcomer():
    body = b"x" * 40
    with serving(max_connections_per_host=2) as server:
        uploading = [connect(server) for _ in range(2)]
        for sock in uploading:  # bodies still to come
            sock.sendall(
                f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            )
        until(lambda: server.awaiting_bodies()[0] == 2)  # both bodies awaited by the poller
        sent = threading.Event()
        newcomer_answered = threading.Event()

        def dribble() -> None:  # a byte at a time: each upload keeps making progress
            for index in range(len(body)):
                for sock in uploading:
                    sock.sendall(body[index : index + 1])
                if index == 0:
                    sent.set()
                newcomer_answered.wait(0.05)
            sent.set()

        dribbling = threading.Thread(target=dribble)
        dribbling.start()
        try:
            sent.wait(30)
            with connect(server) as newcomer:
                newcomer.sendall(post(b"hello"))
                refused = answer(newcomer)
            newcomer_answered.set()
            dribbling.join(30)
            for sock in uploading:  # both finish, and are answered
                assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        finally:
            newcomer_answered.set()
            for sock in uploading:
                sock.close()
        assert refused.startswith(b"HTTP/1.1 503") and b"Retry-After" in refused
        assert server.evicted_connections() == 0
