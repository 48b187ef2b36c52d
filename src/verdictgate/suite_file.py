"""Reading suite files: `verdictgate.suite/v1` and AgentVerity's `agentverity.decision-suite/v1`."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from pathlib import Path

from .errors import InputError
from .fingerprints import fingerprint, fingerprint_key
from .policy import Claim, PassWhen
from .stats import Method
from .suite import BUNDLED_MODEL, Calibration, Case, Contract, Suite
from .wire_types import JsonObject, JsonValue

SUITE_SCHEMA = "verdictgate.suite/v1"
AGENTVERITY_SUITE_SCHEMA = "agentverity.decision-suite/v1"

Fail = Callable[[str, str], InputError]
"""Makes the InputError for a field of the suite file and its problem."""


def read_json(path: str | Path) -> JsonValue:
    """Parse a JSON file, turning every failure into one InputError naming file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot read file ({error.strerror})", path=str(path)) from None
    except UnicodeDecodeError:
        raise InputError("file is not UTF-8 text", path=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"invalid JSON: {error.msg}", path=str(path), line=error.lineno) from None


SUITE_KEYS = frozenset(
    {
        "schema",
        "name",
        "point",
        "cases",
        "contract",
        "tolerance",
        "method",
        "claim",
        "pass_rate",
        "pass_when",
        "semantic",
    }
)
CONTRACT_KEYS = frozenset(
    {
        "allowed",
        "required",
        "critical",
        "targets",
        "stability_targets",
        "minimum_cases",
        "allowed_no_decisions",
    }
)
CASE_KEYS = frozenset({"id", "input", "expected", "reference"})
SEMANTIC_KEYS = frozenset({"threshold", "mean", "sd", "samples", "model"})


def load_suite(path: str | Path, key: str | bytes | None = None) -> Suite:
    """Load a suite file; case ids are explicit ids or fingerprints of the inputs, keyed by
    `key` or else `VERDICTGATE_FINGERPRINT_KEY`."""
    document = read_json(path)
    return suite_from_document(
        document, fingerprint_key(key), source=str(path), default_name=Path(path).stem
    )


def suite_from_document(
    document: JsonValue,
    key: bytes | None,
    *,
    source: str | None = None,
    default_name: str = "suite",
) -> Suite:
    """Build a Suite from a parsed suite document of either schema."""

    def fail(field: str, problem: str) -> InputError:
        return InputError(problem, path=source, field=field)

    if not isinstance(document, dict):
        raise fail("schema", "a suite file must hold a JSON object")
    schema = document.get("schema")
    if schema not in (SUITE_SCHEMA, AGENTVERITY_SUITE_SCHEMA):
        raise fail(
            "schema", f"expected {SUITE_SCHEMA!r} or {AGENTVERITY_SUITE_SCHEMA!r}, got {schema!r}"
        )
    if schema == SUITE_SCHEMA:  # AgentVerity's files may carry fields of its own
        _all_known(document, fail)
    contract = _contract(document.get("contract") or {}, fail)
    cases = _cases(document.get("cases"), key, contract, fail)
    tolerance = _fraction(document, "tolerance", fail)
    method = _choice(
        document, "method", {m.value for m in Method}, "wilson, exact or sequential", fail
    )
    claim = _choice(document, "claim", {c.value for c in Claim}, "tested or population", fail)
    pass_rate = _fraction(document, "pass_rate", fail)
    pass_when = _choice(
        document, "pass_when", {p.value for p in PassWhen}, "evaluator or expected", fail
    )
    return Suite(
        name=_text(document.get("name", default_name), "name", fail),
        point=_text(document.get("point", "decision"), "point", fail),
        cases=cases,
        contract=contract,
        tolerance=tolerance,
        pass_rate=pass_rate,
        pass_when=PassWhen(pass_when) if pass_when is not None else None,
        method=Method(method) if method is not None else None,
        claim=Claim(claim) if claim is not None else None,
        semantic=_semantic(document.get("semantic"), fail),
    )


def _all_known(document: dict[object, JsonValue], fail: Fail) -> None:
    """Refuse a key `verdictgate.suite/v1` does not have, at the top, in its contract, its
    semantic calibration or any case (`_known`)."""
    _known(document, SUITE_KEYS, "", fail)
    for name, known in (("contract", CONTRACT_KEYS), ("semantic", SEMANTIC_KEYS)):
        if isinstance(document.get(name), dict):
            _known(document[name], known, f"{name}.", fail)
    cases = document.get("cases")
    for number, raw in enumerate(cases if isinstance(cases, list) else []):
        if isinstance(raw, dict):
            _known(raw, CASE_KEYS, f"cases[{number}].", fail)


def _cases(
    raw_cases: JsonValue, key: bytes | None, contract: Contract, fail: Fail
) -> tuple[Case, ...]:
    """The suite's cases, none the same as another (by id, or by input)."""
    if not isinstance(raw_cases, list) or not raw_cases:
        raise fail("cases", "must be a non-empty list of cases")
    cases = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(raw_cases):
        case = _case(raw, number, key, contract, fail)
        if case.id in seen:
            raise fail(
                f"cases[{number}]", f"same case as cases[{seen[case.id]}] (same id or input)"
            )
        seen[case.id] = number
        cases.append(case)
    return tuple(cases)


def _fraction(document: dict[object, JsonValue], field: str, fail: Fail) -> JsonValue:
    """An optional number strictly between 0 and 1 (a tolerance or a pass rate)."""
    value = document.get(field)
    if value is not None and not (_is_number(value) and 0 < value < 1):
        raise fail(field, f"must be a number between 0 and 1, got {value!r}")
    return value


def _choice(
    document: dict[object, JsonValue], field: str, allowed: set[str], named: str, fail: Fail
) -> JsonValue:
    """An optional value among `allowed` (spelt out as `named` in the error)."""
    value = document.get(field)
    if value is not None and value not in allowed:
        raise fail(field, f"must be {named}, got {value!r}")
    return value


def _known(raw: dict[object, JsonValue], known: frozenset[str], prefix: str, fail: Fail) -> None:
    """Refuse a key the suite format does not have (a misspelt `tolerence` would else leave
    the default in force without a word), naming the nearest known one; keys that begin with
    `_` or `$` are annotations, never read."""
    for key in raw:
        if key in known or not isinstance(key, str) or key[:1] in ("_", "$"):
            continue
        nearest = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        hint = f"did you mean `{nearest[0]}`?" if nearest else "known: " + ", ".join(sorted(known))
        raise fail(prefix + key, f"not a suite field ({hint})")


def _semantic(raw: JsonValue, fail: Fail) -> Calibration | None:
    """The calibrated threshold `verdictgate calibrate` stored, if any."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise fail("semantic", "must be an object with a `threshold`")
    threshold = raw.get("threshold")
    numbers = {"threshold": threshold, "mean": raw.get("mean", threshold), "sd": raw.get("sd", 0)}
    for name, value in numbers.items():
        low = 0.0 if name == "sd" else -1.0
        if not _is_number(value) or not low <= value <= (2.0 if name == "sd" else 1.0):
            raise fail(f"semantic.{name}", f"must be a number from {low:g}, got {value!r}")
    samples = raw.get("samples", 0)
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
        raise fail("semantic.samples", f"must be a count, got {samples!r}")
    model = _text(raw.get("model", BUNDLED_MODEL), "semantic.model", fail)
    return Calibration(samples=samples, model=model, **{k: float(v) for k, v in numbers.items()})


def _is_number(value: JsonValue) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value: JsonValue, field: str, fail: Fail) -> str:
    if not isinstance(value, str) or not value.strip():
        raise fail(field, f"must be a non-empty string, got {value!r}")
    return value


def _labels(value: JsonValue, field: str, fail: Fail) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise fail(field, "must be a list of strings")
    return frozenset(_text(item, f"{field}[{i}]", fail) for i, item in enumerate(value))


def _numbers(value: JsonValue, field: str, fail: Fail, kind: type) -> JsonObject:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(field, "must be an object of route -> number")
    for route, number in value.items():
        valid = isinstance(number, int) if kind is int else _is_number(number)
        if not valid or isinstance(number, bool):
            raise fail(f"{field}.{route}", f"must be a number, got {number!r}")
    return dict(value)


def _contract(raw: JsonValue, fail: Fail) -> Contract:
    if not isinstance(raw, dict):
        raise fail("contract", "must be an object")
    allowed = _labels(raw.get("allowed"), "contract.allowed", fail)
    required = raw.get("required")
    targets = _numbers(
        raw.get("targets", raw.get("stability_targets")), "contract.targets", fail, float
    )
    minimum_cases = _numbers(raw.get("minimum_cases"), "contract.minimum_cases", fail, int)
    required_routes = None if required is None else _labels(required, "contract.required", fail)
    critical = _labels(raw.get("critical"), "contract.critical", fail)
    allowed_no_decisions = _labels(
        raw.get("allowed_no_decisions"), "contract.allowed_no_decisions", fail
    )
    for name, routes in (("required", required_routes), ("critical", critical)):
        outside = sorted((routes or frozenset()) - allowed) if allowed else []
        if outside:
            raise fail(f"contract.{name}", f"routes not in allowed: {', '.join(outside)}")
    try:
        return Contract(
            allowed,
            required=required_routes,
            critical=critical,
            targets=targets,
            minimum_cases=minimum_cases,
            allowed_no_decisions=allowed_no_decisions,
        )
    except ValueError as error:
        raise fail("contract", str(error)) from None


def _case(raw: JsonValue, number: int, key: bytes | None, contract: Contract, fail: Fail) -> Case:
    field = f"cases[{number}]"
    if not isinstance(raw, dict):
        raise fail(field, "must be an object with `id` or `input`")
    text = raw.get("input")
    if text is not None:
        text = _text(text, f"{field}.input", fail)
    explicit = raw.get("id")
    if explicit is not None:
        explicit = _text(explicit, f"{field}.id", fail)
    if explicit is not None:
        case_id = explicit
    elif text is not None:
        case_id = fingerprint(text, key)
    else:
        raise fail(field, "needs an `id` or an `input`")
    expected = raw.get("expected")
    if expected is not None:
        expected = _text(expected, f"{field}.expected", fail)
        if contract.declared and expected not in contract.allowed:
            raise fail(
                f"{field}.expected", f"route {expected!r} is not in the contract's allowed list"
            )
    reference = raw.get("reference")
    if reference is not None:
        reference = _text(reference, f"{field}.reference", fail)
    return Case(id=case_id, input=text, expected=expected, reference=reference)
