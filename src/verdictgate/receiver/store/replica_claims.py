"""Which replica decides which run, as the store keeps it (`Store.claims`): claims, heartbeats
and what other replicas wrote to a run."""

from __future__ import annotations

from ...trial_model import Trial
from .claims import RunClaims
from .connection import Database
from .outbox import Outbox
from .records import RunVersion, StoredRun
from .trial_rows import trial_of_row


class ReplicaClaims:
    """The claims of the replicas writing `database`: runs claimed and owned, heartbeats
    (`alive`: until when each replica writing through this store renewed its own, shared with
    the store's writes), claims let go. Each call is one transaction (or one read)."""

    def __init__(
        self, database: Database, claims: RunClaims, outbox: Outbox, alive: dict[str, float]
    ) -> None:
        self._database, self._claims, self._outbox, self._alive = database, claims, outbox, alive

    def claim_runs(
        self, replica: str, now: float, limit: int = 1000, *, mine: bool = False
    ) -> list[StoredRun]:
        """Claim for `replica` (whose heartbeat its caller renewed) up to `limit` runs not
        admitted whose owner's heartbeat lapsed before `now`, and with `mine` those it owns
        already; the runs claimed, oldest first, as they stand (open, or final and still to
        admit)."""
        with self._database.transaction() as cursor:
            return self._claims.claim(cursor, replica, now, limit, mine)

    def owned_runs(self, replica: str) -> dict[str, tuple[int, bool]]:
        """The runs `replica` owns and has not admitted: the writes that touched each so far
        (`RunVersion.writes`), and whether final."""
        with self._database.locked() as cursor:
            return self._claims.owned(cursor, replica)

    def renew(self, replica: str, until: float) -> None:
        """Renew `replica`'s heartbeat until `until`: it owns the runs it has not admitted until
        then (one row, however many runs), over a connection kept for it."""
        with self._database.heartbeat() as cursor:
            self._claims.beat(cursor, replica, until)
        self._alive[replica] = until

    def release(self, replica: str) -> None:
        """Let `replica`'s claims lapse now, on runs and outbox entries alike (a replica that
        stops), so that the others take them over at their next look."""
        self._alive.pop(replica, None)
        with self._database.transaction() as cursor:
            self._claims.release(cursor, replica)
            self._outbox.release(cursor, replica)

    def written_since(self, run_id: str, version: RunVersion, upto: RunVersion) -> list[Trial]:
        """The trials of a run its writes after `version` up to `upto` stored (by any
        replica)."""
        with self._database.locked() as cursor:
            rows = self._claims.written_since(cursor, run_id, version, upto)
        return [trial_of_row(run_id, row) for row in rows]
