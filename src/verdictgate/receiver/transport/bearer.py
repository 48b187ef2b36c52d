"""The bearer token a receiver may ask for: checked the same way by both transports, the query
API and the pages' sign-in, in constant time, and every host held to a few wrong tokens a
minute (`TokenThrottle`), whichever door it knocks at."""

from __future__ import annotations

import hmac
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from enum import Enum


class Presented(str, Enum):
    """What a request shows of the token."""

    RIGHT = "right"
    """The token (or the receiver asks for none)."""
    MISSING = "missing"
    """No bearer token at all: no guess, so never counted against its host."""
    WRONG = "wrong"
    """A bearer token that is not the receiver's."""
    THROTTLED = "throttled"
    """Whatever it shows, its host is past its wrong tokens for now (`TokenThrottle`)."""


REFUSED = {
    Presented.MISSING: "a bearer token is required",
    Presented.WRONG: "the bearer token is not this receiver's",
    Presented.THROTTLED: "too many wrong tokens: try again later",
}
"""What a refused request is told: nothing about the token, only which of these it is."""
WRONG_CHALLENGE = 'Bearer error="invalid_token"'
"""The `WWW-Authenticate` of a wrong token (RFC 6750); a missing one gets plain `Bearer`."""


def presented(header: str | None, token: str | None) -> Presented:
    """What an `Authorization` header (or gRPC `authorization` metadata) shows of `token`:
    RIGHT always when the receiver asks for none; MISSING without a bearer credential."""
    if token is None:
        return Presented.RIGHT
    scheme, _, credential = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return Presented.MISSING
    right = hmac.compare_digest((header or "").encode(), f"Bearer {token}".encode())
    return Presented.RIGHT if right else Presented.WRONG


def authorized(header: str | None, token: str | None) -> bool:
    """Whether a header carries `token` (always, when the receiver asks for none)."""
    return presented(header, token) is Presented.RIGHT


class TokenThrottle:
    """Wrong tokens a host may give: `allowed` a `window` of seconds; beyond, every request of
    the host that needs the token is refused (429, RESOURCE_EXHAUSTED) until the oldest try
    ages out, the right token too. One is shared by every door of a receiver, both transports
    alike (a host is its address: `[::1]` and `::1`, `::ffff:10.0.0.7` and `10.0.0.7` are one).

    The sign-in form takes a try before it checks (`attempt`), so parallel guesses cannot slip
    past, and hands it back when it was right (`succeeded`); every other check (`check`)
    counts only wrong tokens, so a sender's many requests in flight never throttle it, and
    guesses in parallel slip past by at most the requests a host has in flight. Tries are kept
    in one queue by age and swept as they age out, so memory follows the hosts trying now."""

    def __init__(
        self, allowed: int = 10, window: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.allowed, self.window, self._clock = allowed, window, clock
        self._tries: dict[str, deque[float]] = {}
        self._by_age: deque[tuple[float, str]] = deque()
        self._lock = threading.Lock()

    def check(self, header: str | None, token: str | None, host: str) -> tuple[Presented, int]:
        """What a request of `host` shows of the token, a wrong one counted, and the seconds
        its host must wait when THROTTLED (else 0)."""
        if token is None:
            return Presented.RIGHT, 0
        with self._lock:
            if wait := self._wait(_host(host)):
                return Presented.THROTTLED, wait
        shown = presented(header, token)
        if shown is Presented.WRONG:
            with self._lock:
                self._take(_host(host))
        return shown, 0

    def attempt(self, host: str) -> int:
        """Take a try for `host`: 0 when it may try now, else the seconds it must wait."""
        with self._lock:
            if wait := self._wait(_host(host)):
                return wait
            self._take(_host(host))
            return 0

    def hosts(self) -> int:
        """Hosts with tries still counted."""
        with self._lock:
            self._sweep(self._clock())
            return len(self._tries)

    def succeeded(self, host: str) -> None:
        """The try was the right token: it does not count against the host."""
        with self._lock:
            tries = self._tries.get(_host(host))
            if tries:
                tries.pop()

    def _wait(self, host: str) -> int:
        now = self._clock()
        self._sweep(now)
        tries = self._tries.get(host)
        if tries is None or len(tries) < self.allowed:
            return 0
        return max(1, math.ceil(tries[0] + self.window - now))

    def _take(self, host: str) -> None:
        now = self._clock()
        self._tries.setdefault(host, deque()).append(now)
        self._by_age.append((now, host))

    def _sweep(self, now: float) -> None:
        while self._by_age and self._by_age[0][0] <= now - self.window:
            when, host = self._by_age.popleft()
            tries = self._tries.get(host)
            while tries and tries[0] <= when:
                tries.popleft()
            if not tries:
                self._tries.pop(host, None)


def _host(host: str) -> str:
    """One name for a peer address, however a transport writes it."""
    bare = host.removeprefix("[").removesuffix("]")
    mapped = bare.removeprefix("::ffff:")
    return mapped if mapped != bare and mapped.count(".") == 3 else bare
