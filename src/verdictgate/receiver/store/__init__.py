"""The durable trial store (a SQLite file in WAL mode, or a PostgreSQL database shared by
replicas): first record wins, conflicts kept, runs resumable and claimed.

`Store` (`facade`) takes a request's contents whole (`Batch`, held to `WriteCaps`) and composes
one class per aggregate, each over the cursor of the transaction it is given: `Runs` (runs and
their trials: writing, admitting; `run_rows` reads a run back, `run_declarations` declares it),
`RunClaims` (which replica decides a run, alive while its heartbeat holds), `HeldSpans`
(framework spans held until their trial settles; `span_placement` finds where a new span falls),
`Outbox` (admissions staged for publishing, claimed for delivery) and `RunListing` (listing and
a SQLite store's retention). Beside its own calls, `Store.traces` (`HeldTraces`),
`Store.claims` (`ReplicaClaims`) and `Store.outbox` (`OutboxQueue`) give the tick, replication
and the forwarder what each needs. `TrialDays` partitions a PostgreSQL store's trials by day and
drops whole days for retention; `schema` creates and migrates the tables (`held_migration`
brings an older store's held spans to trial-span keying); `statements` makes each statement's
text in either dialect, once; `connection` holds where they run and their transactions (a
SQLite file's one connection; `postgres`, a PostgreSQL database's pool); `locations` names a
store, and `faults` says what its errors are.
"""

from .batch import Batch, WriteCaps
from .claims import LOCAL
from .facade import Store
from .faults import is_store_error
from .records import RunVersion, StoredRun, Written
from .trial_rows import encode_decision

__all__ = [
    "LOCAL",
    "Batch",
    "RunVersion",
    "Store",
    "StoredRun",
    "WriteCaps",
    "Written",
    "encode_decision",
    "is_store_error",
]
