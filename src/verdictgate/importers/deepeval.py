"""DeepEval: saved test runs (`deepeval test run -r N`, camelCase `testCases`; 4.x's latest run
under `testRunData`) and LLMTestCase objects, grouped by input; the trial order is the `[i-N]`
repeat suffix of the test name, else `order`, else file order."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol, TypeVar

from ..errors import InputError
from ..evidence import Evidence
from ..fingerprints import fingerprint_key, input_names
from ..suite import Case, Suite
from ..suite_file import read_json
from ..trial_model import Decision, Trial
from ..wire_types import JsonObject
from . import Imported, ImportOptions, decision_at

RUN_ID = "deepeval"
_DATA = "testRunData"
"""Where DeepEval 4.x's `.latest_test_run.json` holds the run."""
_LINK = "testRunLink"
"""What that file holds instead when DeepEval is logged in to Confident AI."""
_REPEAT = re.compile(r"\[(\d+)-(\d+)\]$")


class DeepEvalCase(Protocol):
    """A DeepEval LLMTestCase, duck-typed: its `input`; `actual_output`, `expected_output`,
    `tools_called`, `name` and `success` are read when it has them."""

    @property
    def input(self) -> str: ...


_Case = TypeVar("_Case", bound=DeepEvalCase)


def _tools(called: object, source: str, field: str) -> Decision | None:
    if not isinstance(called, list):
        return None
    names = [
        tool.get("name") if isinstance(tool, dict) else getattr(tool, "name", tool)
        for tool in called
    ]
    return decision_at(names, None, source=source, field=field)


def _order(name: str | None, order: object, position: int) -> tuple[int, int]:
    match = _REPEAT.search(name or "")
    if match:
        return (0, int(match.group(1)))
    return (1, order) if isinstance(order, int) else (2, position)


def _build(
    rows: list[JsonObject],
    decision: str,
    decision_path: str | None,
    key: bytes | None,
    source: str,
    field: str,
) -> Imported:
    """The trials of `rows` (each named `field[N]` of `source` in errors)."""
    groups: dict[str, list[tuple[tuple[int, int], str, JsonObject]]] = {}
    for position, row in enumerate(rows):
        order = _order(row.get("name"), row.get("order"), position)
        groups.setdefault(row["input"], []).append((order, f"{field}[{position}]", row))
    evidence = Evidence()
    cases = []
    for text, members in groups.items():
        case_id, _, key_id = input_names(text, key)
        members.sort(key=lambda item: item[0])
        _, first, row = members[0]
        expected = decision_at(
            row.get("expectedOutput"),
            decision_path,
            source=source,
            field=f"{first}.expectedOutput",
        )
        expected_text = expected if isinstance(expected, str) else None
        trials = []
        for index, (_, name, row) in enumerate(members):
            got = (
                _tools(row.get("toolsCalled"), source, f"{name}.toolsCalled")
                if decision == "tools"
                else decision_at(
                    row.get("actualOutput"),
                    decision_path,
                    source=source,
                    field=f"{name}.actualOutput",
                )
            )
            success = row.get("success")
            passed = success if isinstance(success, bool) else None
            error_type = None if got is not None else "decision_path"
            trials.append(
                Trial(
                    case_id,
                    index,
                    got,
                    RUN_ID,
                    expected_text,
                    error_type,
                    passed=passed,
                    key_id=key_id,
                )
            )
        evidence.add_all(trials)
        cases.append(Case(case_id, None, expected_text))
    return Imported(evidence, tuple(cases), RUN_ID)


def read(path: Path, options: ImportOptions, suite: Suite | None, key: bytes | None) -> Imported:
    """Read a saved test run: a test run itself (`.deepeval/.latest_run_full.json`, a results
    folder's file, DeepEval 3.x's `.latest_test_run.json`) or DeepEval 4.x's
    `.latest_test_run.json`, which holds it under `testRunData` (or, logged in to Confident
    AI, only a link to it: refused in one line that names the file to read instead)."""
    document = read_json(path)
    if isinstance(document, dict) and isinstance(document.get(_DATA), dict):
        document = document[_DATA]
    elif isinstance(document, dict) and _LINK in document and "testCases" not in document:
        raise InputError(
            "holds only a link to the run on Confident AI (DeepEval, logged in, keeps it"
            " there): read .deepeval/.latest_run_full.json beside it, or the file DeepEval"
            " writes to DEEPEVAL_RESULTS_FOLDER",
            path=str(path),
            field=_LINK,
        )
    test_cases = document.get("testCases") if isinstance(document, dict) else None
    if not isinstance(test_cases, list):
        raise InputError("not a DeepEval test run", path=str(path), field="testCases")
    for number, row in enumerate(test_cases):
        if not isinstance(row, dict) or not isinstance(row.get("input"), str):
            raise InputError(
                "needs an `input` string", path=str(path), field=f"testCases[{number}]"
            )
    return _build(
        test_cases, options.decision_kind, options.decision_path, key, str(path), "testCases"
    )


def evidence_from_deepeval(
    test_cases: Iterable[_Case] | str | Path,
    decision: str | Callable[[_Case], object] = "output",
    *,
    decision_path: str | None = None,
    key: str | bytes | None = None,
) -> Imported:
    """Trials from DeepEval LLMTestCase objects (duck-typed: `input`, `actual_output`,
    `expected_output`, `tools_called`, `name`), or from the path of a saved test run (`deepeval
    test run`); `decision` is "output", "tools", or (for objects) a callable;
    `decision_path` reads the decision from JSON outputs."""
    if isinstance(test_cases, (str, Path)):
        if callable(decision):
            raise InputError(
                'a saved test run is read by "output" or "tools"', arguments=("decision",)
            )
        options = ImportOptions(decision_kind=decision, decision_path=decision_path)
        return read(Path(test_cases), options, None, fingerprint_key(key))
    objects: Iterable[_Case] = test_cases
    rows = []
    for case in objects:
        actual = decision(case) if callable(decision) else getattr(case, "actual_output", None)
        rows.append(
            {
                "input": case.input,
                "name": getattr(case, "name", None),
                "actualOutput": actual,
                "expectedOutput": getattr(case, "expected_output", None),
                "toolsCalled": getattr(case, "tools_called", None),
                "success": getattr(case, "success", None),
            }
        )
    kind = "tools" if decision == "tools" else "output"
    return _build(rows, kind, decision_path, fingerprint_key(key), "test_cases", "test_cases")
