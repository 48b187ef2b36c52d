"""Trial records (`verdictgate.trials/v1`, JSON Lines): streamed in, written out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

import msgspec

from .errors import InputError
from .evidence import MAX_TRIAL_INDEX, Evidence, TrialIndexError
from .trial_model import Decision, NoDecision, Outcome, Trial

CHUNK_BYTES = 1 << 22
DEFAULT_RUN = "run"


class TrialRecord(msgspec.Struct, gc=False):
    """The fields of a trials-file line that the engine reads; others are skipped unparsed.

    `gc=False`: records hold only strings, numbers and lists of strings, so they cannot form
    cycles, and a million of them must not trigger garbage-collector passes.
    """

    case: str
    trial: int
    outcome: Literal["decision", "no_decision", "error"]
    run: str | None = None
    verdict: str | None = None
    tools: list[str] | None = None
    reason: str | None = None
    error_type: str | None = None
    expected: str | None = None
    passed: bool | None = None
    invariants_failed: list[str] | None = None
    invariants_warned: list[str] | None = None
    latency_ms: float | None = None
    evaluation_skipped: bool | None = None


class RunLabels(msgspec.Struct):
    """Suite and decision point, read from a file's first record."""

    suite: str | None = None
    point: str | None = None


_DECODER = msgspec.json.Decoder(TrialRecord)
_LABELS_DECODER = msgspec.json.Decoder(RunLabels)
_ENCODER = msgspec.json.Encoder()
_FIELD_IN_MESSAGE = re.compile(r" - at `\$\.?([^`]*)`$")


@dataclass
class TrialsSummary:
    """What a trials file said about itself besides its trials."""

    records: int = 0
    runs: set[str] = field(default_factory=set)
    suite: str | None = None
    point: str | None = None


def decision_of(record: TrialRecord) -> Decision | None:
    """The decision key a record carries, or a ValueError naming the field that is wrong."""
    if record.outcome == "decision":
        if record.verdict is not None:
            return record.verdict
        if record.tools is not None:
            return tuple(record.tools)
        raise ValueError("verdict: outcome `decision` needs a `verdict` or `tools`")
    if record.outcome == "no_decision":
        return NoDecision(record.reason or "unspecified")
    return None


def read_trials(
    path: str | Path, evidence: Evidence | None = None
) -> tuple[Evidence, TrialsSummary]:
    """Stream a trials file into evidence; memory grows with cases, not lines."""
    evidence = evidence if evidence is not None else Evidence()
    summary = TrialsSummary()
    try:
        with open(path, "rb") as stream:
            summary.suite, summary.point = _labels(stream.readline())
            stream.seek(0)
            for line_number, records in _record_batches(stream, str(path)):
                _add_batch(records, line_number, evidence, summary, str(path))
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=str(path)) from None
    return evidence, summary


def _labels(first_line: bytes) -> tuple[str | None, str | None]:
    """Suite and point of the first record; errors are left to the full decode."""
    try:
        labels = _LABELS_DECODER.decode(first_line)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None, None
    return labels.suite, labels.point


def _record_batches(stream: IO[bytes], path: str) -> Iterator[tuple[int, list[TrialRecord]]]:
    """Yield (first line number, records) per chunk of whole lines.

    A chunk is decoded in one call; one with an error or blank lines is decoded again line by
    line, so that each record's position is its line number.
    """
    first_line = 1
    carry = b""
    while True:
        block = stream.read(CHUNK_BYTES)
        data = carry + block
        if not block:
            if data.strip():
                yield first_line, _decode_each(data, first_line, path)
            return
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            carry = data
            continue
        chunk, carry = data[:cut], data[cut:]
        lines = chunk.count(b"\n")
        try:
            records = _DECODER.decode_lines(chunk)
        except (msgspec.ValidationError, msgspec.DecodeError):
            records = None
        if records is None or len(records) != lines:  # an error, or blank lines to keep count of
            records = _decode_each(chunk, first_line, path)
        yield first_line, records
        first_line += lines


def _decode_each(chunk: bytes, first_line: int, path: str) -> list[TrialRecord | None]:
    """Decode line by line, keeping None for blank lines so positions match line numbers."""
    records: list[TrialRecord | None] = []
    for offset, line in enumerate(chunk.split(b"\n")):
        if not line.strip():
            records.append(None)
            continue
        try:
            records.append(_DECODER.decode(line))
        except msgspec.ValidationError as error:
            message = str(error)
            match = _FIELD_IN_MESSAGE.search(message)
            raise InputError(
                _FIELD_IN_MESSAGE.sub("", message) if match else message,
                path=path,
                line=first_line + offset,
                field=(match.group(1) or None) if match else None,
            ) from None
        except msgspec.DecodeError as error:
            raise InputError(
                f"invalid JSON ({error})", path=path, line=first_line + offset
            ) from None
    return records


def _add_batch(
    records: list, first_line: int, evidence: Evidence, summary: TrialsSummary, path: str
) -> None:
    """Add decoded records, one call per run of consecutive records of the same case."""
    runs = summary.runs
    group: list[tuple[int, Decision | None, str | None, bool | None, float | None]] = []
    group_start = 0
    current = None  # (run, case, expected) of the group being built
    for offset, record in enumerate(records):
        if record is None:
            continue
        decision = record.verdict
        try:
            if decision is None or record.outcome != "decision":
                decision = decision_of(record)
        except ValueError as error:
            field_name, _, problem = str(error).partition(": ")
            raise InputError(
                problem, path=path, line=first_line + offset, field=field_name
            ) from None
        identity = (record.run or DEFAULT_RUN, record.case)
        if current is None or identity != current[:2]:
            if group:
                _flush(evidence, current, group, records, group_start, first_line, path)
            current = (*identity, record.expected)
            runs.add(identity[0])
            group = []
            group_start = offset
        elif current[2] is None and record.expected is not None:
            current = (*identity, record.expected)  # the first expected route given counts
        if record.invariants_failed or record.invariants_warned or record.evaluation_skipped:
            # rare: recorded one by one
            if group:
                _flush(evidence, current, group, records, group_start, first_line, path)
                group = []
            _record_one(evidence, identity, record, decision, path, first_line + offset)
            group_start = offset + 1
            continue
        group.append((record.trial, decision, record.error_type, record.passed, record.latency_ms))
    if group:
        _flush(evidence, current, group, records, group_start, first_line, path)
    summary.records += len(records) - records.count(None)


def _record_one(
    evidence: Evidence,
    identity: tuple,
    record: TrialRecord,
    decision: Decision | None,
    path: str,
    line: int,
) -> None:
    """Record one trial and what the tiers found on it."""
    run, case = identity
    try:
        new = evidence.record(
            run, case, record.trial, decision, record.expected, record.error_type, record.passed,
            record.latency_ms,
        )  # fmt: skip
    except TrialIndexError as error:
        raise InputError(str(error), path=path, line=line, field="trial") from None
    if new:
        evidence.note_tiers(
            run,
            case,
            record.trial,
            tuple(record.invariants_failed or ()),
            tuple(record.invariants_warned or ()),
            bool(record.evaluation_skipped),
        )


def _flush(
    evidence: Evidence,
    identity: tuple,
    group: list,
    records: list,
    group_start: int,
    first_line: int,
    path: str,
) -> None:
    """Record one group; a bad trial index is reported at its own line."""
    run, case, expected = identity
    try:
        evidence.record_case(run, case, group, expected)
    except TrialIndexError as error:
        offset = next(
            n
            for n in range(group_start, len(records))
            if records[n] is not None and not 0 <= records[n].trial <= MAX_TRIAL_INDEX
        )
        raise InputError(str(error), path=path, line=first_line + offset, field="trial") from None


def trial_fields(trial: Trial, suite: str | None = None, point: str | None = None) -> dict:
    """The trials-file fields of one trial (absent fields left out)."""
    decision = trial.decision
    fields = {
        "run": trial.run,
        "suite": suite,
        "point": point,
        "case": trial.case,
        "trial": trial.index,
        "outcome": trial.outcome.value,
        "verdict": decision if isinstance(decision, str) else None,
        "tools": list(decision) if isinstance(decision, tuple) else None,
        "reason": decision.reason if isinstance(decision, NoDecision) else None,
        "error_type": trial.error_type if trial.outcome is Outcome.ERROR else None,
        "expected": trial.expected,
        "passed": trial.passed,
        "invariants_failed": list(trial.invariants_failed) or None,
        "invariants_warned": list(trial.invariants_warned) or None,
        "latency_ms": trial.latency_ms,
        "evaluation_skipped": trial.evaluation_skipped or None,
    }
    return {name: value for name, value in fields.items() if value is not None}


class TrialWriter:
    """Writes trials as JSON Lines as they arrive (a runner sink)."""

    def __init__(self, stream: IO[bytes], suite: str | None = None, point: str | None = None):
        self.stream, self.suite, self.point = stream, suite, point
        self.written = 0

    def add(self, trial: Trial) -> None:
        """Append one trial record."""
        self.stream.write(_ENCODER.encode(trial_fields(trial, self.suite, self.point)) + b"\n")
        self.written += 1
