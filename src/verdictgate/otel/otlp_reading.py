"""Reading OTLP trace exports (protobuf or JSON) down to the spans verdictgate needs.

Every decision span and run span is checked at the door, by the code that will use it
(`trial_from_attributes`, `DeclaredRun.read`): one that is malformed is rejected alone, through
OTLP partial success, and the rest of its request is kept. A body that is not an export request
at all is a MalformedRequest. Both encodings are read alike:

- Only the attributes a span of ours is read for are decoded, and only those can make it
  rejected; any other attribute, and any span that is not ours, is never decoded.
- Attribute values are typed as OpenTelemetry types them: an integer is an `int_value`, never a
  double, a bool or a string of digits.
- Of two attributes with one key, the first wins, as the OpenTelemetry Collector reads them.
- A string that is not UTF-8 (protobuf) or holds a lone surrogate (JSON) makes its span
  rejected if the span is ours and the string is read, and is ignored otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import msgspec
from google.protobuf.message import DecodeError

from ..otel import conventions as names
from ..otel.span_decoding import DeclaredRun, trial_from_attributes
from ..span_facts import FACT_KEYS, facts_of
from ..trial_model import MAX_LABEL, MAX_PATH_STEPS, Trial
from ..v1.otlp_view_pb2 import (
    AnyValue,
    ExportTraceRequestEntries,
    ExportTraceRequestView,
    RawAnyValue,
    RawKeyValue,
    SpanEntries,
    SpanView,
)
from ..wire_types import AttributeValue, JsonObject, JsonValue
from .framework_traces import TRIAL_MARK_KEYS, FrameworkSpan, TrialMark, trial_mark

if TYPE_CHECKING:
    from google.protobuf.internal.containers import MessageMap

MAX_ATTRIBUTE_VALUE = MAX_LABEL
"""Longest string attribute value kept; a longer one makes its span rejected."""
MAX_KEY_BYTES = 1024
"""Longest run id, case id, suite or point, in UTF-8 bytes: a receiver's store indexes them,
and an index key holds a few kilobytes at most (PostgreSQL's b-tree 2,704 bytes; a trial's key
is its run id and case id together), so a longer one is refused at the door, on either store."""
MAX_ARRAY_VALUES = MAX_PATH_STEPS
"""Most values in an array attribute (labels of a tool path, contract routes)."""
MAX_ERRORS = 5
"""Rejected spans named in a partial success message; the rest are counted only."""

_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64 = (0, (1 << 64) - 1)


class MalformedRequest(ValueError):
    """The body is not an OTLP trace export."""


@dataclass
class ExportContents:
    """What one export request holds for verdictgate."""

    trials: list[Trial] = field(default_factory=list)
    declarations: list[DeclaredRun] = field(default_factory=list)
    """Run spans' declarations, each decoded once, here."""
    labels: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """run id -> (suite, point) as decision spans name them."""
    marks: list[TrialMark] = field(default_factory=list)
    """Harnesses' trial spans, whose decision the framework spans below them make."""
    framework_spans: list[FrameworkSpan] = field(default_factory=list)
    """The name facts of every span that is not ours (never its content)."""
    other_spans: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def add_trial(
        self, name: str, attributes: dict[str, AttributeValue], latency_ms: float | None
    ) -> None:
        """Keep the trial a decision span records, or reject the span (counted, and named). The
        first decision span of a run also names its suite and point (`labels`)."""
        try:
            trial = trial_from_attributes(attributes, latency_ms)
            labels = None if trial.run in self.labels else _labels(attributes)
            _check_keys({names.RUN_ID: trial.run, names.CASE_ID: trial.case})
            if labels is not None:
                _check_keys({names.SUITE: labels[0], names.POINT: labels[1]})
        except ValueError as error:
            self.reject(name, error)
            return
        self.trials.append(trial)
        if labels is not None:
            self.labels[trial.run] = labels

    def add_declaration(self, name: str, attributes: dict[str, AttributeValue]) -> None:
        """Keep what a run span declares (nothing else of it), or reject the span."""
        declared = {k: v for k, v in attributes.items() if k in names.RUN_SPAN_ATTRIBUTES}
        try:
            suite, point = _labels(declared)
            read = DeclaredRun.read(declared)  # at the door, once: a bad one is rejected alone
            _check_keys(
                {names.RUN_ID: read.declaration.run_id, names.SUITE: suite, names.POINT: point}
            )
        except ValueError as error:
            self.reject(name, error)
            return
        self.declarations.append(read)

    def add_mark(
        self, name: str, ids: SpanIds, attributes: dict[str, AttributeValue], latency: float | None
    ) -> None:
        """Keep a trial span's mark, or reject the span (ids missing, a field malformed)."""
        try:
            if ids is None:
                raise ValueError("a trial span needs its trace and span ids")
            mark = trial_mark(ids[0], ids[1], attributes, latency)
            _check_keys(
                {
                    names.RUN_ID: mark.run,
                    names.CASE_ID: mark.case,
                    names.SUITE: mark.suite,
                    names.POINT: mark.point,
                }
            )
        except ValueError as error:
            self.reject(name, error)
            return
        self.marks.append(mark)

    def add_framework_span(
        self,
        ids: SpanIds,
        parent: str | None,
        start: int,
        attributes: Mapping[str, AttributeValue],
        failed: bool,
    ) -> None:
        """Keep the name facts of a span that is not ours (one without ids cannot be placed)."""
        self.other_spans += 1
        if ids is not None:
            facts = facts_of(ids[1], parent, start, attributes, failed)
            self.framework_spans.append(FrameworkSpan(ids[0], facts))

    def run_ids(self) -> set[str]:
        """The runs its trials, trial spans and run spans name."""
        runs = {trial.run for trial in self.trials} | {mark.run for mark in self.marks}
        return runs | {d.declaration.run_id for d in self.declarations}

    def __reduce__(self) -> tuple[Callable[..., ExportContents], tuple[object, ...]]:
        """How a decoder process hands an ExportContents back: its trials and spans as msgpack,
        encoded and decoded in C (a third of the cost of pickling them one by one, paid on both
        sides)."""
        return (
            _restore,
            (
                _MSGPACK.encode(self.trials),
                self.declarations,
                self.labels,
                _MSGPACK.encode(self.marks),
                _MSGPACK.encode(self.framework_spans),
                self.other_spans,
                self.rejected,
                self.errors,
            ),
        )

    def reject(self, name: str, error: Exception | str) -> None:
        """Count a span of ours that cannot be read; the first few are named."""
        self.rejected += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"span {name[:120]!r}: {error}")


_MSGPACK = msgspec.msgpack.Encoder()
_TRIALS_IN = msgspec.msgpack.Decoder(list[Trial])
_MARKS_IN = msgspec.msgpack.Decoder(list[TrialMark])
_SPANS_IN = msgspec.msgpack.Decoder(list[FrameworkSpan])


def _restore(
    trials: bytes,
    declarations: list[DeclaredRun],
    labels: dict[str, tuple[str | None, str | None]],
    marks: bytes,
    spans: bytes,
    other_spans: int,
    rejected: int,
    errors: list[str],
) -> ExportContents:
    return ExportContents(
        _TRIALS_IN.decode(trials),
        declarations,
        labels,
        _MARKS_IN.decode(marks),
        _SPANS_IN.decode(spans),
        other_spans,
        rejected,
        errors,
    )


SpanIds = tuple[str, str] | None
"""A span's trace id and span id in hex; None when either is missing or all zero."""


def _ids(trace_id: bytes, span_id: bytes) -> SpanIds:
    if len(trace_id) != 16 or len(span_id) != 8 or not any(trace_id) or not any(span_id):
        return None
    return trace_id.hex(), span_id.hex()


def _parent(parent_id: bytes) -> str | None:
    return parent_id.hex() if len(parent_id) == 8 and any(parent_id) else None


def _tolerant(get: Lookup[_V], read: Reader[_V], keys: Iterable[str]) -> dict[str, AttributeValue]:
    """The attributes a framework span is read for; one that cannot be read is left out (the
    span is not ours to reject)."""
    found: dict[str, AttributeValue] = {}
    for key in keys:
        try:
            read(get, (key,), found)
        except ValueError:
            continue
    return found


def _labels(attributes: Mapping[str, AttributeValue]) -> tuple[str | None, str | None]:
    return _label(attributes, names.SUITE), _label(attributes, names.POINT)


def _check_keys(values: Mapping[str, AttributeValue]) -> None:
    """Refuse a run id, case id, suite or point (by attribute, None when absent) over
    MAX_KEY_BYTES."""
    for key, value in values.items():
        if isinstance(value, str) and len(value) * 4 > MAX_KEY_BYTES:  # shorter: never over
            size = len(value.encode())
            if size > MAX_KEY_BYTES:
                raise ValueError(
                    f"{key} is {size:,} bytes of UTF-8; a receiver keeps at most {MAX_KEY_BYTES:,}"
                    " (its store indexes it)"
                )


def _label(attributes: Mapping[str, AttributeValue], key: str) -> str | None:
    value = attributes.get(key)
    if value is not None and type(value) is not str:
        raise ValueError(f"{key} must be a string, got {value!r:.60}")
    return value


def _latency_ms(start: int, end: int) -> float | None:
    """A span's duration in milliseconds; None when its times are missing or reversed."""
    return (end - start) / 1e6 if start and end >= start else None


# What a span of ours is read for. Only these attributes are decoded (and can reject it).
_ALWAYS = (
    names.RUN_ID,
    names.CASE_ID,
    names.TRIAL,
    names.OUTCOME,
    names.CASE_EXPECTED,
    names.PASSED,
    names.INVARIANT_FAILED,
    names.INVARIANT_WARNED,
    names.EVALUATION_SKIPPED,
    names.TIED_STEPS,
    names.CASE_ALIASES,
    names.CASE_KEY_ID,
)
_BY_OUTCOME = {
    "decision": (names.VERDICT, names.TOOLS),
    "no_decision": (names.NO_DECISION_REASON,),
    "error": (names.ERROR_TYPE,),
}
_LABELS = (names.SUITE, names.POINT)
"""Read from a run's first decision span in a request, the one that names the run's labels."""
_DECISION_KEYS = frozenset(
    {*_ALWAYS, *_LABELS, *(key for keys in _BY_OUTCOME.values() for key in keys)}
)
_RUN_KEYS = tuple(sorted(names.RUN_SPAN_ATTRIBUTES))

_V = TypeVar("_V")
_T = TypeVar("_T")

Lookup = Callable[[str], _V | None]
"""A span's attribute value by key, still encoded: a protobuf view's AnyValue, a RawAnyValue, or
an AnyValue object of OTLP/JSON (None when the span has no such attribute)."""
Reader = Callable[[Lookup[_V], Iterable[str], dict[str, AttributeValue]], None]
"""Copies the attributes named by some keys, decoded, from a lookup into a dict."""


def _decision_attributes(
    get: Lookup[_V], read: Reader[_V], labels: Mapping[str, object]
) -> dict[str, AttributeValue]:
    """The attributes a decision span is read for: by its outcome, and its labels if its run has
    none yet (`ExportContents.labels`); any others are never decoded."""
    attributes: dict[str, AttributeValue] = {}
    read(get, _ALWAYS, attributes)
    outcome = attributes.get(names.OUTCOME)
    if type(outcome) is str:
        read(get, _BY_OUTCOME.get(outcome, ()), attributes)
    run = attributes.get(names.RUN_ID)
    if type(run) is not str or run not in labels:
        read(get, _LABELS, attributes)
    return attributes


def _run_attributes(get: Lookup[_V], read: Reader[_V]) -> dict[str, AttributeValue]:
    """The attributes of a run span's declaration; content it may carry is never decoded."""
    attributes: dict[str, AttributeValue] = {}
    read(get, _RUN_KEYS, attributes)
    return attributes


# Protobuf


def _text(text: str | bytes) -> str:
    """A string value as read: UTF-8 (the raw view's bytes are decoded here), not too long."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise ValueError("a string value is not UTF-8") from None
    if len(text) > MAX_ATTRIBUTE_VALUE:
        raise ValueError("attribute value too long")
    if "\x00" in text:  # no store keeps one (PostgreSQL's text refuses it)
        raise ValueError("a string value holds a NUL character")
    return text


def _any_value(value: AnyValue | RawAnyValue, in_array: bool = False) -> AttributeValue:
    """An AnyValue (of either view) as the Python value it holds: None when it is empty, a list
    of scalars for an array. A kvlist, bytes or a nested array makes its span rejected."""
    kind: str | None = value.WhichOneof("value")
    if kind == "string_value":
        return _text(value.string_value)
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    if kind is None:
        return None  # an empty value: as if the attribute were absent
    if kind != "array_value" or in_array:
        raise ValueError(f"a {kind.removesuffix('_value')} value is not read by verdictgate")
    values = value.array_value.values
    if len(values) > MAX_ARRAY_VALUES:
        raise ValueError("array attribute has too many values")
    return [_any_value(item, in_array=True) for item in values]


def _read_map(get: Lookup[AnyValue], keys: Iterable[str], into: dict[str, AttributeValue]) -> None:
    """Copy the attributes named by `keys` out of a map view.

    A non-empty string is taken as it is (the common case: one call); anything else is read by
    its kind, so a value of another type is never mistaken for an empty string.
    """
    for key in keys:
        value = get(key)
        if value is None:
            continue
        text = value.string_value
        if text and len(text) <= MAX_ATTRIBUTE_VALUE and "\x00" not in text:
            into[key] = text
            continue
        kind: str | None = value.WhichOneof("value")
        if kind == "int_value":  # a trial index: the other common case
            into[key] = value.int_value
        elif kind == "bool_value":
            into[key] = value.bool_value
        else:
            decoded = _named(_any_value, value, key)
            if decoded is not None:  # an empty AnyValue: as if the attribute were absent
                into[key] = decoded


def _read_raw(
    get: Lookup[RawAnyValue], keys: Iterable[str], into: dict[str, AttributeValue]
) -> None:
    """Copy the attributes named by `keys` out of a dict of RawAnyValue (strings as bytes)."""
    for key in keys:
        value = get(key)
        if value is not None:
            decoded = _named(_any_value, value, key)
            if decoded is not None:
                into[key] = decoded


def _named(decode: Callable[[_T], AttributeValue], value: _T, key: str) -> AttributeValue:
    """`decode(value)`, its ValueError naming the attribute."""
    try:
        return decode(value)
    except ValueError as error:
        raise ValueError(f"{key}: {error}") from None


_WANTED_DECISION = {key.encode(): key for key in _DECISION_KEYS}
_WANTED_RUN = {key.encode(): key for key in _RUN_KEYS}
_WANTED_MARK = {key.encode(): key for key in TRIAL_MARK_KEYS}
_WANTED_FACTS = {key.encode(): key for key in FACT_KEYS}
_ERROR_STATUS = 2


def _first_wins(entries: Iterable[bytes], wanted: dict[bytes, str]) -> dict[str, RawAnyValue]:
    """The first value of each wanted key among a span's encoded KeyValue entries."""
    found: dict[str, RawAnyValue] = {}
    for entry in entries:
        try:
            pair = RawKeyValue.FromString(entry)
        except DecodeError:
            raise ValueError("an attribute cannot be decoded") from None
        key = wanted.get(pair.key)
        if key is not None and key not in found:
            found[key] = pair.value
    return found


def extract_protobuf(body: bytes) -> ExportContents:
    """Read an `ExportTraceServiceRequest` in protobuf encoding.

    It is parsed twice, both in C: into a view whose attributes are a map, so a decision span
    costs a few lookups by key, not a walk of every attribute; and into a view that counts each
    span's attribute entries. A span of ours with more entries than keys repeats a key, and is
    read entry by entry so that the first one wins. A request whose map view cannot be parsed
    (a string somewhere that is not UTF-8) is read span by span that way (`_extract_entries`).
    """
    try:
        entries = ExportTraceRequestEntries.FromString(body)
    except (DecodeError, ValueError) as error:
        raise MalformedRequest(f"not an OTLP ExportTraceServiceRequest: {error}") from None
    try:
        request = ExportTraceRequestView.FromString(body)
    except (DecodeError, ValueError):
        return _extract_entries(entries)
    extract = ExportContents()
    prefix, run_span = names.DECISION_SPAN_PREFIX, names.RUN_SPAN
    for resource_spans, resource_entries in zip(
        request.resource_spans, entries.resource_spans, strict=True
    ):
        for scope_spans, scope_entries in zip(
            resource_spans.scope_spans, resource_entries.scope_spans, strict=True
        ):
            for span, span_entries in zip(scope_spans.spans, scope_entries.spans, strict=True):
                name = span.name
                is_decision = name.startswith(prefix)
                if is_decision or name == run_span:
                    _take_decision_or_run_span(
                        extract, name, is_decision, span, span_entries.attributes, span.attributes
                    )
                else:
                    _take_trial_or_framework_span(
                        extract, name, span, span_entries.attributes, span.attributes
                    )
    return extract


def _extract_entries(request: ExportTraceRequestEntries) -> ExportContents:
    """Read a request from its entries view, each span of ours entry by entry: a string that is
    not UTF-8 rejects only a span of ours that reads it."""
    extract = ExportContents()
    prefix, run_span = names.DECISION_SPAN_PREFIX.encode(), names.RUN_SPAN.encode()
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                raw_name = span.name
                is_decision = raw_name.startswith(prefix)
                name = raw_name.decode(errors="replace")  # named in messages only
                if is_decision or raw_name == run_span:
                    _take_decision_or_run_span(extract, name, is_decision, span, span.attributes)
                else:
                    _take_trial_or_framework_span(extract, name, span, span.attributes)
    return extract


def _take_decision_or_run_span(
    extract: ExportContents,
    name: str,
    is_decision: bool,
    span: SpanView | SpanEntries,
    entries: Sequence[bytes],
    view: MessageMap[str, AnyValue] | None = None,
) -> None:
    """Read one span of ours into `extract`: through its map `view` when its `entries` repeat
    no key, else entry by entry so that the first one wins. A span that cannot be read is
    rejected alone."""
    try:
        if view is not None and len(entries) == len(view):
            attributes = _ours(view.get, _read_map, is_decision, extract.labels)
        else:
            wanted = _WANTED_DECISION if is_decision else _WANTED_RUN
            found = _first_wins(entries, wanted)
            attributes = _ours(found.get, _read_raw, is_decision, extract.labels)
    except ValueError as error:
        extract.reject(name, error)
        return
    if is_decision:
        latency = _latency_ms(span.start_time_unix_nano, span.end_time_unix_nano)
        extract.add_trial(name, attributes, latency)
    else:
        extract.add_declaration(name, attributes)


def _ours(
    get: Lookup[_V], read: Reader[_V], is_decision: bool, labels: Mapping[str, object]
) -> dict[str, AttributeValue]:
    """The attributes a decision span (`_decision_attributes`) or a run span is read for."""
    if is_decision:
        return _decision_attributes(get, read, labels)
    return _run_attributes(get, read)


def _take_trial_or_framework_span(
    extract: ExportContents,
    name: str,
    span: SpanView | SpanEntries,
    entries: Sequence[bytes],
    view: MessageMap[str, AnyValue] | None = None,
) -> None:
    """Read a span that is not a decision or run span: a harness's trial span (ours: rejected
    when malformed) or any other span, of which only the name facts are kept."""
    ids = _ids(span.trace_id, span.span_id)
    is_mark = name == names.TRIAL_SPAN
    try:
        if view is not None and len(entries) == len(view):
            attributes = _mark_or_facts(view.get, _read_map, is_mark)
        else:
            try:
                found = _first_wins(entries, _WANTED_MARK if is_mark else _WANTED_FACTS)
            except ValueError:
                if is_mark:
                    raise
                found = {}
            attributes = _mark_or_facts(found.get, _read_raw, is_mark)
    except ValueError as error:  # a trial span's only: a framework span's are left out
        extract.reject(name, error)
        return
    if is_mark:
        latency = _latency_ms(span.start_time_unix_nano, span.end_time_unix_nano)
        extract.add_mark(name, ids, attributes, latency)
        return
    extract.add_framework_span(
        ids,
        _parent(span.parent_span_id),
        span.start_time_unix_nano,
        attributes,
        span.status.code == _ERROR_STATUS,
    )


def _mark_or_facts(get: Lookup[_V], read: Reader[_V], is_mark: bool) -> dict[str, AttributeValue]:
    """A trial span's mark (a ValueError when an attribute is malformed), or the name facts of
    a framework span (an attribute that cannot be read is left out: `_tolerant`)."""
    if not is_mark:
        return _tolerant(get, read, FACT_KEYS)
    attributes: dict[str, AttributeValue] = {}
    read(get, TRIAL_MARK_KEYS, attributes)
    return attributes


# OTLP/JSON


def extract_json(body: bytes) -> ExportContents:
    """Read an export request in the OTLP/JSON encoding (camelCase, unknown fields ignored)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:  # also not UTF-8, too deep, too many digits
        raise MalformedRequest(f"invalid JSON: {str(error)[:200]}") from None
    if not isinstance(document, dict):
        raise MalformedRequest("an OTLP/JSON export is an object with resourceSpans")
    extract = ExportContents()
    prefix, run_span = names.DECISION_SPAN_PREFIX, names.RUN_SPAN
    for span in _json_spans(document):
        name = span.get("name")
        if type(name) is not str or not (name.startswith(prefix) or name == run_span):
            _take_json_trial_or_framework_span(extract, name if type(name) is str else "", span)
            continue
        try:
            if name == run_span:
                found = _json_first_wins(span.get("attributes"), names.RUN_SPAN_ATTRIBUTES)
                extract.add_declaration(name, _run_attributes(found.get, _read_json))
            else:
                found = _json_first_wins(span.get("attributes"), _DECISION_KEYS)
                attributes = _decision_attributes(found.get, _read_json, extract.labels)
                extract.add_trial(name, attributes, _json_latency(span))
        except ValueError as error:
            extract.reject(name, error)
    return extract


def _take_json_trial_or_framework_span(
    extract: ExportContents, name: str, span: JsonObject
) -> None:
    """`_take_trial_or_framework_span` for a span of an OTLP/JSON request (ids in hex, status
    code 2 or its name)."""
    ids = _json_ids(span.get("traceId"), span.get("spanId"))
    if name == names.TRIAL_SPAN:
        try:
            found = _json_first_wins(span.get("attributes"), TRIAL_MARK_KEYS)
            attributes: dict[str, AttributeValue] = {}
            _read_json(found.get, TRIAL_MARK_KEYS, attributes)
        except ValueError as error:
            extract.reject(name, error)
            return
        extract.add_mark(name, ids, attributes, _json_latency(span))
        return
    try:
        found = _json_first_wins(span.get("attributes"), FACT_KEYS)
    except ValueError:
        found = {}
    parent = _json_ids(span.get("traceId"), span.get("parentSpanId"))
    status = span.get("status")
    code = status.get("code") if isinstance(status, dict) else None
    try:
        start = _json_integer(span.get("startTimeUnixNano", 0), "startTimeUnixNano", _UINT64)
    except ValueError as error:  # a start out of range would sink the request's commit
        extract.reject(name, error)
        return
    extract.add_framework_span(
        ids,
        parent[1] if parent else None,
        start,
        _tolerant(found.get, _read_json, FACT_KEYS),
        code in (_ERROR_STATUS, "STATUS_CODE_ERROR"),
    )


def _json_ids(trace_id: JsonValue, span_id: JsonValue) -> SpanIds:
    """Hex ids of OTLP/JSON (16 and 8 bytes); None when either is missing or malformed."""
    try:
        return _ids(bytes.fromhex(trace_id), bytes.fromhex(span_id))
    except (TypeError, ValueError):
        return None


def _json_spans(document: JsonObject) -> Iterator[JsonObject]:
    for resource_spans in _json_list(document.get("resourceSpans")):
        for scope_spans in _json_list(resource_spans.get("scopeSpans")):
            yield from _json_list(scope_spans.get("spans"))


def _json_list(value: JsonValue) -> list[JsonObject]:
    if value is None:
        return []
    if type(value) is not list or not all(type(item) is dict for item in value):
        raise MalformedRequest("expected a list of objects in resourceSpans")
    return value


def _json_first_wins(items: JsonValue, wanted: Iterable[str]) -> JsonObject:
    """The first value of each wanted key among a span's `attributes` (KeyValue objects); an item
    that names no key is not one of ours, and is skipped like any other."""
    if items is None:
        return {}
    if type(items) is not list:
        raise ValueError("attributes is not a list")
    found: JsonObject = {}
    for item in items:
        if type(item) is dict:
            key = item.get("key")
            if type(key) is str and key in wanted and key not in found:
                found[key] = item.get("value")
    return found


def _read_json(
    get: Lookup[JsonValue], keys: Iterable[str], into: dict[str, AttributeValue]
) -> None:
    for key in keys:
        value = get(key)
        if value is not None:
            decoded = _json_value(value, key)
            if decoded is not None:
                into[key] = decoded


_JSON_KINDS = ("stringValue", "intValue", "doubleValue", "boolValue", "arrayValue")
_JSON_UNREAD = ("kvlistValue", "bytesValue")
_JSON_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _json_value(value: JsonValue, key: str, in_array: bool = False) -> AttributeValue:
    """An AnyValue object as the Python value it holds (None: empty), typed strictly."""
    if type(value) is not dict:
        raise ValueError(f"{key}: a value is an object, got {value!r:.60}")
    kinds = [kind for kind in value if value[kind] is not None and kind in _JSON_KINDS]
    if not kinds:
        for kind in _JSON_UNREAD:
            if value.get(kind) is not None:
                raise ValueError(f"{key}: a {kind} is not read by verdictgate")
        return None
    if len(kinds) > 1:
        raise ValueError(f"{key}: a value holds one of {', '.join(_JSON_KINDS)}")
    kind = kinds[0]
    item = value[kind]
    if kind == "stringValue":
        if type(item) is not str:
            raise ValueError(f"{key}: stringValue must be a string, got {item!r:.60}")
        if len(item) > MAX_ATTRIBUTE_VALUE:
            raise ValueError("attribute value too long")
        if "\x00" in item:
            raise ValueError(f"{key}: a string holds a NUL character")
        if not item.isascii():
            try:
                item.encode()
            except UnicodeEncodeError:
                raise ValueError(f"{key}: a string holds a lone surrogate") from None
        return item
    if kind == "intValue":
        return _json_integer(item, key, _INT64)
    if kind == "doubleValue":
        return _json_double(item, key)
    if kind == "boolValue":
        if type(item) is not bool:
            raise ValueError(f"{key}: boolValue must be true or false, got {item!r:.60}")
        return item
    if in_array:
        raise ValueError(f"{key}: an array attribute holds scalars only")
    if type(item) is not dict:
        raise ValueError(f"{key}: arrayValue is an object, got {item!r:.60}")
    values = item.get("values")
    if values is None:
        values = []
    if type(values) is not list:
        raise ValueError(f"{key}: arrayValue holds a list of values")
    if len(values) > MAX_ARRAY_VALUES:
        raise ValueError("array attribute has too many values")
    return [_json_value(element, key, in_array=True) for element in values]


def _json_integer(value: JsonValue, key: str, bounds: tuple[int, int]) -> int:
    """A protobuf JSON 64-bit integer: a JSON integer, or a string of one (how exporters write
    it). `1_000`, ` 12`, `+1`, `012`, `3.7`, `true` and values out of bounds are refused."""
    if type(value) is int:
        number = value
    elif type(value) is str and len(value) <= 21 and _JSON_INTEGER.fullmatch(value):
        number = int(value)
    else:
        raise ValueError(f"{key}: not an integer: {value!r:.60}")
    low, high = bounds
    if not low <= number <= high:
        raise ValueError(f"{key}: integer out of range: {number!r:.60}")
    return number


_JSON_SPECIAL_DOUBLES = frozenset({"NaN", "Infinity", "-Infinity"})


def _json_double(value: JsonValue, key: str) -> float:
    """A protobuf JSON double: a JSON number, a string of one, or NaN / Infinity / -Infinity."""
    if type(value) is float:
        return value
    if type(value) is str and (
        value in _JSON_SPECIAL_DOUBLES or (len(value) <= 64 and _JSON_NUMBER.fullmatch(value))
    ):
        return float(value)
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            raise ValueError(f"{key}: number out of range") from None
    raise ValueError(f"{key}: not a number: {value!r:.60}")


def _json_latency(span: JsonObject) -> float | None:
    """Duration from the span's `startTimeUnixNano` / `endTimeUnixNano` (strings of digits);
    None when either is missing or not a uint64."""
    try:
        start = _json_integer(span.get("startTimeUnixNano", 0), "start", _UINT64)
        end = _json_integer(span.get("endTimeUnixNano", 0), "end", _UINT64)
    except ValueError:
        return None
    return _latency_ms(start, end)
