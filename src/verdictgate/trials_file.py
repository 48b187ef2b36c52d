"""Trial records (`verdictgate.trials/v1`, JSON Lines): streamed in, written out."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import msgspec

from .errors import InputError, InvalidDecision, TrialIndexError
from .evidence import MAX_TRIAL_INDEX, Evidence
from .fingerprints import checked_key_id
from .trial_model import (
    MAX_LABEL,
    Decision,
    Isolation,
    NoDecision,
    Outcome,
    Trial,
    aliases_of,
    decision_from_value,
    no_decision,
    tied_steps_of,
)
from .wire_types import JsonObject

CHUNK_BYTES = 1 << 20
"""Bytes read and decoded at a time: a few thousand records, so memory stays flat."""
MAX_LINE_BYTES = 16 << 20
"""The longest line read: a record at every limit (256 tools of 4,096 characters, each written
as a twelve-byte JSON escape pair) is under it, so a longer line is refused as soon as this
much of it has been read, never held whole."""


class TrialLine(Trial, frozen=True, gc=False, kw_only=True):
    """A trials-file line, decoded straight into the trial record it is (no second object):
    the file's `trial` is the record's `index`, its `verdict` the `decision` of most lines;
    `outcome`, `tools` and `reason` set the decision of the others (`_settled`). Unknown
    fields are skipped unparsed; `gc=False`, since records cannot form cycles."""

    index: int = msgspec.field(name="trial")
    decision: str | None = msgspec.field(default=None, name="verdict")
    # (a file's verdict is a label, a string; a tool path is `tools`, a no-decision `reason`)
    outcome: Outcome  # decoded by value: the same type as the `Trial.outcome` it shadows
    tools: list[str] | None = None
    agents: list[str] | None = None
    nodes: list[str] | None = None
    reason: str | None = None


PATH_FIELDS = ("tools", "agents", "nodes")
"""The fields a path decision is written under: its rule's (`toolset` paths are `tools`)."""


def path_field(rule: str | None) -> str:
    """The field a path decided by `rule` goes under in a trials file."""
    return rule if rule in PATH_FIELDS else "tools"


class RunLabels(msgspec.Struct):
    """Suite and decision point, read from a file's first record."""

    suite: str | None = None
    point: str | None = None


_DECODER: msgspec.json.Decoder[TrialLine] = msgspec.json.Decoder(TrialLine)
_LABELS_DECODER: msgspec.json.Decoder[RunLabels] = msgspec.json.Decoder(RunLabels)
_ENCODER = msgspec.json.Encoder()
_FIELD_IN_MESSAGE = re.compile(r" - at `\$\.?([^`]*)`$")


@dataclass
class TrialsSummary:
    """What a trials file said about itself besides its trials."""

    records: int = 0
    runs: set[str] = field(default_factory=set)
    suite: str | None = None
    point: str | None = None


def _settled(line: TrialLine) -> Trial:
    """The trial a line holds when its verdict is not simply its decision: the decision its
    tools, outcome or reason give, as a plain Trial. A ValueError `field: problem` names what is
    wrong."""
    outcome, decision = line.outcome, line.decision
    if outcome is Outcome.DECISION:
        paths = [
            (name, value) for name in PATH_FIELDS if (value := getattr(line, name)) is not None
        ]
        if len(paths) > 1:
            raise ValueError(
                f"{paths[1][0]}: a decision has one path: give one of tools, agents or nodes"
            )
        given = [("verdict", decision)] if decision is not None else paths
        field_name, value = given[0] if given else ("tools", None)
        if value is None:
            raise ValueError("verdict: outcome `decision` needs a `verdict` or `tools`")
        try:
            return _as_trial(line, decision_from_value(value))
        except InvalidDecision as error:
            raise ValueError(f"{field_name}: {error}") from None
    if outcome is Outcome.NO_DECISION:
        try:
            reason = no_decision(line.reason or "unspecified")
        except InvalidDecision as error:
            raise ValueError(f"reason: {error}") from None
        return _as_trial(line, reason)
    return _as_trial(line, None)


def _as_trial(line: TrialLine, decision: Decision | None) -> Trial:
    try:
        tied = tied_steps_of(line.tied_steps, decision) if line.tied_steps else ()
    except ValueError as error:
        raise ValueError(f"tied_steps: {error}") from None
    try:
        aliases = aliases_of(line.aliases, line.case) if line.aliases else ()
    except ValueError as error:
        raise ValueError(f"aliases: {error}") from None
    try:
        key_id = None if line.key_id is None else checked_key_id(line.key_id)
    except ValueError as error:
        raise ValueError(f"key_id: {error}") from None
    return Trial(
        line.case,
        line.index,
        decision,
        line.run,
        line.expected,
        line.error_type,
        passed=line.passed,
        invariants_failed=line.invariants_failed,
        invariants_warned=line.invariants_warned,
        latency_ms=line.latency_ms,
        evaluation_skipped=line.evaluation_skipped,
        isolation=line.isolation,
        tied_steps=tied,
        aliases=aliases,
        key_id=key_id,
    )


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
        summary.runs = {run for run, _ in evidence.cases}
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=str(path)) from None
    except InputError as error:
        if error.line == 1:
            _refuse_a_document(Path(path))
        raise
    if not summary.records:
        raise InputError("holds no trial records (one JSON object a line)", path=str(path))
    return evidence, summary


def _refuse_a_document(path: Path) -> None:
    """A JSON document given where trial records belong (a suite, a snapshot, an export) is
    named as what it is, not as bad JSON on line 1."""
    if path.stat().st_size > 64 << 20:
        return
    try:
        document = msgspec.json.decode(path.read_bytes())
    except msgspec.DecodeError:
        return
    if not isinstance(document, dict) or {"case", "trial"} <= document.keys():
        return  # a one-line trials file: its own error stands
    schema = document.get("schema")
    if isinstance(schema, str) and schema.endswith("suite/v1"):
        raise InputError(
            "is a suite file, not trial records (pass it as {suite})",
            path=str(path),
            arguments=("suite",),
        )
    kind = f"a {schema} document" if isinstance(schema, str) else "one JSON document"
    raise InputError(f"is {kind}, not trial records (one JSON object a line)", path=str(path))


def _labels(first_line: bytes) -> tuple[str | None, str | None]:
    """Suite and point of the first record; errors are left to the full decode."""
    try:
        labels = _LABELS_DECODER.decode(first_line)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None, None
    return labels.suite, labels.point


def _record_batches(
    stream: IO[bytes], path: str
) -> Iterator[tuple[int, Sequence[TrialLine | None]]]:
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
        chunk, carry = data[:cut], data[cut:]
        lines = chunk.count(b"\n")
        if len(carry) > MAX_LINE_BYTES:
            raise InputError(
                f"the line is longer than {MAX_LINE_BYTES >> 20} MiB, which no record can be "
                "(labels hold 4,096 characters, paths 256 steps)",
                path=path,
                line=first_line + lines,
            )
        if cut == 0:
            continue
        decoded: list[TrialLine] | None
        try:
            decoded = _DECODER.decode_lines(chunk)
        except (msgspec.ValidationError, msgspec.DecodeError):
            decoded = None
        if decoded is None or len(decoded) != lines:  # an error, or blank lines to keep count of
            yield first_line, _decode_each(chunk, first_line, path)
        else:
            yield first_line, decoded
        first_line += lines


def _decode_each(chunk: bytes, first_line: int, path: str) -> list[TrialLine | None]:
    """Decode line by line, keeping None for blank lines so positions match line numbers."""
    records: list[TrialLine | None] = []
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
    records: Sequence[TrialLine | None],
    first_line: int,
    evidence: Evidence,
    summary: TrialsSummary,
    path: str,
) -> None:
    """Add a chunk's records; an error names the line and field it comes from."""
    trials: list[Trial] = []
    decision_outcome = Outcome.DECISION
    for offset, record in enumerate(records):
        if record is None:
            continue
        decision = record.decision
        if (
            record.outcome is decision_outcome
            and type(decision) is str
            and decision.strip()
            and len(decision) <= MAX_LABEL
            and "\x00" not in decision
            and not record.tied_steps
            and not record.aliases
            and record.key_id is None
        ):
            trials.append(record)  # most lines: the record is the trial
            continue
        try:
            trials.append(_settled(record))
        except ValueError as error:
            field_name, _, problem = str(error).partition(": ")
            raise InputError(
                problem, path=path, line=first_line + offset, field=field_name
            ) from None
    try:
        evidence.add_all(trials)
    except TrialIndexError as error:
        offset = next(
            n
            for n, record in enumerate(records)
            if record is not None and not 0 <= record.index <= MAX_TRIAL_INDEX
        )
        raise InputError(str(error), path=path, line=first_line + offset, field="trial") from None
    summary.records += len(trials)


def trial_fields(
    trial: Trial, suite: str | None = None, point: str | None = None, path_key: str = "tools"
) -> JsonObject:
    """The trials-file fields of one trial (absent fields left out); a path decision goes under
    `path_key` (`tools`, `agents` or `nodes`, as its rule)."""
    decision = trial.decision
    fields = {
        "run": trial.run,
        "suite": suite,
        "point": point,
        "case": trial.case,
        "trial": trial.index,
        "outcome": trial.outcome.value,
        "verdict": decision if isinstance(decision, str) else None,
        path_key: list(decision) if isinstance(decision, tuple) else None,
        "reason": decision.reason if isinstance(decision, NoDecision) else None,
        "error_type": trial.error_type if trial.outcome is Outcome.ERROR else None,
        "expected": trial.expected,
        "passed": trial.passed,
        "invariants_failed": list(trial.invariants_failed) or None,
        "invariants_warned": list(trial.invariants_warned) or None,
        "latency_ms": trial.latency_ms,
        "evaluation_skipped": trial.evaluation_skipped or None,
        "isolation": trial.isolation.value if trial.isolation is not None else None,
        "tied_steps": [list(pair) for pair in trial.tied_steps] or None,
        "aliases": list(trial.aliases) or None,
        "key_id": trial.key_id,
    }
    return {name: value for name, value in fields.items() if value is not None}


class TrialWriter:
    """Writes trials as JSON Lines as they arrive (a runner sink). `isolation` is written on
    records that do not carry their own (the runner knows how it isolated reruns)."""

    def __init__(
        self,
        stream: IO[bytes],
        suite: str | None = None,
        point: str | None = None,
        isolation: Isolation | None = None,
        path_key: str = "tools",
    ):
        self.stream, self.suite, self.point, self.path_key = stream, suite, point, path_key
        self.isolation = None if isolation is Isolation.UNKNOWN else isolation
        self.written = 0

    def add(self, trial: Trial) -> None:
        """Append one trial record."""
        if trial.isolation is None and self.isolation is not None:
            trial = msgspec.structs.replace(trial, isolation=self.isolation)
        fields = trial_fields(trial, self.suite, self.point, self.path_key)
        self.stream.write(_ENCODER.encode(fields) + b"\n")
        self.written += 1
