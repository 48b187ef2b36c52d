"""Run and decision span attributes read back into the model: a run's declaration and the
trial a decision span records, typed strictly (a ValueError names what is malformed)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from ..assessment import Isolation, RelationResult, Stopping
from ..declaration import RunDeclaration
from ..errors import InvalidDecision
from ..evidence import MAX_TRIAL_INDEX
from ..fingerprints import checked_key_id
from ..policy import Claim, PassWhen, Policy
from ..stats import DEFAULT_METHOD, Method
from ..suite import Contract, Suite
from ..trial_model import (
    Decision,
    NoDecision,
    TiedSteps,
    Trial,
    aliases_of,
    decision_from_value,
    tied_steps_of,
)
from ..wire_types import AttributeValue
from . import conventions as names

E = TypeVar("E", bound=Enum)
_N = TypeVar("_N", int, float)


def _strings(value: AttributeValue) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of strings, got {value!r}")
    if not all(isinstance(item, str) for item in value):
        raise ValueError(f"expected a list of strings, got {value!r:.80}")
    return tuple(value)


_NUMBER = {int: re.compile(r"[0-9]+"), float: re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?")}
"""How the `route=value` pairs of a run span write their numbers (no signs, spaces or `_`)."""


def _parse_pairs(value: AttributeValue, kind: type[_N]) -> dict[str, _N]:
    parsed = {}
    for item in _strings(value):
        route, sep, number = item.rpartition("=")
        if not sep or not route or not _NUMBER[kind].fullmatch(number):
            raise ValueError(f"expected route={kind.__name__}, got {item!r:.80}")
        parsed[route] = kind(number)
    return parsed


@dataclass(frozen=True)
class DeclaredRun:
    """A run span as the door read it: what it declares, decoded once (`read`), and the
    attributes it declared that with (what the store keeps)."""

    declaration: RunDeclaration
    attributes: Mapping[str, AttributeValue]

    @classmethod
    def read(cls, attributes: Mapping[str, AttributeValue]) -> DeclaredRun:
        """Decode a run span's attributes (`run_declaration`); a ValueError names what is
        malformed."""
        return cls(run_declaration(attributes), attributes)

    def __reduce__(self) -> tuple[Callable[..., DeclaredRun], tuple[object, ...]]:
        """What crosses a process (a decoder's answer) is the attributes, read again on
        arrival: a contract's frozen maps do not pickle."""
        return (DeclaredRun.read, (dict(self.attributes),))


def run_declaration(attributes: Mapping[str, AttributeValue]) -> RunDeclaration:
    """Read a run span's attributes; a ValueError names what is malformed."""
    run_id = attributes.get(names.RUN_ID)
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"{names.RUN_ID} is missing")
    required = attributes.get(names.CONTRACT_REQUIRED)
    contract = Contract(
        allowed=frozenset(_strings(attributes.get(names.CONTRACT_ALLOWED))),
        required=None if required is None else frozenset(_strings(required)),
        critical=frozenset(_strings(attributes.get(names.CONTRACT_CRITICAL))),
        targets=_parse_pairs(attributes.get(names.CONTRACT_TARGETS), float),
        minimum_cases=_parse_pairs(attributes.get(names.CONTRACT_MINIMUM_CASES), int),
        allowed_no_decisions=frozenset(
            _strings(attributes.get(names.CONTRACT_ALLOWED_NO_DECISIONS))
        ),
    )
    policy = Policy(
        tolerance=_number(attributes, names.TOLERANCE, Policy.tolerance),
        confidence=_number(attributes, names.CONFIDENCE, Policy.confidence),
        dominance_threshold=_number(
            attributes, names.DOMINANCE_THRESHOLD, Policy.dominance_threshold
        ),
        pass_rate=_optional_number(attributes, names.PASS_RATE_REQUIRED),
        pass_when=_choice(attributes, names.PASS_RATE_WHEN, PassWhen, PassWhen.EVALUATOR),
        max_p95_ms=_optional_number(attributes, names.MAX_P95_MS),
        max_p95_tool_calls=_optional_number(attributes, names.MAX_P95_TOOL_CALLS),
        method=_choice(attributes, names.METHOD, Method, DEFAULT_METHOD),
        claim=_choice(attributes, names.CLAIM, Claim, Claim.TESTED),
    )
    suite = Suite(
        name=str(attributes.get(names.SUITE, Suite.name)),
        point=str(attributes.get(names.POINT, Suite.point)),
        contract=contract,
        tolerance=policy.tolerance,
    )
    return RunDeclaration(
        run_id=run_id,
        suite=suite,
        policy=policy,
        planned_cases=_count(attributes, names.PLAN_CASES),
        planned_trials=_count(attributes, names.PLAN_TRIALS),
        isolation=Isolation(attributes.get(names.ISOLATION, Isolation.UNKNOWN.value)),
        quality_failed=_strings(attributes.get(names.QUALITY_FAILED)),
        relations=decode_results(
            _strings(attributes.get(names.RELATIONS_REQUESTED)),
            _strings(attributes.get(names.RELATIONS_VIOLATED)),
            _strings(attributes.get(names.RELATIONS_HELD)),
            _strings(attributes.get(names.RELATIONS_ERRORED)),
        ),
        stopping=_stopping(attributes),
    )


def _stopping(attributes: Mapping[str, AttributeValue]) -> Stopping | None:
    """How a run that could stop early did, from its run span (None when it could not)."""
    sized = _count(attributes, names.PLAN_SIZED_TRIALS)
    return None if sized is None else Stopping(sized, attributes.get(names.CURTAILED) is True)


def _number(attributes: Mapping[str, AttributeValue], key: str, default: float) -> float:
    value = attributes.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


def _choice(attributes: Mapping[str, AttributeValue], key: str, kind: type[E], default: E) -> E:
    """One of an enumeration's values; an unknown one is a malformed declaration (rejected at
    the door)."""
    value = attributes.get(key, default.value)
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise ValueError(f"{key} must be one of {allowed}, got {value!r:.40}") from None


def _optional_number(attributes: Mapping[str, AttributeValue], key: str) -> float | None:
    return None if attributes.get(key) is None else _number(attributes, key, 0.0)


def _count(attributes: Mapping[str, AttributeValue], key: str) -> int | None:
    value: object = attributes.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a non-negative integer, got {value!r}")
    return value


def trial_from_attributes(
    attributes: Mapping[str, AttributeValue], latency_ms: float | None = None
) -> Trial:
    """The whole trial a decision span records (with the span's duration as its latency); a
    ValueError names the attribute that is wrong.

    Values are typed strictly, as OpenTelemetry types them: the trial index is an integer in
    0..MAX_TRIAL_INDEX (never a double, a bool or a string of digits), the outcome is one of
    the three, and an attribute the trial uses that is present has its own type (a string, a
    bool, or an array of strings), or the span is malformed.
    """
    get = attributes.get
    run, case, index = get(names.RUN_ID), get(names.CASE_ID), get(names.TRIAL)
    if type(run) is not str or not run:
        raise ValueError(f"{names.RUN_ID} is missing" + _got(run))
    if type(case) is not str or not case:
        raise ValueError(f"{names.CASE_ID} is missing" + _got(case))
    if type(index) is not int or not 0 <= index <= MAX_TRIAL_INDEX:
        raise ValueError(
            f"{names.TRIAL} must be an integer in 0..{MAX_TRIAL_INDEX}, got {index!r:.60}"
        )
    decision, error_type = _outcome(attributes)
    # the common case first: each absent, or of its type
    expected, passed = get(names.CASE_EXPECTED), get(names.PASSED)
    skipped, tied = get(names.EVALUATION_SKIPPED), get(names.TIED_STEPS)
    failed, warned = get(names.INVARIANT_FAILED), get(names.INVARIANT_WARNED)
    aliases, key_id = get(names.CASE_ALIASES), get(names.CASE_KEY_ID)
    if expected is not None and type(expected) is not str:
        expected = _optional_text(attributes, names.CASE_EXPECTED)  # raises: not a string
    if passed is not None and type(passed) is not bool:
        passed = _optional_flag(attributes, names.PASSED)  # raises: not a bool
    if skipped is not None and type(skipped) is not bool:
        _optional_flag(attributes, names.EVALUATION_SKIPPED)
    return Trial(
        case,
        index,
        decision,
        run,
        expected,
        error_type,
        passed=passed,
        invariants_failed=() if failed is None else _names(attributes, names.INVARIANT_FAILED),
        invariants_warned=() if warned is None else _names(attributes, names.INVARIANT_WARNED),
        latency_ms=latency_ms,
        evaluation_skipped=skipped is True,
        tied_steps=() if tied is None else _tied_steps(tied, decision),
        aliases=() if aliases is None else _aliases(attributes, case),
        key_id=None if key_id is None else _key_id(key_id),
    )


def _outcome(attributes: Mapping[str, AttributeValue]) -> tuple[Decision | None, str | None]:
    """What a decision span's outcome records: the decision (its verdict, else its tool path),
    a no-decision with its reason, or no decision and the error's type."""
    outcome = attributes.get(names.OUTCOME)
    if outcome == "decision":
        value = attributes.get(names.VERDICT)
        if value is None:
            value = attributes.get(names.TOOLS)
            if value is None:
                raise ValueError(f"outcome decision needs {names.VERDICT} or {names.TOOLS}")
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"{names.TOOLS} must be an array of strings, got {value!r:.60}")
            value = list(value)
        elif type(value) is not str:
            raise ValueError(f"{names.VERDICT} must be a string, got {value!r:.60}")
        try:
            return decision_from_value(value), None
        except InvalidDecision as error:
            raise ValueError(f"{names.VERDICT}: {error}") from None
    if outcome == "no_decision":
        reason = _optional_text(attributes, names.NO_DECISION_REASON)
        return NoDecision("unspecified" if reason is None else reason), None
    if outcome == "error":
        return None, _optional_text(attributes, names.ERROR_TYPE)
    if outcome is None:
        raise ValueError(f"{names.OUTCOME} is missing")
    raise ValueError(f"{names.OUTCOME} must be decision, no_decision or error, got {outcome!r:.60}")


def _got(value: object) -> str:
    return "" if value is None else f" (got {value!r:.60})"


def _optional_text(attributes: Mapping[str, AttributeValue], key: str) -> str | None:
    value = attributes.get(key)
    if value is None or type(value) is str:
        return value
    raise ValueError(f"{key} must be a string, got {value!r:.60}")


def _optional_flag(attributes: Mapping[str, AttributeValue], key: str) -> bool | None:
    value = attributes.get(key)
    if value is None or type(value) is bool:
        return value
    raise ValueError(f"{key} must be a bool, got {value!r:.60}")


def _names(attributes: Mapping[str, AttributeValue], key: str) -> tuple[str, ...]:
    """A string array attribute (a lone string is one name)."""
    value = attributes.get(key)
    if value is None:
        return ()
    if type(value) is str:
        return (value,)
    if isinstance(value, (list, tuple)) and all(type(item) is str for item in value):
        return tuple(value)
    raise ValueError(f"{key} must be an array of strings, got {value!r:.60}")


def decode_results(
    requested: tuple[str, ...],
    violated: tuple[str, ...],
    held: tuple[str, ...],
    errored: tuple[str, ...] = (),
) -> tuple[RelationResult, ...]:
    """The results a run span declares (`name=route` pairs grouped by relation name)."""

    def routes(pairs: tuple[str, ...], name: str) -> tuple[str, ...]:
        return tuple(sorted(p.partition("=")[2] for p in pairs if p.partition("=")[0] == name))

    return tuple(
        RelationResult(n, routes(violated, n), routes(held, n), routes(errored, n))
        for n in requested
    )


def _tied_steps(value: object, decision: Decision | None) -> TiedSteps:
    """The span's flattened tied ranges, checked against its path."""
    if not isinstance(value, (list, tuple)) or len(value) % 2:
        raise ValueError(f"{names.TIED_STEPS} must be an even list of whole numbers")
    try:
        return tied_steps_of([value[i : i + 2] for i in range(0, len(value), 2)], decision)
    except ValueError as error:
        raise ValueError(f"{names.TIED_STEPS} {error}") from None


def _aliases(attributes: Mapping[str, AttributeValue], case: str) -> tuple[str, ...]:
    """The further names of the case's input a span carries."""
    given = _names(attributes, names.CASE_ALIASES)
    try:
        return aliases_of(given, case)
    except ValueError as error:
        raise ValueError(f"{names.CASE_ALIASES} {error}") from None


def _key_id(value: object) -> str:
    """The key id a span carries."""
    try:
        return checked_key_id(value)
    except ValueError as error:
        raise ValueError(f"{names.CASE_KEY_ID} {error}") from None
