"""AgentVerity evidence files (`agentverity.evidence/v2`): ordered observations per case."""

from __future__ import annotations

from pathlib import Path

from ..assessment import Isolation
from ..errors import InputError
from ..evidence import Evidence
from ..fingerprints import input_names
from ..suite import Case, Suite
from ..suite_file import read_json
from ..trial_model import Decision, Trial
from ..wire_types import JsonValue
from . import Imported, ImportOptions, decision_at

EVIDENCE_SCHEMA = "agentverity.evidence/v2"
RUN_ID = "agentverity"


def _observation(value: JsonValue, field: str, source: str) -> Decision:
    decision = decision_at(value, None, source=source, field=field)
    if decision is not None:
        return decision
    raise InputError(
        "an observation is a label, a list of tool names, or {kind: no_decision, reason}",
        path=source,
        field=field,
    )


def read(path: Path, options: ImportOptions, suite: Suite | None, key: bytes | None) -> Imported:
    """Read an evidence file: each case's observations in order are trials 0, 1, ...; its
    `errors` count becomes that many error trials after them."""
    source = str(path)
    document = read_json(path)
    if not isinstance(document, dict) or document.get("schema") != EVIDENCE_SCHEMA:
        raise InputError(f"not an {EVIDENCE_SCHEMA} file", path=source, field="schema")
    raw_cases = document.get("cases")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise InputError("must be a non-empty list", path=source, field="cases")
    try:
        isolation = Isolation(document.get("isolation", Isolation.UNKNOWN.value))
    except ValueError:
        raise InputError("unknown isolation", path=source, field="isolation") from None
    evidence = Evidence()
    cases: list[Case] = []
    for number, raw in enumerate(raw_cases):
        field = f"cases[{number}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("input"), str):
            raise InputError("needs an `input` string", path=source, field=field)
        observations = raw.get("observations")
        if not isinstance(observations, list):
            raise InputError("must be a list", path=source, field=f"{field}.observations")
        errors = raw.get("errors", 0)
        if not isinstance(errors, int) or isinstance(errors, bool) or errors < 0:
            raise InputError("must be a non-negative integer", path=source, field=f"{field}.errors")
        expected = raw.get("expected") if isinstance(raw.get("expected"), str) else None
        case_id, _, key_id = input_names(raw["input"], key)
        if any(case.id == case_id for case in cases):
            raise InputError("the same input appears twice", path=source, field=field)
        evidence.add_all(
            Trial(
                case_id,
                index,
                _observation(value, f"{field}.observations[{index}]", source),
                RUN_ID,
                expected,
                isolation=isolation,
                key_id=key_id,
            )
            for index, value in enumerate(observations)
        )
        evidence.add_all(
            Trial(
                case_id,
                len(observations) + n,
                None,
                RUN_ID,
                expected,
                "agentverity_error",
                isolation=isolation,
                key_id=key_id,
            )
            for n in range(errors)
        )
        cases.append(Case(case_id, None, expected))
    return Imported(evidence, tuple(cases), RUN_ID, isolation)
