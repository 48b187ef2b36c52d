"""Importers: evidence other tools already collected, read into the same Trial records.

Internal: the public API is what `verdictgate` exports. Its modules may be imported (the tests
do), but they can change between releases.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..assessment import Isolation
from ..errors import InputError, InvalidDecision, LabelOutOfBounds
from ..evidence import Evidence
from ..fingerprints import fingerprint_key
from ..flags import flag
from ..suite import Case, Suite
from ..trial_model import Decision, decision_from_value
from ..wire_types import JsonValue


@dataclass(frozen=True)
class Imported:
    """Trials read from another tool's file, with the cases, run id and isolation it recorded."""

    evidence: Evidence
    cases: tuple[Case, ...]
    run_id: str
    isolation: Isolation = Isolation.UNKNOWN


@dataclass(frozen=True)
class ImportOptions:
    """How to read a source; each importer uses the options that concern it. Each field is
    also a flag of `verdictgate assess` and `convert`."""

    provider: str | None = flag(None, "promptfoo: the provider id or label to assess.")
    prompt_id: str | None = flag(None, "promptfoo: the promptId to assess.")
    decision_path: str | None = flag(
        None, "Dotted path to the decision (in a JSON output, or a JSONL row)."
    )
    case_by: str = flag(
        "prompt",
        "promptfoo: identify a case by its rendered prompt or by its vars.",
        choices=("prompt", "vars"),
        show_default=True,
    )
    input_var: str | None = flag(
        None, "promptfoo, with --case-by vars: the var that holds the input."
    )
    expected_var: str | None = flag(
        None, "promptfoo, without --suite: the var holding the expected route."
    )
    decision_kind: str = flag(
        "output",
        "DeepEval: the decision is the actual output, or the tools called.",
        "--decision",
        choices=("output", "tools"),
        show_default=True,
    )
    case_path: str | None = flag(
        None, "JSONL: dotted path to the case (an id, or the input to fingerprint)."
    )
    trial_path: str | None = flag(
        None, "JSONL: dotted path to the trial index (default: order of appearance)."
    )
    expected_path: str | None = flag(None, "JSONL: dotted path to the expected route.")
    run_path: str | None = flag(None, "JSONL: dotted path to the run id.")


def pick(value: JsonValue, dotted: str) -> JsonValue:
    """The value at a dotted path (`a.b.0.c`) in parsed JSON, or None."""
    for part in dotted.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def decision_at(
    value: object,
    path: str | None,
    *,
    source: str,
    field: str,
    line: int | None = None,
) -> Decision | None:
    """A decision read from a tool's output: the value itself, or, with a dotted `path`, what
    the path names in it (JSON text is parsed first), by the one rule of `decision_from_value`;
    None when it is not a decision (the caller records an unreadable decision). A label no
    source may carry is the file's fault: an InputError naming its `source`, `line` and
    `field`."""
    if path is not None:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return None
        value = pick(value, path)
    with located(source, field, line):
        try:
            return decision_from_value(value)
        except LabelOutOfBounds:
            raise
        except InvalidDecision:
            return None


@contextmanager
def located(source: str, field: str | None, line: int | None = None) -> Iterator[None]:
    """Input errors raised in the block (a label or an input no source may carry) named by
    where the file holds the value: its `source`, `line` and `field`."""
    try:
        yield
    except InputError as error:
        raise InputError(error.problem, path=source, line=line, field=field) from None


SOURCES = ("agentverity", "promptfoo", "deepeval", "jsonl", "otlp_json")
"""The source kinds, each read by the module of the same name."""

Reader = Callable[[Path, ImportOptions, Suite | None, bytes | None], Imported]
"""The `read(path, options, suite, key)` function of each importer module."""


def read_source(
    kind: str,
    path: str | Path,
    options: ImportOptions,
    suite: Suite | None,
    key: str | bytes | None = None,
) -> Imported:
    """Read one source file of `kind`; case ids are keyed by `key`, else by
    VERDICTGATE_FINGERPRINT_KEY."""
    module = importlib.import_module(f".{kind}", __name__)  # imported only when asked for
    read: Reader = module.read
    return read(Path(path), options, suite, fingerprint_key(key))


def evidence_from_promptfoo(
    path: str | Path,
    *,
    suite: Suite | None = None,
    decision_path: str | None = None,
    provider: str | None = None,
    prompt_id: str | None = None,
    case_by: str = "prompt",
    input_var: str | None = None,
    expected_var: str | None = None,
    key: str | bytes | None = None,
) -> Imported:
    """Trials from a promptfoo results file (`promptfoo eval -o results.json`, or its JSON
    Lines), no model called. `decision_path` reads the decision from JSON outputs (`route`);
    `provider` / `prompt_id` pick one of several; cases are grouped by `case_by` (`prompt`,
    `vars`, `description`); `suite` gives references and the contract."""
    options = ImportOptions(
        provider=provider,
        prompt_id=prompt_id,
        decision_path=decision_path,
        case_by=case_by,
        input_var=input_var,
        expected_var=expected_var,
    )
    return read_source("promptfoo", path, options, suite, key)


def evidence_from_agentverity(
    path: str | Path, *, suite: Suite | None = None, key: str | bytes | None = None
) -> Imported:
    """Trials from an AgentVerity evidence file (`agentverity.evidence/v2`): each case's
    observations in order, its errors after them."""
    return read_source("agentverity", path, ImportOptions(), suite, key)
