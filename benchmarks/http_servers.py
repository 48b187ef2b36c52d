"""The receiver's bounded HTTP server beside a well-kept one (uvicorn, with its own limits set
as a careful operator would), against three rows of the receiver's attack tests, each server
behind the same echo application:

- slow heads: `--slow` connections that send half a request head and then nothing;
- stalled bodies from the exporter's own host: `--stalled` heads whose body never comes;
- then an honest request from the same host, timed, and the connections each server still
  holds after `--hold` seconds.

    python benchmarks/http_servers.py [--slow 900] [--stalled 300] [--hold 12]

uvicorn (0.3x and later) is in the `strands` extra's dependencies; the script says so when it
is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from verdictgate.receiver.http import BoundedHttpServer, RequestHandler
from verdictgate.receiver.limits import Limits

HEAD_TIMEOUT = 2.0
"""Both servers close an incomplete request within this (uvicorn: its keep-alive timeout is
the only one it has, and it does not apply to a head in progress)."""


class Echo(RequestHandler):
    def do_POST(self) -> None:
        body = self.read_body(1 << 20)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def bounded(port: int) -> Callable[[], None]:
    limits = Limits(header_timeout_seconds=HEAD_TIMEOUT, body_timeout_seconds=HEAD_TIMEOUT)
    server = BoundedHttpServer(("127.0.0.1", port), Echo, limits)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.shutdown


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def uvicorn_server(port: int) -> Callable[[], None]:
    import uvicorn

    config = uvicorn.Config(
        echo_app,
        host="127.0.0.1",
        port=port,
        log_level="error",
        lifespan="off",
        limit_concurrency=1024,
        timeout_keep_alive=int(HEAD_TIMEOUT),
        backlog=1024,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)

    return stop


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def still_open(sockets: list[socket.socket]) -> int:
    """How many of these connections the server has not closed (an answer read to its end)."""
    open_ = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            while sock.recv(1 << 16):
                pass  # an answer (a refusal): read on, to see whether the server closed
        except BlockingIOError:
            open_ += 1
        except OSError:
            pass
    return open_


def honest(port: int) -> tuple[str, float, int]:
    """(first line of the last answer, seconds, attempts) of one small POST, retried after a
    503 as an OTLP exporter retries (after `Retry-After`, five attempts at most)."""
    started = time.perf_counter()
    attempts = 0
    while attempts < 5:
        attempts += 1
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                sock.sendall(request + b"Connection: close\r\n\r\nhello")
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            line = answer.split(b"\r\n", 1)[0].decode() or "closed without an answer"
        except OSError as error:
            line = f"failed: {error}"
        if " 503 " not in line:
            break
        time.sleep(1.0)
    return line, time.perf_counter() - started, attempts


def attack(port: int, slow: int, stalled: int, hold: float) -> dict[str, Any]:
    sockets: list[socket.socket] = []
    for _ in range(slow):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")
        sockets.append(sock)
    for _ in range(stalled):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        sockets.append(sock)
    answer, seconds, attempts = honest(port)
    time.sleep(hold)  # the attackers keep their connections open, sending nothing
    held = still_open(sockets)
    for sock in sockets:
        sock.close()
    return {
        "honest": answer,
        "seconds": seconds,
        "attempts": attempts,
        "held": held,
        "of": len(sockets),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=900)
    parser.add_argument("--stalled", type=int, default=300)
    parser.add_argument("--hold", type=float, default=12.0)
    args = parser.parse_args()
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # both ends of every connection
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    servers: dict[str, Callable[[int], Callable[[], None]]] = {"BoundedHttpServer": bounded}
    try:
        import uvicorn

        servers[f"uvicorn {uvicorn.__version__}"] = uvicorn_server
    except ImportError:
        print("uvicorn is not installed: pip install uvicorn to compare")
    print(
        f"{args.slow} slow heads and {args.stalled} stalled bodies from one host, then one "
        f"honest request; connections still held after {args.hold:.0f} s"
    )
    for name, start in servers.items():
        port = free_port()
        stop = start(port)
        try:
            row = attack(port, args.slow, args.stalled, args.hold)
        finally:
            stop()
        print(
            f"  {name:<22} honest request: {row['honest']} after {row['attempts']} attempt(s), "
            f"{row['seconds']:.2f} s; "
            f"attackers' connections still held: {row['held']} of {row['of']}"
        )


if __name__ == "__main__":
    main()
