"""A TCP relay between a client and a server that counts the turns of each conversation (a
reply from the server after the client spoke: one round trip) and can hold every chunk a
while, as a server a network hop away would."""

from __future__ import annotations

import itertools
import socket
import threading
import time


class TurnCountingRelay:
    """Relays connections to `target`, holding each chunk `delay` seconds; `turns` counts the
    round trips of all its conversations so far. Its threads are daemons: it lives as long as
    its test or benchmark."""

    def __init__(self, target: tuple[str, int], delay: float = 0.0) -> None:
        self._target, self._delay = target, delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._turns = 0
        self._last_side: dict[int, str] = {}
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def turns(self) -> int:
        with self._lock:
            return self._turns

    def _accept(self) -> None:
        for conversation in itertools.count():
            client, _ = self._listener.accept()
            server = socket.create_connection(self._target)
            for end in (client, server):
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for source, sink, side in ((client, server, "client"), (server, client, "server")):
                threading.Thread(
                    target=self._pass, args=(source, sink, side, conversation), daemon=True
                ).start()

    def _pass(self, source: socket.socket, sink: socket.socket, side: str, key: int) -> None:
        try:
            while chunk := source.recv(1 << 16):
                due = time.perf_counter() + self._delay
                with self._lock:
                    if side == "server" and self._last_side.get(key) == "client":
                        self._turns += 1
                    self._last_side[key] = side
                while (left := due - time.perf_counter()) > 0:
                    time.sleep(left)
                sink.sendall(chunk)
        except OSError:  # the other end went
            pass
        finally:
            sink.close()


def relayed(url: str, relay_port: int) -> str:
    """A PostgreSQL URL of the form postgresql://user@host:port/database, through the relay."""
    scheme, rest = url.split("://", 1)
    user, rest = rest.split("@", 1)
    database = rest.split("/", 1)[1]
    return f"{scheme}://{user}@127.0.0.1:{relay_port}/{database}"


def address(url: str) -> tuple[str, int]:
    """The host and port of a PostgreSQL URL of the form postgresql://user@host:port/..."""
    host, port = url.split("@", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)
