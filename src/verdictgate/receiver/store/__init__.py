"""The durable trial store (SQLite, WAL): first record wins, conflicts kept, runs resumable.

`Store` composes one class per aggregate, each over the cursor of the transaction it is given:
`Runs` (runs and their trials: writing, declaring, admitting), `HeldSpans` (framework spans
held until their trial settles), `Outbox` (admissions staged for publishing) and `RunListing`
(listing and retention); `schema` creates and migrates the tables, `connection` holds the one
connection, its lock and its transactions.
"""

from .connection import CACHE_KIB, SqlRow
from .facade import Store
from .held_spans import MAX_ANCESTRY, MAX_TRACE_SPANS
from .listing import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from .outbox import DEFAULT_OUTBOX_LIMIT
from .records import StoredRun, Written
from .schema import ADDED_COLUMNS, INDEXES, MARKED, SCHEMA, WAITING
from .trial_rows import decode_decision, encode_decision

__all__ = [
    "ADDED_COLUMNS",
    "CACHE_KIB",
    "DEFAULT_OUTBOX_LIMIT",
    "DEFAULT_PAGE_SIZE",
    "INDEXES",
    "MARKED",
    "MAX_ANCESTRY",
    "MAX_PAGE_SIZE",
    "MAX_TRACE_SPANS",
    "SCHEMA",
    "WAITING",
    "SqlRow",
    "Store",
    "StoredRun",
    "Written",
    "decode_decision",
    "encode_decision",
]
