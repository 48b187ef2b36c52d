"""A bounded HTTP/1.1 server that holds against any sender: the receiver's OTLP/HTTP port and
its Prometheus scrape port. Its interface is what this package exports; its modules are
internal to it.

- **Waiting costs no thread.** One poller thread accepts connections and reads, without
  blocking, what they send: TLS handshakes, request heads, request bodies and idle keep-alive
  connections all wait there, each under a deadline. A connection must complete its head
  within `header_timeout_seconds` of its accept (or of its first byte after an idle
  keep-alive) and is closed otherwise, so silent, slow and dribbling sockets cost a file
  descriptor for a few seconds and nothing more. A keep-alive connection idle for
  `idle_timeout_seconds` is closed. A head over 32 KiB is answered 431.
- **Bounded work.** A listen backlog of `http_backlog`; at most `max_connections` open, and
  never more than half the process's file limit (`connection_cap`): one more is answered 503
  with `Retry-After` and closed. At most `max_connections_per_host` from one peer address:
  one more closes one of the host's connections waiting on the poller (an idle keep-alive or
  a lingering close first, else the one waiting longest for its head or body, told 503), so
  stalled neighbours never lock out a sender behind the same address; only a host whose
  connections are all being served is refused. A request ready to
  be served waits in a queue of `http_queue` for one of `http_workers` threads; when the queue
  is full it is answered 503 with `Retry-After` at once.
- **The handler decides when to read the body** (after it checked the sender and admitted the
  request), with `read_body`. A body that came with its head is there at once; otherwise the
  poller reads it (`Content-Length` bytes or chunked transfer coding, decoded as it arrives,
  strict and bounded), its bytes counted as they arrive in the client's fair share of
  `max_bytes_in_flight`, holding no worker, and the request is then served again from its
  head. A body not whole within `body_timeout_seconds` is answered 503 with `Retry-After`
  (the OTLP/HTTP spec has exporters retry 429, 502, 503 and 504 only, and a body cut short by
  the network is worth retrying). Responses are written within the same timeout.
- **Plain errors.** A request line or head the server cannot parse (non-HTTP bytes, HTTP/0.9,
  a bad version) is answered with a plain-text 400 (505 for HTTP/2 and later) and closed.
- **Lingering close.** A connection closed after an answer (for instance a refusal whose body
  was never read) has its write side shut and whatever the client still sends read and dropped
  by the poller for up to two seconds, so the client reads the answer rather than a reset.

Handlers subclass `RequestHandler` (a `BaseHTTPRequestHandler` driven one request at a time);
every exception a handler lets out becomes an answer through its `fail` method.

Inside: `server` puts together `accepting` (new connections, within the caps), `poller` (the
waiting, and each connection's next step), `bodies` (bodies the poller reads), `workers` (the
pool), `hosts` (connections per host) and `deadlines`; the HTTP/1.1 framing they share,
without I/O, is `framing` and `chunked`; a connection's state is `connection`, its bytes
`streams`.
"""

from .handler import RequestHandler
from .refusals import RETRYABLE, HttpError
from .server import BoundedHttpServer, connection_cap, file_limit

__all__ = [
    "RETRYABLE",
    "BoundedHttpServer",
    "HttpError",
    "RequestHandler",
    "connection_cap",
    "file_limit",
]
