"""The receiver's HTTP port, served by the bounded server of the `http` package: one small
router over its three parts, each in its own module.

- OTLP/HTTP ingest, `POST /v1/traces` (ingest/otlp_http.py);
- the JSON query API, `GET /v1/runs` and `GET /v1/runs/{id}` (queries/json_api.py);
- the pages for a browser, `GET /` and `GET /runs/{id}`, and signing in to them, `POST /`
  (queries/page_routes.py, queries/sign_in.py);
- `GET /healthz`, for a load balancer's or Kubernetes' probe, answered within a second
  whatever the store does: 200 when the store answered a round trip within half a second,
  503 when it did not (`Store.reachable`); it needs no token and tells nothing else.

A known path asked with another method is 405 with `Allow`; any other path 404 (a GET one
after the token is checked, as the API's). Whatever a route lets out is answered by
`HttpExchange.fail` (a store error 503 with `Retry-After`, anything unplanned a logged 500
"internal error").
"""

from __future__ import annotations

from urllib.parse import urlsplit

from google.rpc import code_pb2

from ..core import Receiver
from ..ingest.exports import Ingest
from ..ingest.otlp_http import TRACES_PATH, export_traces
from ..queries.json_api import is_api_path, query_runs
from ..queries.page_routes import is_page_path, serve_page
from .bearer import TokenThrottle
from .http_exchange import HttpExchange

HEALTH_PATH = "/healthz"


class ReceiverHttpHandler(HttpExchange):
    """Routes each request by path, then method; a bound subclass (`http_handler`) supplies
    the ingest path, the receiver queried, the token and the throttle of wrong ones."""

    ingest: Ingest
    receiver: Receiver

    def dispatch(self) -> None:
        path = urlsplit(self.path).path
        if path == HEALTH_PATH and self.command in ("GET", "HEAD"):
            ready = self.receiver.store.reachable()
            body = b'{"status":"ok"}' if ready else b'{"status":"store unavailable"}'
            return self.answer(200 if ready else 503, body, "application/json")
        if is_page_path(path):
            return serve_page(self, path, self.receiver)
        allowed = "POST" if path == TRACES_PATH else "GET" if is_api_path(path) else None
        if self.command == "POST" and allowed in ("POST", None):
            return export_traces(self, self.ingest)
        if self.command == "GET" and allowed in ("GET", None):
            return query_runs(self, self.receiver)
        if allowed is None:
            return self.answer_status(404, code_pb2.NOT_FOUND, "unknown path", self.error_type())
        self.refuse_method(allowed)


def http_handler(
    ingest: Ingest,
    receiver: Receiver,
    token: str | None,
    throttle: TokenThrottle | None = None,
) -> type[ReceiverHttpHandler]:
    """The handler class the server instantiates per connection, bound to `ingest`, the
    `receiver` its queries and pages read, `token` and the throttle of wrong tokens (one of
    its own when none is shared)."""
    return type(
        "Handler",
        (ReceiverHttpHandler,),
        {
            "ingest": ingest,
            "receiver": receiver,
            "token": token,
            "throttle": throttle or TokenThrottle(),
        },
    )
