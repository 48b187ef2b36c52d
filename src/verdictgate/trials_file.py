"""Trial records (`verdictgate.trials/v1`, JSON Lines): streamed in, written out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

import msgspec

from .errors import InputError
from .evidence import Evidence, TrialIndexError
from .trial import Decision, NoDecision, Outcome, Trial

CHUNK_BYTES = 1 << 22
DEFAULT_RUN = "run"


class TrialRecord(msgspec.Struct, omit_defaults=True):
    """One line of a trials file; unknown fields are ignored for forward compatibility."""

    case: str
    trial: int
    outcome: Literal["decision", "no_decision", "error"]
    run: str | None = None
    suite: str | None = None
    point: str | None = None
    verdict: str | None = None
    tools: list[str] | None = None
    reason: str | None = None
    error_type: str | None = None
    expected: str | None = None
    invariants_failed: list[str] | None = None
    invariants_warned: list[str] | None = None
    passed: bool | None = None
    latency_ms: float | None = None


_DECODER = msgspec.json.Decoder(TrialRecord)
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
            for line_number, records in _record_batches(stream, str(path)):
                _add_batch(records, line_number, evidence, summary, str(path))
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=str(path)) from None
    return evidence, summary


def _record_batches(stream: IO[bytes], path: str) -> Iterator[tuple[int, list[TrialRecord]]]:
    """Yield (first line number, records) per chunk; a chunk with blank lines is decoded per line."""
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
        if b"\n\n" in chunk or chunk.startswith(b"\n") or b"\n\r\n" in chunk:
            yield first_line, _decode_each(chunk, first_line, path)
        else:
            try:
                records = _DECODER.decode_lines(chunk)
            except (msgspec.ValidationError, msgspec.DecodeError):
                records = None
            if records is None or len(records) != lines:
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
    record_trial = evidence.record
    runs = summary.runs
    for offset, record in enumerate(records):
        if record is None:
            continue
        run = record.run or DEFAULT_RUN
        if run not in runs:
            runs.add(run)
            summary.suite = summary.suite or record.suite
            summary.point = summary.point or record.point
        try:
            decision = decision_of(record)
            record_trial(
                run, record.case, record.trial, decision, record.expected, record.error_type
            )
        except TrialIndexError as error:
            raise InputError(
                str(error), path=path, line=first_line + offset, field="trial"
            ) from None
        except ValueError as error:
            field_name, _, problem = str(error).partition(": ")
            raise InputError(
                problem, path=path, line=first_line + offset, field=field_name
            ) from None
    summary.records += sum(1 for record in records if record is not None)


def trial_record(trial: Trial, suite: str | None = None, point: str | None = None) -> TrialRecord:
    """The trials-file record of one trial."""
    decision = trial.decision
    return TrialRecord(
        case=trial.case,
        trial=trial.index,
        outcome=trial.outcome.value,
        run=trial.run,
        suite=suite,
        point=point,
        verdict=decision if isinstance(decision, str) else None,
        tools=list(decision) if isinstance(decision, tuple) else None,
        reason=decision.reason if isinstance(decision, NoDecision) else None,
        error_type=trial.error_type if trial.outcome is Outcome.ERROR else None,
        expected=trial.expected,
    )


class TrialWriter:
    """Writes trials as JSON Lines as they arrive (a runner sink)."""

    def __init__(self, stream: IO[bytes], suite: str | None = None, point: str | None = None):
        self.stream, self.suite, self.point = stream, suite, point
        self.written = 0

    def add(self, trial: Trial) -> None:
        """Append one trial record."""
        self.stream.write(_ENCODER.encode(trial_record(trial, self.suite, self.point)) + b"\n")
        self.written += 1
