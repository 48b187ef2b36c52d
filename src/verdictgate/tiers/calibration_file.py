"""Files of `verdictgate calibrate`: known-good outputs in, the threshold stored in the suite."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..errors import InputError
from ..suite import Calibration, Suite
from ..suite_file import SUITE_SCHEMA, read_json
from ..wire_types import JsonObject


def read_known_good(path: str, suite: Suite) -> list[tuple[str, str]]:
    """(reference, output) pairs from JSON Lines `{"case": ID or "input": TEXT, "output": TEXT}`;
    each case must be in the suite and have a reference."""
    by_input = {case.input: case for case in suite.cases if case.input is not None}
    by_id = {case.id: case for case in suite.cases}
    pairs = []
    try:
        stream = open(path, encoding="utf-8")  # noqa: SIM115 - closed by the with below
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=path) from None
    with stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            record = _record(line, path, number)
            case = None
            if (case_id := _text(record, "case")) is not None:
                case = by_id.get(case_id)
            if case is None and (text := _text(record, "input")) is not None:
                case = by_input.get(text)
            if case is None:
                raise InputError(
                    "matches no suite case (give its `case` id or its `input`)",
                    path=path,
                    line=number,
                    field="case",
                )
            if case.reference is None:
                raise InputError(
                    f"case {case.id} has no `reference` in the suite", path=path, line=number
                )
            pairs.append((case.reference, record["output"]))
    return pairs


def _text(record: JsonObject, name: str) -> str | None:
    value = record.get(name)
    return value if isinstance(value, str) else None


def _record(line: str, path: str, number: int) -> JsonObject:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(f"invalid JSON: {error.msg}", path=path, line=number) from None
    if not isinstance(record, dict):
        raise InputError("must be a JSON object", path=path, line=number)
    if not isinstance(record.get("output"), str) or not record["output"].strip():
        raise InputError("must be a non-empty string", path=path, line=number, field="output")
    return record


def store_calibration(suite_path: str, calibration: Calibration, output: str | None = None) -> str:
    """Write the suite document with its `semantic` threshold to `output` (default: the suite
    file itself, replaced atomically); returns the path written."""
    document = read_json(suite_path)
    if not isinstance(document, dict) or document.get("schema") != SUITE_SCHEMA:
        raise InputError(
            f"a threshold is stored only in a {SUITE_SCHEMA} file",
            path=suite_path,
            field="schema",
        )
    document["semantic"] = calibration.document()
    target = Path(output or suite_path)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        os.replace(temporary, target)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise InputError(f"cannot write suite ({error.strerror})", path=str(target)) from None
    return str(target)
