"""Signing in to the pages: `POST /` from the sign-in form trades the receiver's bearer token,
given once, for a cookie of this receiver's pages only (a value derived from the token, never
the token), each host held to a few tries a minute (`bearer.TokenThrottle`)."""

from __future__ import annotations

import hashlib
import hmac
import ssl
from urllib.parse import parse_qs

from ..transport.bearer import TokenThrottle, authorized
from ..transport.http_exchange import HttpExchange
from .pages import HTML, PAGE_HEADERS, sign_in_page

PAGE_COOKIE = "verdictgate_pages"
"""The cookie a browser keeps after signing in to the pages (suffixed with the port)."""
TEXT = "text/plain; charset=utf-8"
SIGN_IN_BYTES = 4096
"""The most a sign-in form may send."""


def page_key(token: str) -> str:
    """The page cookie's value: derived from the token, so the cookie is no bearer token."""
    return hmac.new(token.encode(), b"verdictgate pages", hashlib.sha256).hexdigest()


def sign_in(http: HttpExchange, throttle: TokenThrottle) -> None:
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
