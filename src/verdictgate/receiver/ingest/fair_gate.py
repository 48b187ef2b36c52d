"""Fair admission: at most so many requests and bytes held at once, shared fairly among
clients, so one aggressive sender cannot starve the others (`Gate`, its `Ticket`s, and `Busy`
when a request does not fit)."""

from __future__ import annotations

import threading
from collections.abc import Hashable

Client = tuple[str, str]
"""Who sends a request to the receiver, for fairness: (peer host, user agent). A Gate takes
any hashable key for a client (the HTTP server's own handler keys clients by peer host)."""
ANONYMOUS: Client = ("", "")


class Busy(Exception):
    """Too many requests or bytes in flight, or this client's share is taken: retry later."""


class Gate:
    """Admits at most `slots` requests and `budget` bytes at once, fairly among clients.

    A request is admitted when a slot is free, its bytes fit in the budget, and its client stays
    within its fair share: a client that already holds admitted requests may hold at most
    `max(1, (slots - 1) // n)` of them and `(budget - reserve) // n` bytes, where `n` counts the
    clients holding requests, itself included, and `reserve` is one largest request (at most
    half the budget). Shares always leave a slot and one request's bytes free, so a client that
    holds nothing (a second sender beside an aggressive one) is admitted at once; it is held only
    to the global bounds. A request that grows (`Ticket.reserve`: chunks as they are read,
    decompressed bytes) is held to the same rules: the budget always, and the client's byte
    share unless this is the only request it holds. A refusal (`Busy`) is retryable. Each call
    is O(1) under one lock.
    """

    def __init__(self, slots: int, budget: int, request_bytes: int | None = None) -> None:
        self._slots = slots
        self._budget = budget
        self._reserve = min(request_bytes if request_bytes is not None else budget, budget // 2)
        self._lock = threading.Lock()
        self._used_slots = 0
        self._used_bytes = 0
        self._held: dict[Hashable, list[int]] = {}
        """client -> [slots, bytes], for clients holding at least one slot."""

    def _byte_share(self) -> int:
        """What one client holding requests may hold in bytes (under the lock)."""
        return max(0, (self._budget - self._reserve) // max(1, len(self._held)))

    def admit(self, client: Hashable, size: int) -> Ticket:
        """A ticket for one request of `size` bytes (raises Busy); release it when done."""
        with self._lock:
            if self._used_slots >= self._slots:
                raise Busy("receiver busy, retry later")
            if self._used_bytes + size > self._budget:
                raise Busy("receiver busy (bytes in flight), retry later")
            held = self._held.get(client)
            if held is not None:
                clients = len(self._held)
                if (
                    held[0] >= max(1, (self._slots - 1) // clients)
                    or held[1] + size > self._byte_share()
                ):
                    raise Busy("this client's share of the receiver is taken, retry later")
                held[0] += 1
                held[1] += size
            else:
                self._held[client] = [1, size]
            self._used_slots += 1
            self._used_bytes += size
        return Ticket(self, client, size)

    def _grow(self, ticket: Ticket, size: int) -> None:
        with self._lock:
            if self._used_bytes + size > self._budget:
                raise Busy("receiver busy (bytes in flight), retry later")
            held = self._held[ticket.client]
            if held[0] > 1 and held[1] + size > self._byte_share():
                raise Busy("this client's share of the receiver is taken, retry later")
            self._used_bytes += size
            held[1] += size
            ticket.size += size

    def _release(self, ticket: Ticket) -> None:
        with self._lock:
            held = self._held[ticket.client]
            held[0] -= 1
            held[1] -= ticket.size
            if not held[0]:
                del self._held[ticket.client]
            self._used_slots -= 1
            self._used_bytes -= ticket.size

    def in_use(self) -> tuple[int, int, int]:
        """(slots, bytes, clients) held right now."""
        with self._lock:
            return self._used_slots, self._used_bytes, len(self._held)


class Ticket:
    """One admitted request's slot and bytes; more bytes may be reserved as the body grows
    (chunks, decompression). Released once, by `release` or leaving its `with` block."""

    def __init__(self, gate: Gate, client: Hashable, size: int) -> None:
        self._gate = gate
        self.client = client
        self.size = size
        self._released = False

    def reserve(self, more: int) -> None:
        """Hold `more` bytes too (raises Busy when the budget or, if the client holds other
        requests too, its share cannot take them)."""
        if more > 0:
            self._gate._grow(self, more)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._gate._release(self)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
