"""A store made before trials were keyed by their trial span, brought to that keying (the
columns `arrived`, `spans`, `run_id` and `parent_id` filled in as they are added)."""

from __future__ import annotations

import msgspec

from ...otel.framework_traces import TrialMark
from ...span_facts import SpanFacts
from .connection import Cursor
from .held_spans import MARKED
from .statements import sql

_FACTS = msgspec.msgpack.Decoder(SpanFacts)
_MARK = msgspec.msgpack.Decoder(TrialMark)

_MARKS_ARRIVED = sql(
    "UPDATE trial_marks SET arrived = (SELECT last_seen FROM traces t WHERE"
    " t.trace_id = trial_marks.trace_id), last_seen = (SELECT last_seen FROM traces t"
    " WHERE t.trace_id = trial_marks.trace_id) WHERE arrived IS NULL"
)
_TRACES_MARKED = sql("UPDATE traces SET state = ? WHERE state = 2")
_TRACES_SPANS = sql(
    "UPDATE traces SET spans = (SELECT COUNT(*) FROM trace_spans s WHERE"
    " s.trace_id = traces.trace_id)"
)
_MARKS_UNSETTLED = sql("SELECT trace_id, span_id, mark FROM trial_marks WHERE settled = 0")
_MARK_RUN = sql("UPDATE trial_marks SET run_id = ? WHERE trace_id = ? AND span_id = ?")
_SPANS = sql("SELECT trace_id, span_id, facts FROM trace_spans")
_SPAN_PARENT = sql("UPDATE trace_spans SET parent_id = ? WHERE trace_id = ? AND span_id = ?")


def migrate_held(cursor: Cursor, added: set[str]) -> None:
    """What a store made before trials were keyed by their trial span held, brought to the new
    keying: marks get their arrival (their trace's last span), traces their span counts and
    spans their parent; a trace that release had settled is one whose trials are all settled
    (it took no spans since)."""
    if "arrived" in added:
        cursor.execute(_MARKS_ARRIVED)
        cursor.execute(_TRACES_MARKED, (MARKED,))
    if "spans" in added:
        cursor.execute(_TRACES_SPANS)
    if "run_id" in added:  # the trials still to settle: the settled ones need no run
        rows = cursor.execute(_MARKS_UNSETTLED).fetchall()
        cursor.executemany(
            _MARK_RUN, [(_MARK.decode(mark).run, trace, span) for trace, span, mark in rows]
        )
    if "parent_id" in added:
        rows = cursor.execute(_SPANS).fetchall()
        cursor.executemany(
            _SPAN_PARENT,
            [(_FACTS.decode(facts).parent_id, trace, span) for trace, span, facts in rows],
        )
