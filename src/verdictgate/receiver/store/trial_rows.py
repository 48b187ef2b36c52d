"""Trials as rows of the `trials` table: decision keys as comparable text, the tiers column, one
write's trials grouped by run, and stored rows read back as trials and evidence."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from ...evidence import Evidence
from ...trial_model import Decision, NoDecision, Trial
from .connection import SqlRow

TrialRow = tuple[
    str, str, int, str | None, str | None, str | None, float | None, int | None, str | None
]
"""A trial as the runs' insert stores it, but for its batch: run, case, trial, decision key,
expected, error type, latency, passed (1, 0 or None), tiers."""
RepeatRow = tuple[str | None, str | None, str, str, int, int]
"""The parameters that count one repeated identity: key, key, run, case, trial, batch."""


def encode_decision(decision: Decision | None) -> str | None:
    """A decision key as one comparable text: `l:label`, `t:["a","b"]`, `n:reason`; None for errors."""
    if decision is None:
        return None
    if isinstance(decision, str):
        return "l:" + decision
    if isinstance(decision, NoDecision):
        return "n:" + decision.reason
    return "t:" + json.dumps(list(decision), ensure_ascii=False, separators=(",", ":"))


def decode_decision(text: str | None) -> Decision | None:
    """The inverse of encode_decision."""
    if text is None:
        return None
    kind, body = text[:2], text[2:]
    if kind == "l:":
        return body
    if kind == "n:":
        return NoDecision(body)
    return tuple(json.loads(body))


@dataclass(frozen=True)
class TrialBatch:
    """One write's trials by run, given and as rows (each run's are stored under the number of
    the write to that run, its version, so that a repeat within the write is told from a repeat
    of an earlier one)."""

    rows: dict[str, list[TrialRow]]
    given: dict[str, list[Trial]]


def trial_batch(trials: Iterable[Trial]) -> TrialBatch:
    """A write's trials grouped by run, in the order given."""
    by_run: dict[str, list[TrialRow]] = {}
    given: dict[str, list[Trial]] = {}
    for trial in trials:
        decision = trial.decision
        key = "l:" + decision if type(decision) is str else encode_decision(decision)
        rows = by_run.get(trial.run)
        if rows is None:
            rows = by_run[trial.run] = []
            given[trial.run] = []
        given[trial.run].append(trial)
        rows.append(
            (
                trial.run,
                trial.case,
                trial.index,
                key,
                trial.expected,
                trial.error_type,
                trial.latency_ms,
                None if trial.passed is None else int(trial.passed),
                _tiers_column(trial),
            )
        )
    return TrialBatch(by_run, given)


def repeats(rows: list[TrialRow], batch: int) -> list[RepeatRow]:
    """The parameters that count repeats: a first occurrence in this write is compared with rows
    of earlier writes; a later occurrence with the row its first occurrence stored (any batch)."""
    seen: set[tuple[str, str, int]] = set()
    parameters = []
    for run, case, index, key, *_ in rows:
        identity = (run, case, index)
        parameters.append((key, key, run, case, index, -1 if identity in seen else batch))
        seen.add(identity)
    return parameters


def evidence_of(run_id: str, rows: list[SqlRow]) -> Evidence:
    """A run's evidence from its stored rows (case, trial, decision, expected, error type,
    duplicates, conflict, latency, passed, tiers)."""
    evidence = Evidence()
    evidence.add_all(trial_of_row(run_id, row) for row in rows)  # sparse cases laid out later
    evidence.note_repeats(
        sum(row[5] for row in rows), ((run_id, row[0], row[1]) for row in rows if row[6])
    )
    return evidence


def _tiers_column(trial: Trial) -> str | None:
    """What the tiers found, whether the path's order was tied and the case's further names, as
    compact JSON `[failed, warned, skipped, tied, aliases, key_id]` (rows from before `tied` have
    three items, from before `aliases` four); None when nothing."""
    if not (
        trial.invariants_failed
        or trial.invariants_warned
        or trial.evaluation_skipped
        or trial.tied_steps
        or trial.aliases
        or trial.key_id is not None
    ):
        return None
    tiers = [
        list(trial.invariants_failed),
        list(trial.invariants_warned),
        trial.evaluation_skipped,
        [list(pair) for pair in trial.tied_steps],
    ]
    if trial.aliases or trial.key_id is not None:
        tiers += [list(trial.aliases), trial.key_id]
    return json.dumps(tiers, separators=(",", ":"))


def trial_of_row(run_id: str, row: SqlRow) -> Trial:
    """A stored row as the trial it records."""
    case, index, decision, expected, error_type, _, _, latency, passed, tiers = row
    failed, warned, skipped, *later = json.loads(tiers) if tiers else ((), (), False)
    tied = later[0] if later else []
    aliases, key_id = later[1:] if len(later) > 1 else ([], None)
    return Trial(
        case,
        index,
        decode_decision(decision),
        run_id,
        expected,
        error_type,
        passed=None if passed is None else bool(passed),
        invariants_failed=tuple(failed),
        invariants_warned=tuple(warned),
        latency_ms=latency,
        evaluation_skipped=bool(skipped),
        tied_steps=tuple(tuple(pair) for pair in tied),
        aliases=tuple(aliases),
        key_id=key_id,
    )
