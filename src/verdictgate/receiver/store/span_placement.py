"""Where a write's new framework spans fall: the trial each belongs to (walked up through its
parents), and whether it is news for that trial, amends it, or is late below it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec

from ...otel.framework_traces import FrameworkSpan, TrialMark
from .connection import Cursor
from .statements import each_row, insert_rows, sql

MAX_ANCESTRY = 256
"""Spans walked up from a new span to find its trial: deeper chains are not a framework's."""

_MARK = msgspec.msgpack.Decoder(TrialMark)

SETTLED_SPAN = insert_rows(  # the ids of spans below a settled trial, kept for good
    "settled_spans",
    {"trace_id": "text", "span_id": "text", "mark": "text"},
    " ON CONFLICT (trace_id, span_id) DO NOTHING",
)
"""Never copied (its conflict named): a trial amended and settled again records its spans
again, a repeat that would fail a copy's whole group (`CopyRepeated`)."""

_AMEND_MARK = sql(
    "UPDATE trial_marks SET settled = 0, amended = 1, run_id = ? WHERE trace_id = ? AND span_id = ?"
)
_RUN_FINAL = sql("SELECT final FROM runs WHERE run_id = ?")
DELETE_SPAN = each_row(
    "DELETE FROM trace_spans WHERE trace_id = ? AND span_id = ?",
    "DELETE FROM trace_spans WHERE (trace_id, span_id) IN"
    " (SELECT * FROM unnest(?::text[], ?::text[]))",
)

_MARK_AT = sql("SELECT settled, mark, arrived FROM trial_marks WHERE trace_id = ? AND span_id = ?")
_PARENT = sql("SELECT parent_id FROM trace_spans WHERE trace_id = ? AND span_id = ?")
_SETTLED_ABOVE = sql(
    "SELECT s.mark, m.mark FROM settled_spans s JOIN trial_marks m ON"
    " m.trace_id = s.trace_id AND m.span_id = s.mark"
    " WHERE s.trace_id = ? AND s.span_id = ?"
)


class TrialAbove(NamedTuple):
    """The trial a span belongs to."""

    mark: str
    """Its trial span's id."""
    settled: bool
    run: str
    arrived: float | None
    """When its trial span arrived, while the facts of the spans between them are still held
    (a settled trial can then be derived again); None once they were let go."""


@dataclass
class Placement:
    """Where a write's new spans fell: per run, those late below a settled trial; per trace,
    those it now holds; the (trace, trial span) of unsettled trials they came below, and
    those trials' runs."""

    late: dict[str, int] = field(default_factory=dict)
    added: dict[str, int] = field(default_factory=dict)
    active: set[tuple[str, str]] = field(default_factory=set)
    heard: set[str] = field(default_factory=set)


def place(
    cursor: Cursor,
    new: list[FrameworkSpan],
    known: dict[tuple[str, str], TrialAbove | None],
    amend_since: float,
) -> Placement:
    """Find the trial of each span newly held (`known`: the trials already known by span, the
    write's new trial spans first). Below a settled trial whose run is open and
    whose spans are still held, the span amends it: the trial settles again, derived from all
    its spans, if its trial span arrived since `amend_since`. Below one whose run is final (or
    whose spans were let go, or that arrived before) the span is late
    (let go, its id kept). Otherwise it stays held, and is news for its trial once that is
    known."""
    placed = Placement()
    parents = {(span.trace_id, span.facts.span_id): span.facts.parent_id for span in new}
    open_runs: dict[str, bool] = {}
    late: list[tuple[str, str, str]] = []
    for span in new:
        trial = _trial_above(cursor, span.trace_id, span.facts.parent_id, known, parents)
        if trial is not None and trial.settled:
            arrived = trial.arrived
            if (
                arrived is None
                or arrived < amend_since
                or not _is_open(cursor, trial.run, open_runs)
            ):
                placed.late[trial.run] = placed.late.get(trial.run, 0) + 1
                late.append((span.trace_id, span.facts.span_id, trial.mark))
                continue
            cursor.execute(_AMEND_MARK, (trial.run, span.trace_id, trial.mark))
        placed.added[span.trace_id] = placed.added.get(span.trace_id, 0) + 1
        if trial is not None:
            placed.active.add((span.trace_id, trial.mark))
            placed.heard.add(trial.run)
    _settle_late(cursor, late)
    return placed


def _is_open(cursor: Cursor, run_id: str, known: dict[str, bool]) -> bool:
    """Whether a run is known and not final (`known` remembers the answers of one write)."""
    if run_id not in known:
        row = cursor.execute(_RUN_FINAL, (run_id,)).fetchone()
        known[run_id] = row is not None and not row[0]
    return known[run_id]


def _settle_late(cursor: Cursor, late: list[tuple[str, str, str]]) -> None:
    """Let go of late spans' facts (trace, span id, the span id of their trial), keeping their
    ids below their trials, so that a span below them, in any order, is late too."""
    cursor.executemany(DELETE_SPAN, [(trace_id, span_id) for trace_id, span_id, _ in late])
    cursor.executemany(SETTLED_SPAN, late)


def _trial_above(
    cursor: Cursor,
    trace_id: str,
    parent_id: str | None,
    known: dict[tuple[str, str], TrialAbove | None],
    parents: dict[tuple[str, str], str | None],
) -> TrialAbove | None:
    """The trial a span belongs to, walking up from its parent (at most MAX_ANCESTRY) through
    the write's own spans (`parents`, by span) and then the spans held; None when no trial span
    is known above it yet. `known` remembers the answer for every span walked through, so one
    request's spans walk each chain once."""
    walked: list[tuple[str, str]] = []
    found: TrialAbove | None = None
    for _ in range(MAX_ANCESTRY):
        if parent_id is None:
            break
        key = (trace_id, parent_id)
        if key in known:
            found = known[key]
            break
        walked.append(key)
        if key in parents:
            parent_id = parents[key]
            continue
        row = cursor.execute(_MARK_AT, key).fetchone()
        if row is not None:
            found = TrialAbove(parent_id, bool(row[0]), _MARK.decode(row[1]).run, row[2])
            break
        row = cursor.execute(_PARENT, key).fetchone()
        if row is None:
            found = _settled_trial(cursor, key)
            break
        parent_id = row[0]
    for key in walked:
        known[key] = found
    return found


def _settled_trial(cursor: Cursor, key: tuple[str, str]) -> TrialAbove | None:
    """The settled trial a span (trace, span id) whose facts were let go was below, if any."""
    settled = cursor.execute(_SETTLED_ABOVE, key).fetchone()
    return (
        None
        if settled is None
        else TrialAbove(settled[0], True, _MARK.decode(settled[1]).run, None)
    )
