"""promptfoo exports (`promptfoo eval -o results.json`, version 3, or JSON Lines) as trials.

Rows are grouped by provider, prompt and test (the test's vars), never by `testIdx`, which
promptfoo gives every repeat of its own; within a test, rows are ordered by `testIdx`, or by
the `repeatIndex` of a traced run. A row with `failureReason` 2 or no `response` is an error
trial; an assertion failure (`failureReason` 1) still carries its decision.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from ..errors import InputError
from ..evidence import Evidence
from ..fingerprints import fingerprint
from ..suite import Case, Suite
from ..trial_model import Decision
from . import Imported, ImportOptions, pick

PROVIDER_ERROR = 2
"""promptfoo's failureReason for a provider error (1 is a failed assertion)."""


class _Provider(msgspec.Struct):
    id: str | None = None
    label: str | None = None


class _Prompt(msgspec.Struct):
    raw: str | None = None


class _Response(msgspec.Struct):
    output: Any = None


class Row(msgspec.Struct):
    """The fields of one promptfoo result row that verdictgate reads; the rest are skipped."""

    testIdx: int = 0
    promptId: str | None = None
    provider: _Provider | str | None = None
    prompt: _Prompt | None = None
    vars: dict[str, Any] | None = None
    response: _Response | None = None
    failureReason: int | None = None
    traceId: str | None = None

    def provider_id(self) -> str:
        if isinstance(self.provider, str):
            return self.provider
        return (self.provider.id or self.provider.label or "") if self.provider else ""

    def provider_names(self) -> set[str]:
        if isinstance(self.provider, _Provider):
            return {name for name in (self.provider.id, self.provider.label) if name}
        return {self.provider} if self.provider else set()


class _TraceMetadata(msgspec.Struct):
    repeatIndex: int | None = None


class _Trace(msgspec.Struct):
    traceId: str | None = None
    metadata: _TraceMetadata | None = None


class _Results(msgspec.Struct):
    version: int | None = None
    results: list[Row] = msgspec.field(default_factory=list)


class _Export(msgspec.Struct):
    evalId: str | None = None
    results: _Results | None = None
    traces: list[_Trace] | None = None


def _rows(path: Path) -> tuple[str, list[Row], dict[str, int]]:
    """(eval id, rows, traceId -> repeatIndex) from a JSON export or a JSON Lines file."""
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=source) from None
    if data.lstrip().startswith(b"{") and b"\n{" not in data.strip():
        try:
            export = msgspec.json.decode(data, type=_Export)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            raise InputError(f"not a promptfoo export: {error}", path=source) from None
        if export.results is None:
            raise InputError("not a promptfoo export: no `results`", path=source, field="results")
        repeats = {
            trace.traceId: trace.metadata.repeatIndex
            for trace in export.traces or ()
            if trace.traceId and trace.metadata and trace.metadata.repeatIndex is not None
        }
        return export.evalId or path.stem, export.results.results, repeats
    rows = []
    decoder = msgspec.json.Decoder(Row)
    for number, line in enumerate(data.splitlines(), 1):
        if line.strip():
            try:
                rows.append(decoder.decode(line))
            except (msgspec.ValidationError, msgspec.DecodeError) as error:
                raise InputError(
                    f"not a promptfoo result row: {error}", path=source, line=number
                ) from None
    return path.stem, rows, {}


def decision_from_output(output: Any, decision_path: str | None) -> Decision | None:
    """A row's decision: the output string, or what `decision_path` names in its JSON; None
    when the path cannot read it."""
    if decision_path is None:
        return output if isinstance(output, str) and output else None
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except json.JSONDecodeError:
            return None
    value = pick(output, decision_path)
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return tuple(value)
    return None


def _only_one(values: set[str], option: str, what: str, source: str) -> None:
    if len(values) > 1:
        raise InputError(
            f"the export mixes {len(values)} {what} ({', '.join(sorted(values))}); choose one with {option}",
            path=source,
            field=option,
        )


def read(path: Path, options: ImportOptions, suite: Suite | None, key: bytes | None) -> Imported:
    """Read an export into trials, refusing a mix of providers or prompts and rows that match
    no suite case."""
    path = Path(path)
    source = str(path)
    eval_id, rows, repeats = _rows(path)
    if options.provider is not None:
        rows = [row for row in rows if options.provider in row.provider_names()]
        if not rows:
            raise InputError(
                f"no row comes from provider {options.provider!r}", path=source, field="--provider"
            )
    _only_one({row.provider_id() for row in rows}, "--provider", "providers", source)
    if options.prompt_id is not None:
        rows = [row for row in rows if row.promptId == options.prompt_id]
        if not rows:
            raise InputError(
                f"no row has promptId {options.prompt_id!r}", path=source, field="--prompt-id"
            )
    _only_one({row.promptId or "" for row in rows}, "--prompt-id", "prompts", source)

    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(_input_text(row, options), []).append(row)
    by_input = {case.input: case for case in suite.cases if case.input} if suite else {}
    if suite is not None:
        unmatched = [text for text in groups if text not in by_input]
        if unmatched:
            count = sum(len(groups[text]) for text in unmatched)
            raise InputError(
                f"{count} rows match no suite case by input (--case-by {options.case_by})",
                path=source,
                field="--suite",
            )
    evidence = Evidence()
    cases = []
    for text, members in groups.items():
        case = by_input.get(text) or Case(
            fingerprint(text, key), None, _expected(members[0], options)
        )
        indexed = [repeats.get(row.traceId) for row in members] if repeats else []
        if indexed and all(index is not None for index in indexed):
            ordered = sorted(zip(indexed, members, strict=True), key=lambda pair: pair[0])
        else:
            ordered = list(enumerate(sorted(members, key=lambda row: row.testIdx)))
        evidence.record_case(eval_id, case.id, list(_trials(ordered, options)), case.expected)
        cases.append(Case(case.id, None, case.expected))
    return Imported(evidence, tuple(cases), eval_id)


def _input_text(row: Row, options: ImportOptions) -> str:
    variables = row.vars or {}
    if options.case_by == "prompt":
        return (row.prompt.raw if row.prompt else None) or ""
    if options.input_var is not None:
        return str(variables.get(options.input_var, ""))
    return json.dumps(
        {k: v for k, v in variables.items() if k != options.expected_var}, sort_keys=True
    )


def _expected(row: Row, options: ImportOptions) -> str | None:
    if options.expected_var is None:
        return None
    value = (row.vars or {}).get(options.expected_var)
    return value if isinstance(value, str) else None


def _trials(
    ordered: list[tuple[int, Row]], options: ImportOptions
) -> Iterator[tuple[int, Decision | None, str | None]]:
    for index, row in ordered:
        if row.failureReason == PROVIDER_ERROR or row.response is None:
            yield index, None, "provider_error"
            continue
        decision = decision_from_output(row.response.output, options.decision_path)
        yield index, decision, None if decision is not None else "decision_path"
