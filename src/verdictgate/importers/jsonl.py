"""JSON Lines from any harness: dotted paths name the case, decision, trial, route and run."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError, TrialIndexError
from ..evidence import Evidence
from ..fingerprints import input_names
from ..suite import Case, Suite
from ..trial_model import Trial, bounded_label
from . import Imported, ImportOptions, decision_at, located, pick

RUN_ID = "jsonl"


def read(path: Path, options: ImportOptions, suite: Suite | None, key: bytes | None) -> Imported:
    """One trial a line; without --trial-path, a case's trials are numbered in file order. A
    decision the path cannot read is an error trial (`decision_path`)."""
    if options.case_path is None or options.decision_path is None:
        raise InputError(
            "{jsonl} needs {case_path} and {decision_path}",
            arguments=("jsonl", "case_path", "decision_path"),
        )
    source = str(path)
    known = {case.id for case in suite.cases} if suite else set()
    by_input = {case.input: case.id for case in suite.cases if case.input} if suite else {}
    evidence = Evidence()
    counters: dict[tuple[str, str], int] = {}
    expected: dict[str, str | None] = {}
    try:
        stream = path.open("rb")
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=source) from None
    with stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise InputError(f"invalid JSON ({error})", path=source, line=number) from None
            raw_case = pick(row, options.case_path)
            if not isinstance(raw_case, (str, int)) or raw_case == "":
                raise InputError(
                    "no case at this path", path=source, line=number, field=options.case_path
                )
            text = str(raw_case)
            with located(source, options.case_path, number):
                case, aliases, key_id = (
                    (text, (), None)
                    if text in known
                    else input_names(text, key, by_input.get(text))
                )
            run = str(pick(row, options.run_path) or RUN_ID) if options.run_path else RUN_ID
            labelled = (run, options.run_path)
            if options.trial_path is not None:
                index = pick(row, options.trial_path)
                if not isinstance(index, int) or isinstance(index, bool):
                    raise InputError(
                        "not an integer", path=source, line=number, field=options.trial_path
                    )
            else:
                index = counters.get((run, case), 0)
                counters[(run, case)] = index + 1
            route = pick(row, options.expected_path) if options.expected_path else None
            route = route if isinstance(route, str) else None
            for label, field in (labelled, (route, options.expected_path)):
                if label is not None:
                    with located(source, field, number):
                        bounded_label(label, "a label")
            decision = decision_at(
                pick(row, options.decision_path),
                None,
                source=source,
                line=number,
                field=options.decision_path,
            )
            error_type = None if decision is not None else "decision_path"
            try:
                evidence.add(
                    Trial(
                        case,
                        index,
                        decision,
                        run,
                        route,
                        error_type,
                        aliases=aliases,
                        key_id=key_id,
                    )
                )
            except TrialIndexError as error:
                raise InputError(
                    str(error), path=source, line=number, field=options.trial_path
                ) from None
            expected.setdefault(case, route)
    runs = sorted({run for run, _ in evidence.cases}) or [RUN_ID]
    cases = tuple(Case(case, None, route) for case, route in expected.items())
    return Imported(evidence, cases, ",".join(runs))
