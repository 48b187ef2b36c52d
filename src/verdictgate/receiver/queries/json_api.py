"""The JSON query API on the receiver's HTTP port, the gRPC AdmissionService's mirror:
`GET /v1/runs` (one page of runs, oldest first: `page_size`, `page_token`) and
`GET /v1/runs/{id}` (a run's JSON report), both with the token when the receiver has one."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, unquote, urlsplit

from google.rpc import code_pb2

from ...wire_types import JsonObject
from ..core import Receiver
from ..ingest.decoding import JSON
from ..store import StoredRun
from ..transport.http_exchange import HttpExchange

_RUN_PATH = re.compile(r"^/v1/runs/([^/?]+)$")


def is_api_path(path: str) -> bool:
    """Whether a path is the query API's (which answers GET only)."""
    return path == "/v1/runs" or _RUN_PATH.match(path) is not None


def query_runs(http: HttpExchange, receiver: Receiver) -> None:
    """Answer a GET outside the pages: 401 without the token, the page of runs or the run's
        report, 404 "unknown run" for a run or path the API does not know (`token_refused`: 401 for a
    missing or a wrong token, 429 past a host's wrong tokens)."""
    url = urlsplit(http.path)
    if http.token_refused(JSON):
        return None
    if url.path == "/v1/runs":
        return _list_runs(http, receiver, parse_qs(url.query))
    match = _RUN_PATH.match(url.path)
    cached = receiver.cached_assessment(unquote(match.group(1))) if match else None
    if cached is None:
        return http.answer_status(404, code_pb2.NOT_FOUND, "unknown run", JSON)
    http.answer(200, cached.report("json").encode(), JSON)


def _list_runs(http: HttpExchange, receiver: Receiver, query: dict[str, list[str]]) -> None:
    try:
        size = int(query.get("page_size", ["0"])[0])
        runs, next_token = receiver.list_runs(query.get("page_token", [""])[0], size)
    except ValueError as error:
        return http.answer_status(400, code_pb2.INVALID_ARGUMENT, str(error), JSON)
    document = {"runs": [_summary(run) for run in runs], "next_page_token": next_token}
    http.answer(200, json.dumps(document).encode(), JSON)


def _summary(run: StoredRun) -> JsonObject:
    return {
        "run_id": run.run_id,
        "suite": run.suite,
        "point": run.point,
        "status": run.status,
        "final": run.final,
        "trials_received": run.received,
        "trials_expected": run.planned_trials,
    }
