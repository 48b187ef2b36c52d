"""The store's held traces, as the tick settles and forgets them (`Store.traces`)."""

from __future__ import annotations

from .connection import Database
from .held_spans import HeldSpans


class HeldTraces:
    """The framework spans `held` in `database` by trace until their trials settle: which
    traces are due, and letting go of those that are done. Each call is one transaction (or
    one read)."""

    def __init__(self, database: Database, held: HeldSpans) -> None:
        self._database, self._held = database, held

    @property
    def spans_let_go(self) -> int:
        """Framework spans let go to stay within the held-span cap, or beyond a trace's cap."""
        return self._held.spans_let_go

    def held_spans(self) -> int:
        """Framework spans held for trials still to settle or to recognise late copies of
        (counted, in a shared store)."""
        if self._database.shared:
            with self._database.locked() as cursor:
                return self._held.count(cursor)
        return self._held.spans_held

    def quiet_traces(self, before: float, held_before: float, limit: int = 1000) -> list[str]:
        """Traces with a trial due to settle: not settled, and its own spans (the trial span and
        those below it, whatever else shares the trace) quiet since `before`, or its trial span
        held since `held_before` however busy they still are."""
        with self._database.locked() as cursor:
            return self._held.quiet_traces(cursor, before, held_before, limit)

    def runs_waiting(self, before: float, held_before: float) -> frozenset[str]:
        """The runs with a trial due to settle (as `quiet_traces` says) still to settle."""
        with self._database.locked() as cursor:
            return self._held.runs_waiting(cursor, before, held_before)

    def forget_traces(self, before: float, limit: int = 1000) -> int:
        """Delete up to `limit` traces quiet since `before` with no trial left to settle (none
        came, or every one is stored); how many. A settled trial's spans are kept until then,
        so that a late copy of them is known for what it is."""
        with self._database.transaction() as cursor:
            return self._held.forget_traces(cursor, before, limit)

    def set_aside_trace(self, trace_id: str) -> int:
        """Give up a trace whose trials the store refused (for what they hold, not for being
        away): they count as settled, never stored, and its spans are let go; how many trials."""
        with self._database.transaction() as cursor:
            return self._held.set_aside(cursor, trace_id)

    def release_settled(self, before: float, limit: int = 1000) -> int:
        """Let go of the span facts of up to `limit` traces quiet since `before` whose trials are
        all settled: a span that comes below them later is late, not an amendment; how many."""
        with self._database.transaction() as cursor:
            return self._held.release_settled(cursor, before, limit)
