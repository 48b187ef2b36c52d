"""Signing in to the pages: `POST /` from the sign-in form trades the receiver's bearer token,
given once, for a cookie of this receiver's pages only (a value derived from the token, never
the token), each host held to a few tries a minute (`SignInThrottle`)."""

from __future__ import annotations

import hashlib
import hmac
import math
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import parse_qs

from .bearer import authorized
from .http_exchange import HttpExchange
from .pages import HTML, PAGE_HEADERS, sign_in_page

PAGE_COOKIE = "verdictgate_pages"
"""The cookie a browser keeps after signing in to the pages (suffixed with the port)."""
TEXT = "text/plain; charset=utf-8"
SIGN_IN_BYTES = 4096
"""The most a sign-in form may send."""


class SignInThrottle:
    """Tries a host may make at the sign-in form: `allowed` a `window` of seconds; beyond, the
    form answers 429 until the oldest try ages out. A try is taken (`attempt`) before the token
    is checked, so parallel guesses cannot slip past, and handed back when it was right. Tries
    are kept in one queue by age and swept as they age out, so memory follows the hosts trying
    now."""

    def __init__(
        self, allowed: int = 10, window: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.allowed, self.window, self._clock = allowed, window, clock
        self._tries: dict[str, deque[float]] = {}
        self._by_age: deque[tuple[float, str]] = deque()
        self._lock = threading.Lock()

    def attempt(self, host: str) -> int:
        """Take a try for `host`: 0 when it may try now, else the seconds it must wait."""
        with self._lock:
            now = self._clock()
            self._sweep(now)
            tries = self._tries.setdefault(host, deque())
            if len(tries) >= self.allowed:
                return max(1, math.ceil(tries[0] + self.window - now))
            tries.append(now)
            self._by_age.append((now, host))
            return 0

    def hosts(self) -> int:
        """Hosts with tries still counted."""
        with self._lock:
            return len(self._tries)

    def succeeded(self, host: str) -> None:
        """The try was the right token: it does not count against the host."""
        with self._lock:
            tries = self._tries.get(host)
            if tries:
                tries.pop()

    def _sweep(self, now: float) -> None:
        while self._by_age and self._by_age[0][0] <= now - self.window:
            when, host = self._by_age.popleft()
            tries = self._tries.get(host)
            while tries and tries[0] <= when:
                tries.popleft()
            if not tries:
                self._tries.pop(host, None)


def page_key(token: str) -> str:
    """The page cookie's value: derived from the token, so the cookie is no bearer token."""
    return hmac.new(token.encode(), b"verdictgate pages", hashlib.sha256).hexdigest()


def sign_in(http: HttpExchange, throttle: SignInThrottle) -> None:
    """`POST /` from the sign-in form: the right token sets the page cookie and goes back to
    the list; a wrong one gets the form again, and a host past its tries a 429. The token
    never appears in an address, a log or a history."""
    body = http.read_body(SIGN_IN_BYTES)
    given = parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0]
    if http.token is None:  # open pages: nothing to sign in to
        return http.answer(303, b"", HTML, {"Location": "/", "Cache-Control": "no-store"})
    host = str(http.client_address[0])
    if wait := throttle.attempt(host):
        headers = {**PAGE_HEADERS, "Retry-After": str(wait)}
        return http.answer(429, b"too many wrong tokens: try again later\n", TEXT, headers)
    if not authorized(f"Bearer {given}", http.token):
        headers = {**PAGE_HEADERS, "WWW-Authenticate": "Bearer"}
        return http.answer(401, sign_in_page(failed=True).encode(), HTML, headers)
    throttle.succeeded(host)
    secure = "; Secure" if isinstance(http.connection, ssl.SSLSocket) else ""
    cookie = f"{_cookie_name(http)}={page_key(http.token)}; HttpOnly; SameSite=Strict; Path=/"
    headers = {"Location": "/", "Set-Cookie": cookie + secure, "Cache-Control": "no-store"}
    http.answer(303, b"", HTML, headers)


def signed_in(http: HttpExchange) -> bool:
    """Whether the request carries this receiver's page cookie (the header is read by hand:
    another application's odd cookie on the same host must not sign anyone out)."""
    if http.token is None:
        return True
    name = _cookie_name(http)
    for part in (http.headers.get("Cookie") or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and hmac.compare_digest(value.encode(), page_key(http.token).encode()):
            return True
    return False


def _cookie_name(http: HttpExchange) -> str:
    """One cookie per receiver: browsers send a host's cookies to every port of it."""
    return f"{PAGE_COOKIE}_{http.connection.getsockname()[1]}"
