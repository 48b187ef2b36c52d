"""The durable trial store (SQLite, WAL): first record wins, conflicts kept, runs resumable.

`Store` composes one class per aggregate, each over the cursor of the transaction it is given:
`Runs` (runs and their trials: writing, declaring, admitting), `HeldSpans` (framework spans
held until their trial settles), `Outbox` (admissions staged for publishing) and `RunListing`
(listing and retention); `schema` creates and migrates the tables, `connection` holds the one
connection, its lock and its transactions.
"""

from .facade import Store
from .records import StoredRun, Written
from .trial_rows import encode_decision

__all__ = ["Store", "StoredRun", "Written", "encode_decision"]
