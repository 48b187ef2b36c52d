"""Reading OTLP trace exports (protobuf or JSON) down to the spans verdictgate needs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from ..otel import conventions as names
from ..otel.spans import is_decision_span, run_declaration, trial_from_attributes
from ..trial_model import Trial
from ..v1.otlp_view_pb2 import ExportTraceRequestView

MAX_ATTRIBUTE_VALUE = 4096
"""Longest string attribute value kept; a longer one makes its span rejected."""
MAX_ARRAY_VALUES = 256
"""Most values in an array attribute (labels of a tool path, contract routes)."""


class MalformedRequest(ValueError):
    """The body is not an OTLP trace export."""


@dataclass
class Extract:
    """What one export request holds for verdictgate."""

    trials: list[Trial] = field(default_factory=list)
    declarations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """run id -> (suite, point) as decision spans name them."""
    other_spans: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, name: str, attributes: dict[str, Any], latency_ms: float | None = None) -> None:
        """Sort one span: a trial, a run declaration, another span, or a rejected one."""
        try:
            if name == names.RUN_SPAN:
                declared = {k: v for k, v in attributes.items() if k in names.RUN_SPAN_ATTRIBUTES}
                run_declaration(declared)  # checked at the door: a bad one is rejected alone
                self.declarations.append(declared)
            elif is_decision_span(name, attributes):
                trial = trial_from_attributes(attributes, latency_ms)
                self.trials.append(trial)
                if trial.run not in self.labels:
                    self.labels[trial.run] = (
                        attributes.get(names.SUITE),
                        attributes.get(names.POINT),
                    )
            else:
                self.other_spans += 1
        except ValueError as error:
            self.rejected += 1
            if len(self.errors) < 5:
                self.errors.append(f"span {name!r}: {error}")


def _latency_ms(start: int, end: int) -> float | None:
    """A span's duration in milliseconds; None when its times are missing or reversed."""
    return (end - start) / 1e6 if start and end >= start else None


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        text = value.string_value
        if len(text) > MAX_ATTRIBUTE_VALUE:
            raise ValueError("attribute value too long")
        return text
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "array_value":
        values = value.array_value.values
        if len(values) > MAX_ARRAY_VALUES:
            raise ValueError("array attribute has too many values")
        return [_any_value(item) for item in values]
    return None


_ALWAYS = (names.RUN_ID, names.CASE_ID, names.TRIAL, names.OUTCOME, names.CASE_EXPECTED)
_BY_OUTCOME = {
    "decision": (names.VERDICT, names.TOOLS),
    "no_decision": (names.NO_DECISION_REASON,),
    "error": (names.ERROR_TYPE,),
}
_LABELS = (names.SUITE, names.POINT)
_TIERS = (names.PASSED, names.INVARIANT_FAILED, names.INVARIANT_WARNED, names.EVALUATION_SKIPPED)


def _read(view: Any, keys: tuple[str, ...], into: dict[str, Any]) -> None:
    """Copy the attributes named by `keys` out of a map view.

    A non-empty string is taken as it is (the common case: one call); anything else is read by
    its kind, so a value of another type is never mistaken for an empty string.
    """
    for key in keys:
        value = view.get(key)
        if value is None:
            continue
        text = value.string_value
        if text:
            if len(text) > MAX_ATTRIBUTE_VALUE:
                raise ValueError("attribute value too long")
            into[key] = text
        else:
            into[key] = _any_value(value)


def _decision_view(view: Any, labels: dict) -> dict[str, Any]:
    """Only the attributes a decision span is read for; any others are never decoded."""
    attributes: dict[str, Any] = {}
    _read(view, _ALWAYS, attributes)
    outcome = attributes.get(names.OUTCOME)
    if outcome is not None:
        _read(view, _BY_OUTCOME.get(outcome, ()), attributes)
    _read(view, _TIERS, attributes)
    if attributes.get(names.RUN_ID) not in labels:
        _read(view, _LABELS, attributes)
    return attributes


def extract_protobuf(body: bytes) -> Extract:
    """Read an `ExportTraceServiceRequest` in protobuf encoding.

    It is parsed into a wire-compatible view (proto/verdictgate/v1/otlp_view.proto) whose
    attributes are a map, so a decision span costs a few lookups by key, not a walk of every
    attribute.
    """
    try:
        request = ExportTraceRequestView.FromString(body)
    except (DecodeError, ValueError) as error:
        raise MalformedRequest(f"not an OTLP ExportTraceServiceRequest: {error}") from None
    extract = Extract()
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                name = span.name
                latency = None
                try:
                    if name.startswith(names.DECISION_SPAN_PREFIX):
                        attributes = _decision_view(span.attributes, extract.labels)
                        latency = _latency_ms(span.start_time_unix_nano, span.end_time_unix_nano)
                    elif name == names.RUN_SPAN:
                        attributes = {
                            key: _any_value(value) for key, value in span.attributes.items()
                        }
                    else:
                        extract.other_spans += 1  # not ours: its attributes are never read
                        continue
                except (ValueError, RecursionError) as error:
                    extract.rejected += 1
                    if len(extract.errors) < 5:
                        extract.errors.append(f"span {name!r}: {error}")
                    continue
                extract.add(name, attributes, latency)
    return extract


def extract_json(body: bytes) -> Extract:
    """Read an export request in the OTLP/JSON encoding (camelCase, unknown fields ignored)."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedRequest(f"invalid JSON: {error}") from None
    if not isinstance(document, dict):
        raise MalformedRequest("an OTLP/JSON export is an object with resourceSpans")
    extract = Extract()
    for name, attributes, latency in _json_spans(document):
        if attributes is None:
            extract.rejected += 1
            extract.errors.append(f"span {name!r}: malformed attributes")
        else:
            extract.add(name, attributes, latency)
    return extract


def _json_spans(document: dict) -> Iterator[tuple[str, dict[str, Any] | None, float | None]]:
    for resource_spans in _json_list(document.get("resourceSpans")):
        for scope_spans in _json_list(resource_spans.get("scopeSpans")):
            for span in _json_list(scope_spans.get("spans")):
                name = span.get("name")
                name = name if isinstance(name, str) else ""
                try:
                    attributes = {
                        item["key"]: _json_value(item.get("value") or {})
                        for item in _json_list(span.get("attributes"))
                    }
                except (KeyError, TypeError, ValueError, RecursionError):
                    attributes = None
                yield name, attributes, _json_latency(span)


def _json_latency(span: dict) -> float | None:
    """Duration from the span's `startTimeUnixNano` / `endTimeUnixNano` (strings of digits)."""
    try:
        return _latency_ms(
            int(span.get("startTimeUnixNano", 0)), int(span.get("endTimeUnixNano", 0))
        )
    except (TypeError, ValueError):
        return None


def _json_list(value: Any) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise MalformedRequest("expected a list of objects in resourceSpans")
    return value


def _json_value(value: dict) -> Any:
    if "stringValue" in value:
        text = value["stringValue"]
        if not isinstance(text, str) or len(text) > MAX_ATTRIBUTE_VALUE:
            raise ValueError("bad string value")
        return text
    if "intValue" in value:
        return int(value["intValue"])  # int64 travels as a JSON string
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        values = (value["arrayValue"] or {}).get("values") or []
        if len(values) > MAX_ARRAY_VALUES:
            raise ValueError("array attribute has too many values")
        return [_json_value(item) for item in values]
    return None
