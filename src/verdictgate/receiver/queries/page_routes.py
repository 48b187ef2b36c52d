"""The pages on the receiver's HTTP port, for a browser: `GET /` (the runs, newest first,
filtered by suite and status) and `GET /runs/{id}` (a run's HTML report), with the token as
the API takes it or the cookie signing in gives (`POST /`, sign_in.py). Read-only, no script,
every value escaped (pages.py renders them)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, unquote, urlsplit

from google.rpc import code_pb2

from ..core import Receiver
from ..ingest.decoding import JSON
from ..transport.bearer import Presented
from ..transport.http_exchange import HttpExchange
from .pages import (
    HTML,
    PAGE_HEADERS,
    RUNS_SHOWN,
    run_page,
    runs_page,
    sign_in_page,
    unknown_run_page,
)
from .sign_in import sign_in, signed_in

_PAGE_PATH = re.compile(r"^/runs/([^/?]+)$")


def is_page_path(path: str) -> bool:
    """Whether a path is a page's (or the sign-in form's, `POST /`)."""
    return path == "/" or _PAGE_PATH.match(path) is not None


def serve_page(http: HttpExchange, path: str, receiver: Receiver) -> None:
    """Answer a request for a page's path: read it (GET, HEAD) or sign in (POST /); any other
    method is 405 with `Allow`."""
    if http.command in ("GET", "HEAD"):
        return _page(http, path, receiver)
    if http.command == "POST" and path == "/":
        return sign_in(http, http.throttle)
    methods = "GET, HEAD, POST" if path == "/" else "GET, HEAD"
    http.answer_status(405, code_pb2.UNIMPLEMENTED, f"use {methods}", JSON, {"Allow": methods})


def _page(http: HttpExchange, path: str, receiver: Receiver) -> None:
    """A page for a browser signed in or showing the token (else the sign-in form, with a
    401; a wrong token counted and a host past its wrong tokens refused, as the API does);
    every value escaped."""
    shown, wait = http.presented()
    if shown is Presented.THROTTLED:
        return http.refuse_token(shown, wait, JSON)
    if not (shown is Presented.RIGHT or signed_in(http)):
        headers = {**PAGE_HEADERS, "WWW-Authenticate": "Bearer"}
        return http.answer(401, sign_in_page().encode(), HTML, headers)
    if path == "/":
        query = parse_qs(urlsplit(http.path).query)
        suite = query.get("suite", [""])[0] or None
        status = query.get("status", [""])[0] or None
        runs = receiver.newest_runs(RUNS_SHOWN, suite, status)
        return http.answer(200, runs_page(runs, suite, status).encode(), HTML, PAGE_HEADERS)
    match = _PAGE_PATH.match(path)
    assert match is not None
    cached = receiver.cached_assessment(unquote(match.group(1)))
    if cached is None:
        return http.answer(404, unknown_run_page().encode(), HTML, PAGE_HEADERS)
    body = run_page(cached.report("html"), cached.assessment.in_progress)
    http.answer(200, body.encode(), HTML, PAGE_HEADERS)
