"""Framework spans held by trace until their trial settles: harnesses' trial marks and span
facts kept (first copy wins), a span below a settled trial counted late, settled trials' facts
let go, the spans held kept under a cap, and traces due to settle or to forget found."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import msgspec

from ...otel.framework_traces import FrameworkSpan, TrialMark
from ...span_facts import SpanFacts
from .connection import Cursor
from .span_placement import DELETE_SPAN, SETTLED_SPAN, TrialAbove, place
from .statements import SKIP_LOCKED, each_row, insert_rows, sql

MAX_TRACE_SPANS = 50_000
"""Framework spans one trace holds at most; later ones are dropped and counted."""

WAITING, MARKED = 0, 1
"""A trace's state: no trial span yet, a trial span held."""

SettledTrials = Iterable[tuple[str, Sequence[tuple[str, Sequence[str]]]]]
"""Trials now stored, by trace: (trace id, [(the trial span's id, the span ids below it)])."""


PackedTrace = tuple[list[bytes], list[bytes], set[str]]
"""A trace's trial marks and span facts as stored (msgpack), and the span ids of the marks
amended since they settled: `unpack_trace` reads them."""

_MARK = msgspec.msgpack.Decoder(TrialMark)
_FACTS = msgspec.msgpack.Decoder(SpanFacts)
_PACK = msgspec.msgpack.Encoder()

_COUNT = sql("SELECT COUNT(*) FROM trace_spans")
_ADD_SPANS = each_row(
    "UPDATE traces SET spans = spans + ? WHERE trace_id = ?",
    "UPDATE traces SET spans = traces.spans + v.n FROM unnest(?::bigint[], ?::text[])"
    " AS v (n, trace_id) WHERE traces.trace_id = v.trace_id",
)
_MARK_SEEN = each_row(
    "UPDATE trial_marks SET last_seen = ? WHERE trace_id = ? AND span_id = ?",
    "UPDATE trial_marks SET last_seen = v.seen FROM unnest(?::double precision[], ?::text[],"
    " ?::text[]) AS v (seen, trace_id, span_id)"
    " WHERE trial_marks.trace_id = v.trace_id AND trial_marks.span_id = v.span_id",
)
_SETTLE = sql("UPDATE trial_marks SET settled = 1 WHERE trace_id = ? AND span_id = ?")
_GIVE_UP = sql("UPDATE trial_marks SET settled = 1 WHERE trace_id = ? AND settled = 0")
_SPANS_HELD_BY = sql("SELECT spans FROM traces WHERE trace_id = ?")
_SETTLED_QUIET = sql(
    "SELECT trace_id, spans FROM traces WHERE last_seen < ? AND spans > 0 AND state = ?"
    " AND NOT EXISTS (SELECT 1 FROM trial_marks m WHERE m.trace_id = traces.trace_id"
    " AND m.settled = 0) ORDER BY last_seen LIMIT ?",
    SKIP_LOCKED,
)
_SETTLED_HOLDING = sql(
    "SELECT trace_id, spans FROM traces WHERE state = ? AND spans > 0 AND NOT EXISTS"
    " (SELECT 1 FROM trial_marks m WHERE m.trace_id = traces.trace_id AND m.settled = 0)"
    " ORDER BY last_seen LIMIT 256",
    SKIP_LOCKED,
)
_IN_STATE = sql(
    "SELECT trace_id, spans FROM traces WHERE state = ? ORDER BY last_seen LIMIT 256",
    SKIP_LOCKED,
)
_QUIET = sql(
    "SELECT trace_id FROM (SELECT trace_id, last_seen AS due FROM trial_marks"
    " WHERE settled = 0 AND last_seen < ? UNION ALL SELECT trace_id, arrived FROM"
    " trial_marks WHERE settled = 0 AND arrived < ?) AS due_marks"
    " GROUP BY trace_id ORDER BY MIN(due) LIMIT ?"
)
_RUNS_WAITING = sql(
    "SELECT run_id FROM trial_marks WHERE settled = 0 AND last_seen < ? UNION"
    " SELECT run_id FROM trial_marks WHERE settled = 0 AND arrived < ?"
)
_DUE = (
    "SELECT span_id FROM trial_marks WHERE trace_id = ? AND settled = 0"
    " AND (last_seen < ? OR arrived < ?)"
)
"""A trace's due trials, read through the index of trials not settled (which SQLite takes for
it only where it holds every column read)."""
_DUE_MARKS = sql(
    f"SELECT mark, span_id, amended FROM trial_marks WHERE trace_id = ? AND span_id IN ({_DUE})"
)
_FACTS_BELOW_DUE = sql(
    "WITH RECURSIVE below (span_id) AS (SELECT span_id FROM trace_spans"
    f" WHERE trace_id = ? AND parent_id IN ({_DUE}) UNION SELECT s.span_id"
    " FROM below b JOIN trace_spans s ON s.trace_id = ? AND s.parent_id = b.span_id)"
    " SELECT (SELECT facts FROM trace_spans s WHERE s.trace_id = ? AND s.span_id ="
    " below.span_id) FROM below"
)
"""The facts of the spans below a trace's due trials: their ids walked down through the index
of spans by parent (`UNION`: a span reached twice, or a loop, once), then each one's facts
looked up by its key (both stores' planners then read only the trials' spans)."""
_FORGETTABLE = sql(
    "SELECT trace_id FROM traces WHERE last_seen < ? AND NOT EXISTS (SELECT 1 FROM"
    " trial_marks m WHERE m.trace_id = traces.trace_id AND m.settled = 0)"
    " ORDER BY last_seen LIMIT ?",
    SKIP_LOCKED,
)
_DELETE_SPANS = each_row(
    "DELETE FROM trace_spans WHERE trace_id = ?",
    "DELETE FROM trace_spans WHERE trace_id = ANY(?::text[])",
)
_FORGET = tuple(
    each_row(
        f"DELETE FROM {table} WHERE trace_id = ?",
        f"DELETE FROM {table} WHERE trace_id = ANY(?::text[])",
    )
    for table in ("settled_spans", "trial_marks", "traces")
)
"""What goes of a trace once its spans are gone, in order."""
_SEE_TRACES = insert_rows(
    "traces",
    {"trace_id": "text", "last_seen": "double precision", "state": "bigint"},
    " ON CONFLICT (trace_id) DO UPDATE SET last_seen = excluded.last_seen, state = CASE WHEN"
    " excluded.state > traces.state THEN excluded.state ELSE traces.state END"
    " RETURNING trace_id, spans",
)
"""Traces seen (a trace with a new trial span marked, never unmarked): the spans each holds."""
_HOLD_MARKS = insert_rows(
    "trial_marks",
    {
        "trace_id": "text",
        "span_id": "text",
        "mark": "bytea",
        "run_id": "text",
        "last_seen": "double precision",
        "arrived": "double precision",
    },
    " ON CONFLICT DO NOTHING RETURNING trace_id, span_id",
)
_HOLD_FACTS = insert_rows(
    "trace_spans",
    {"trace_id": "text", "span_id": "text", "facts": "bytea", "parent_id": "text"},
    " ON CONFLICT DO NOTHING RETURNING trace_id, span_id",
)
_UNDERIVABLE = each_row(
    "UPDATE trial_marks SET arrived = NULL WHERE trace_id = ? AND settled = 1",
    "UPDATE trial_marks SET arrived = NULL WHERE trace_id = ANY(?::text[]) AND settled = 1",
)
_EMPTIED = each_row(
    "UPDATE traces SET spans = 0 WHERE trace_id = ?",
    "UPDATE traces SET spans = 0 WHERE trace_id = ANY(?::text[])",
)
_DROP_UNMARKED = each_row(
    f"DELETE FROM traces WHERE trace_id = ? AND state = {WAITING}",
    f"DELETE FROM traces WHERE trace_id = ANY(?::text[]) AND state = {WAITING}",
)


@dataclass(frozen=True)
class SpanIntake:
    """What one write's framework spans did: per run, the spans late below a settled trial;
    the change in spans held; the spans dropped or let go; the runs whose unsettled trials got
    a span."""

    late: dict[str, int] = field(default_factory=dict)
    held: int = 0
    dropped: int = 0
    heard: frozenset[str] = frozenset()


class HeldSpans:
    """The `traces`, `trial_marks`, `trace_spans` and `settled_spans` tables, with the count of
    spans held (kept here, so that no write counts them; in a `shared` store, where other
    replicas hold and settle spans too, an estimate: counted again when it says the cap is
    passed, and by the receiver every 30 s, `Store.recount`)."""

    def __init__(self, cursor: Cursor, *, shared: bool = False) -> None:
        self._shared = shared
        self.spans_held = self.count(cursor)
        self.spans_let_go = 0
        """Framework spans let go to stay within the held-span cap, or beyond a trace's cap."""

    def take(
        self,
        cursor: Cursor,
        marks: list[TrialMark],
        spans: list[FrameworkSpan],
        settled: SettledTrials,
        now: float,
        max_held: int | None,
        amend_since: float = -math.inf,
    ) -> SpanIntake:
        """Hold a write's trial marks and spans, settle the trials it stored, and beyond
        `max_held` spans held let go of the traces that need them least (`let_go`). Count the
        intake in (`count_in`) once the rest of the write is done."""
        intake = self.hold(cursor, marks, spans, now, amend_since)
        self.settle(cursor, settled)
        held = intake.held
        released = 0
        if max_held is not None and self.spans_held + held > max_held and self._shared:
            self.spans_held = self.count(cursor) - held  # this write's are counted in already
        if max_held is not None and self.spans_held + held > max_held:
            released = self.let_go(cursor, self.spans_held + held - max_held)
        return dataclasses.replace(intake, held=held - released, dropped=intake.dropped + released)

    def count(self, cursor: Cursor) -> int:
        """The framework spans held, counted."""
        (held,) = cursor.execute(_COUNT).fetchone()
        return int(held)

    def count_in(self, intake: SpanIntake) -> None:
        """Count a write's spans held and let go."""
        self.spans_held += intake.held
        self.spans_let_go += intake.dropped

    def hold(
        self,
        cursor: Cursor,
        marks: list[TrialMark],
        spans: list[FrameworkSpan],
        now: float,
        amend_since: float = -math.inf,
    ) -> SpanIntake:
        """Keep trial marks and framework span facts by trace (first copy wins: a span sent twice
        is held once). A new span below a trial not yet settled keeps that trial from settling
        for now; one below a settled trial whose trial span arrived since `amend_since` and whose
        run is open amends it (it settles again, from all its spans); one below any other settled
        trial is late: counted for its run, not held for it. A trace holds MAX_TRACE_SPANS at
        most: spans beyond are dropped. Written in bulk: each table takes the write's rows in
        one statement, and a span's trial is found through the write's own spans and trial
        spans first, the store asked only above them."""
        traces = {span.trace_id for span in spans} | {mark.trace_id for mark in marks}
        if not traces:
            return SpanIntake()
        room = _see_traces(cursor, traces, {mark.trace_id for mark in marks}, now)
        new_marks = _hold_marks(cursor, marks, now)
        new, dropped = _hold_facts(cursor, spans, room)
        known: dict[tuple[str, str], TrialAbove | None] = {
            key: TrialAbove(mark.span_id, False, mark.run, now) for key, mark in new_marks.items()
        }
        placed = place(cursor, new, known, amend_since)
        cursor.executemany(_ADD_SPANS, [(n, trace_id) for trace_id, n in placed.added.items()])
        cursor.executemany(
            _MARK_SEEN, [(now, trace_id, span_id) for trace_id, span_id in sorted(placed.active)]
        )
        heard = {mark.run for mark in new_marks.values()}
        return SpanIntake(
            placed.late, sum(placed.added.values()), dropped, frozenset(heard | placed.heard)
        )

    def settle(self, cursor: Cursor, settled: SettledTrials) -> None:
        """Mark trials settled, and note the ids of the spans below them (to know a later span
        below them for what it is once their facts are let go). The facts stay held, so that a
        span that comes late, while its run is open, has the trial derived again from them all
        (`release_settled` lets them go once the trace was quiet for the idle period)."""
        marks: list[tuple[str, str]] = []
        spans: list[tuple[str, str, str]] = []
        for trace_id, trials in settled:
            for mark, below in trials:
                marks.append((trace_id, mark))
                spans.extend((trace_id, span_id, mark) for span_id in below)
        cursor.executemany(_SETTLE, marks)
        cursor.executemany(SETTLED_SPAN, spans)

    def set_aside(self, cursor: Cursor, trace_id: str) -> int:
        """Give up a trace whose trials cannot be stored: they are taken as settled, never
        stored (their runs miss them), and its spans are let go, so that a later span below
        them is late; the trials given up."""
        cursor.execute(_GIVE_UP, (trace_id,))
        given_up = cursor.rowcount
        row = cursor.execute(_SPANS_HELD_BY, (trace_id,)).fetchone()
        _let_go_of_traces(cursor, [(trace_id,)])
        self.spans_held = max(self.spans_held - (row[0] if row else 0), 0)
        return given_up

    def release_settled(self, cursor: Cursor, before: float, limit: int) -> int:
        """Let go of the facts of up to `limit` traces quiet since `before` whose trials are all
        settled (their ids stay in `settled_spans`: a later span below them is late); how many
        traces. Read through the index of traces holding spans, so the cost follows them."""
        cursor.execute(_SETTLED_QUIET, (before, MARKED, limit))
        rows = cursor.fetchall()
        _let_go_of_traces(cursor, [(trace_id,) for trace_id, _ in rows])
        self.spans_held = max(self.spans_held - sum(spans for _, spans in rows), 0)
        return len(rows)

    def let_go(self, cursor: Cursor, excess: int) -> int:
        """Delete held spans until at least `excess` are gone (or nothing is left to let go); how
        many went. First the spans of traces whose trials are all settled (no trial needs them),
        then traces with no trial span at all, quiet the longest first (under a flood, the
        newest, which may be an honest trial's spans waiting for its trial span, go last)."""
        gone = 0
        for query, state in ((_SETTLED_HOLDING, MARKED), (_IN_STATE, WAITING)):
            while gone < excess:
                rows = cursor.execute(query, (state,)).fetchall()
                if not rows:
                    break
                doomed = []
                for trace_id, spans in rows:
                    doomed.append((trace_id,))
                    gone += spans
                    if gone >= excess:
                        break
                _let_go_of_traces(cursor, doomed)
        return gone

    def quiet_traces(
        self, cursor: Cursor, before: float, held_before: float, limit: int
    ) -> list[str]:
        """Traces with a trial due to settle: not settled, and its own spans quiet since
        `before`, or its trial span held since `held_before`; the longest due first."""
        rows = cursor.execute(_QUIET, (before, held_before, limit)).fetchall()
        return [trace_id for (trace_id,) in rows]

    def runs_waiting(self, cursor: Cursor, before: float, held_before: float) -> frozenset[str]:
        """The runs with a trial due to settle (as `quiet_traces` finds them) not settled yet:
        read through the indexes of trials not settled, so the cost follows the backlog."""
        rows = cursor.execute(_RUNS_WAITING, (before, held_before)).fetchall()
        return frozenset(run_id for (run_id,) in rows if run_id is not None)

    def trace(
        self, cursor: Cursor, trace_id: str, quiet_since: float, held_since: float
    ) -> PackedTrace:
        """A trace's trials due to settle (as `quiet_traces` says) and the facts of the spans
        below them, still packed: read down from their trial spans, so the cost follows the
        trials settled, not the rest of their trace."""
        due = (trace_id, quiet_since, held_since)
        marks = cursor.execute(_DUE_MARKS, (trace_id, *due)).fetchall()
        spans = cursor.execute(_FACTS_BELOW_DUE, (trace_id, *due, trace_id, trace_id)).fetchall()
        amended = {span_id for _, span_id, again in marks if again}
        return [mark for mark, _, _ in marks], [facts for (facts,) in spans], amended

    def forget_traces(self, cursor: Cursor, before: float, limit: int) -> int:
        """Delete up to `limit` traces quiet since `before` with no trial left to settle; how
        many. A settled trial's spans are kept until then, so that a late copy of them is known
        for what it is."""
        # held, and checked again, till the commit: a trace that took a span meanwhile is kept
        cursor.execute(_FORGETTABLE, (before, limit))
        doomed = [(trace_id,) for (trace_id,) in cursor.fetchall()]
        cursor.executemany(_DELETE_SPANS, doomed)
        released = max(cursor.rowcount, 0)
        for statement in _FORGET:
            cursor.executemany(statement, doomed)
        self.spans_held = max(self.spans_held - released, 0)
        return len(doomed)


@dataclass(frozen=True)
class DueTrials:
    """What a due trace's trials are derived from: the trace, their trial marks, the facts of
    the spans below them, and the trial spans of those settled before and amended since."""

    trace_id: str
    marks: list[TrialMark]
    facts: list[SpanFacts]
    amended: set[str]


def unpack_trace(packed: PackedTrace) -> tuple[list[TrialMark], list[SpanFacts], set[str]]:
    """A trace's trial marks, span facts and amended marks, as `HeldSpans.trace` packed them."""
    marks, spans, amended = packed
    return (
        [_MARK.decode(mark) for mark in marks],
        [_FACTS.decode(facts) for facts in spans],
        amended,
    )


def _see_traces(cursor: Cursor, traces: set[str], marked: set[str], now: float) -> dict[str, int]:
    """Record traces as seen `now` (a new one waiting for its trial span; one of `marked` with a
    trial span held); the room for spans each has left."""
    rows = [  # one order for every writer: replicas never deadlock
        (trace_id, now, MARKED if trace_id in marked else WAITING) for trace_id in sorted(traces)
    ]
    return {
        trace_id: MAX_TRACE_SPANS - spans for trace_id, spans in cursor.returning(_SEE_TRACES, rows)
    }


def _hold_marks(
    cursor: Cursor, marks: list[TrialMark], now: float
) -> dict[tuple[str, str], TrialMark]:
    """Keep harnesses' trial marks (a copy of one held is ignored); the marks new here, by
    (trace, trial span), not an exporter's retry of one."""
    first: dict[tuple[str, str], TrialMark] = {}
    for mark in marks:
        first.setdefault((mark.trace_id, mark.span_id), mark)
    rows = [
        (mark.trace_id, mark.span_id, _PACK.encode(mark), mark.run, now, now)
        for mark in first.values()
    ]
    return {
        (trace_id, span_id): first[trace_id, span_id]
        for trace_id, span_id in cursor.returning(_HOLD_MARKS, rows)
    }


def _hold_facts(
    cursor: Cursor, spans: list[FrameworkSpan], room: dict[str, int]
) -> tuple[list[FrameworkSpan], int]:
    """Keep the facts of spans new to their trace while it has room, in order (`room` is used
    up): the spans newly held, and how many were dropped for want of room. The first copy of
    each span in a trace with room is inserted; those that turn out past the room are taken
    out again."""
    first: dict[tuple[str, str], FrameworkSpan] = {}
    for span in spans:
        if room[span.trace_id] > 0:
            first.setdefault((span.trace_id, span.facts.span_id), span)
    rows = [
        (key[0], key[1], _PACK.encode(span.facts), span.facts.parent_id)
        for key, span in first.items()
    ]
    inserted = {(trace_id, span_id) for trace_id, span_id in cursor.returning(_HOLD_FACTS, rows)}
    new, dropped, past_room = [], 0, []
    for span in spans:
        key = (span.trace_id, span.facts.span_id)
        fresh = key in inserted
        inserted.discard(key)  # a later copy is a copy
        if room[span.trace_id] <= 0:
            dropped += 1
            if fresh:
                past_room.append(key)
        elif fresh:
            new.append(span)
            room[span.trace_id] -= 1
    cursor.executemany(DELETE_SPAN, past_room)
    return new, dropped


def _let_go_of_traces(cursor: Cursor, doomed: list[tuple[str]]) -> None:
    """Delete the spans traces hold; a trace with no trial span goes with them, and their
    settled trials can no longer be derived again (a later span below them is late)."""
    cursor.executemany(_DELETE_SPANS, doomed)
    cursor.executemany(_UNDERIVABLE, doomed)
    cursor.executemany(_EMPTIED, doomed)
    cursor.executemany(_DROP_UNMARKED, doomed)
