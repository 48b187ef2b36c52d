"""OTLP/JSON captures (a collector `file` exporter: one ExportTraceServiceRequest per line):
an offline replay of a canary, read exactly as the receiver reads it live."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..evidence import Evidence
from ..otel.otlp_reading import MalformedRequest, extract_json
from ..suite import Case, Suite
from . import Imported, ImportOptions


def read(path: Path, options: ImportOptions, suite: Suite | None, key: bytes | None) -> Imported:
    """Every decision span of every line; the run is the first run id seen."""
    evidence = Evidence()
    expected: dict[str, str | None] = {}
    try:
        stream = path.open("rb")
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=str(path)) from None
    with stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                extract = extract_json(line)
            except MalformedRequest as error:
                raise InputError(str(error), path=str(path), line=number) from None
            if extract.rejected:
                raise InputError(extract.errors[0], path=str(path), line=number)
            evidence.add_all(extract.trials)
            for trial in extract.trials:
                expected.setdefault(trial.case, trial.expected)
            for declared in extract.declarations:
                declaration = declared.declaration
                if declaration.isolation is not None:
                    evidence.declare_isolation(declaration.run_id, declaration.isolation)
    runs = sorted({run for run, _ in evidence.cases})
    if not runs:
        raise InputError("holds no decision spans", path=str(path))
    cases = tuple(Case(case, None, route) for case, route in expected.items())
    return Imported(evidence, cases, ",".join(runs), evidence.declared_isolation())
