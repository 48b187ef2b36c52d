"""Validation at the door (issue 12): every decision and run span is checked when it arrives, a
bad one is rejected alone through OTLP partial success, and the rest of its request is kept."""

from __future__ import annotations

import contextlib
import json
import math
import pickle
import urllib.error
import urllib.request

import grpc
import pytest
from google.protobuf.json_format import MessageToJson
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from receiver_support import (
    any_value,
    decision_span,
    request,
    run_span,
    running_server,
    span,
    stable_run,
)
from verdictgate import Trial
from verdictgate.evidence import MAX_TRIAL_INDEX
from verdictgate.otel import conventions as names
from verdictgate.otel.otlp_reading import (
    MAX_ATTRIBUTE_VALUE,
    ExportContents,
    MalformedRequest,
    extract_json,
    extract_protobuf,
)
from verdictgate.v1.otlp_view_pb2 import ExportTraceRequestView

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
KEPT = Trial("c-kept", 0, "approve", "r", "approve")
"""The trial of `kept()`: a valid decision span beside every bad one."""


def kept() -> Span:
    return decision_span("r", "c-kept", 0, "approve", "approve")


def decision(index=0, verdict="approve", **replace) -> Span:
    """A decision span of run r, case c, with some attributes replaced (None: removed)."""
    one = decision_span("r", "c", 0, verdict, "approve")
    return patched(one, {names.TRIAL: index, **replace})


def patched(one: Span, replace: dict) -> Span:
    """`one` with attributes replaced by key (a value, an AnyValue, or None to remove)."""
    items = [item for item in one.attributes if item.key not in replace]
    for key, value in replace.items():
        if value is not None:
            items.append(KeyValue(key=key, value=as_any(value)))
    del one.attributes[:]
    one.attributes.extend(items)
    return one


def as_any(value) -> AnyValue:
    return value if isinstance(value, AnyValue) else any_value(value)


def both(spans: list[Span]) -> list[ExportContents]:
    """What the receiver reads from these spans through protobuf and through OTLP/JSON."""
    body = request(spans)
    return [extract_protobuf(body.SerializeToString()), extract_json(MessageToJson(body).encode())]


def summary(extract: ExportContents) -> tuple:
    return (
        extract.trials,
        extract.declarations,
        extract.labels,
        extract.rejected,
        extract.other_spans,
    )


def assert_rejected_alone(extracts: list[ExportContents], why: str = "") -> None:
    for got in extracts:
        assert got.rejected == 1 and got.trials == [KEPT], got.errors
        assert why in got.errors[0]


# The trial index


@pytest.mark.parametrize(
    "index",
    [
        MAX_TRIAL_INDEX + 1,
        1 << 40,
        (1 << 63) - 1,
        -1,
        -(1 << 63),
        AnyValue(double_value=3.7),
        AnyValue(double_value=3.0),
        AnyValue(double_value=math.nan),
        AnyValue(bool_value=True),
        AnyValue(string_value="1000"),
        AnyValue(string_value="1_000"),
        AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1)])),
        AnyValue(bytes_value=b"\x01"),
        AnyValue(kvlist_value=KeyValueList()),
        AnyValue(),
        None,
    ],
)
def test_a_trial_index_that_is_not_an_integer_in_range_rejects_its_span_alone(index):
    assert_rejected_alone(both([decision(index), kept()]), names.TRIAL)


def test_the_largest_trial_index_is_kept():
    for got in both([decision(MAX_TRIAL_INDEX)]):
        assert got.rejected == 0 and got.trials[0].index == MAX_TRIAL_INDEX


def json_decision(index_value: dict, **extra: dict) -> dict:
    """A decision span in OTLP/JSON whose trial index is written as `index_value`."""
    attributes = {
        names.RUN_ID: {"stringValue": "r"},
        names.CASE_ID: {"stringValue": "c"},
        names.TRIAL: index_value,
        names.OUTCOME: {"stringValue": "decision"},
        names.VERDICT: {"stringValue": "approve"},
        **extra,
    }
    return {
        "name": "decide approval_gate",
        "attributes": [{"key": key, "value": value} for key, value in attributes.items()],
    }


def json_body(*spans: dict) -> bytes:
    kept_json = json.loads(MessageToJson(request([kept()])))
    kept_json["resourceSpans"][0]["scopeSpans"][0]["spans"][:0] = list(spans)
    return json.dumps(kept_json).encode()


@pytest.mark.parametrize(("written", "index"), [("12", 12), (12, 12), ("0", 0), ("-0", 0)])
def test_otlp_json_reads_an_integer_written_as_a_string_or_a_number(written, index):
    got = extract_json(json_body(json_decision({"intValue": written})))
    assert got.rejected == 0 and got.trials[0].index == index


@pytest.mark.parametrize(
    "written",
    [
        "1_000",
        " 12",
        "12 ",
        "+12",
        "012",
        "3.7",
        "1e3",
        "0x10",
        "١٢",
        "",
        3.7,
        12.0,
        True,
        None,
        [12],
        {"v": 12},
        str(1 << 63),
        1 << 63,
        str(1 << 64),
        1 << 64,
        str(-(1 << 63) - 1),
        10**400,
        "9" * 5000,
    ],
)
def test_otlp_json_refuses_an_integer_that_is_not_one(written):
    value = {"intValue": written} if written is not None else {"intValue": None, "x": 1}
    got = extract_json(json_body(json_decision(value)))
    assert got.rejected == 1 and got.trials == [KEPT], got.errors
    assert names.TRIAL in got.errors[0]


@pytest.mark.parametrize(
    "value",
    [
        {"doubleValue": 3.0},
        {"doubleValue": "3"},
        {"boolValue": True},
        {"stringValue": "3"},
        {"intValue": "3", "stringValue": "3"},
        {"kvlistValue": {"values": []}},
        {"bytesValue": "AQ=="},
        {"arrayValue": {"values": [{"intValue": "3"}]}},
        "3",
        3,
        [],
    ],
)
def test_otlp_json_refuses_a_trial_index_of_another_type(value):
    got = extract_json(json_body(json_decision(value)))
    assert got.rejected == 1 and got.trials == [KEPT], got.errors


# Outcome, verdict and the fields the trial uses


@pytest.mark.parametrize(
    ("replace", "why"),
    [
        ({names.OUTCOME: None}, names.OUTCOME),
        ({names.OUTCOME: "maybe"}, names.OUTCOME),
        ({names.OUTCOME: ""}, names.OUTCOME),
        ({names.OUTCOME: 1}, names.OUTCOME),
        ({names.OUTCOME: ["decision"]}, names.OUTCOME),
        ({names.VERDICT: ""}, names.VERDICT),
        ({names.VERDICT: "  "}, names.VERDICT),
        ({names.VERDICT: 7}, names.VERDICT),
        ({names.VERDICT: True}, names.VERDICT),
        ({names.VERDICT: ["approve"]}, names.VERDICT),
        ({names.VERDICT: None}, names.TOOLS),
        ({names.VERDICT: None, names.TOOLS: "search"}, names.TOOLS),
        ({names.VERDICT: None, names.TOOLS: ["search", 3]}, names.VERDICT),
        ({names.VERDICT: None, names.TOOLS: ["search", ""]}, names.VERDICT),
        ({names.VERDICT: None, names.TOOLS: [["search"]]}, names.TOOLS),
        ({names.CASE_EXPECTED: 5}, names.CASE_EXPECTED),
        ({names.CASE_EXPECTED: ["approve"]}, names.CASE_EXPECTED),
        ({names.PASSED: "true"}, names.PASSED),
        ({names.PASSED: 1}, names.PASSED),
        ({names.EVALUATION_SKIPPED: "yes"}, names.EVALUATION_SKIPPED),
        ({names.INVARIANT_FAILED: [1, 2]}, names.INVARIANT_FAILED),
        ({names.INVARIANT_WARNED: 3}, names.INVARIANT_WARNED),
        ({names.RUN_ID: 5}, names.RUN_ID),
        ({names.RUN_ID: ""}, names.RUN_ID),
        ({names.CASE_ID: None}, names.CASE_ID),
        ({names.SUITE: 5}, names.SUITE),
        ({names.POINT: ["approval_gate"]}, names.POINT),
        ({names.VERDICT: "x" * (MAX_ATTRIBUTE_VALUE + 1)}, "too long"),
        ({names.INVARIANT_FAILED: ["x"] * 257}, "too many"),
        ({names.CASE_EXPECTED: AnyValue(bytes_value=b"approve")}, "bytes"),
    ],
)
def test_a_decision_span_with_a_missing_or_mistyped_field_is_rejected_alone(replace, why):
    assert_rejected_alone(both([decision(**replace), kept()]), why)


@pytest.mark.parametrize(
    ("outcome", "field", "value", "why"),
    [
        ("no_decision", names.NO_DECISION_REASON, 3, names.NO_DECISION_REASON),
        ("no_decision", names.NO_DECISION_REASON, ["refused"], names.NO_DECISION_REASON),
        ("error", names.ERROR_TYPE, 500, names.ERROR_TYPE),
        ("error", names.ERROR_TYPE, True, names.ERROR_TYPE),
    ],
)
def test_a_reason_or_error_type_that_is_not_a_string_is_rejected(outcome, field, value, why):
    one = decision(**{names.OUTCOME: outcome, names.VERDICT: None, field: value})
    assert_rejected_alone(both([one, kept()]), why)


def test_attributes_the_outcome_does_not_use_are_never_read():
    error = decision(**{names.OUTCOME: "error", names.ERROR_TYPE: "Timeout", names.VERDICT: 7})
    refusal = decision(**{names.OUTCOME: "no_decision", names.TOOLS: AnyValue(bytes_value=b"x")})
    content = decision(**{"gen_ai.output.messages": AnyValue(kvlist_value=KeyValueList())})
    for got in both([error, refusal, content]):
        assert got.rejected == 0, got.errors
        assert [trial.outcome.value for trial in got.trials] == ["error", "no_decision", "decision"]
        assert got.trials[0].error_type == "Timeout"


def test_a_span_not_named_as_ours_is_another_span_whatever_it_holds():
    junk = span("GET /decide", {names.TRIAL: 1 << 40, names.OUTCOME: 5})
    for got in both([junk, kept()]):
        assert (got.rejected, got.other_spans, got.trials) == (0, 1, [KEPT])


def test_a_runs_labels_are_read_from_its_first_decision_span_the_one_that_names_them():
    later = decision(1, **{names.SUITE: 5, names.POINT: AnyValue(kvlist_value=KeyValueList())})
    for got in both([kept(), later]):
        assert got.rejected == 0 and got.labels == {"r": ("gate", "approval_gate")}
    for got in both([later, kept()]):
        assert got.rejected == 1 and got.labels == {"r": ("gate", "approval_gate")}


# Duplicate keys: the first wins, as the OpenTelemetry Collector reads them


def with_duplicates(one: Span, *pairs: tuple[str, object]) -> Span:
    one.attributes.extend(KeyValue(key=key, value=as_any(value)) for key, value in pairs)
    return one


@pytest.mark.parametrize(
    ("first", "then", "index"),
    [(5, 7, 5), (5, MAX_TRIAL_INDEX + 1, 5), (5, "seven", 5), (MAX_TRIAL_INDEX + 1, 5, None)],
)
def test_of_two_attributes_with_one_key_the_first_wins(first, then, index):
    one = with_duplicates(decision(first), (names.TRIAL, then))
    for got in both([one, kept()]):
        if index is None:
            assert got.rejected == 1 and got.trials == [KEPT]
        else:
            assert got.rejected == 0 and got.trials[0].index == index


def test_the_first_outcome_and_verdict_win_and_a_repeated_unread_key_changes_nothing():
    one = with_duplicates(
        decision(**{names.OUTCOME: "error", names.VERDICT: None, names.ERROR_TYPE: "Timeout"}),
        (names.OUTCOME, "decision"),
        (names.VERDICT, "deny"),
        (names.ERROR_TYPE, 5),
        ("http.route", "/a"),
        ("http.route", "/b"),
    )
    plain = with_duplicates(decision(3), ("http.route", "/a"), ("http.route", "/b"))
    for got in both([one, plain]):
        assert got.rejected == 0, got.errors
        assert got.trials[0] == Trial("c", 0, None, "r", "approve", "Timeout")
        assert got.trials[1].index == 3 and got.trials[1].decision == "approve"


def test_the_first_of_a_run_spans_repeated_attributes_wins():
    declared = with_duplicates(run_span("r", planned=8), (names.PLAN_TRIALS, 1_000_000))
    malformed_second = with_duplicates(run_span("s", planned=8), (names.PLAN_TRIALS, "ten"))
    for got in both([declared, malformed_second]):
        assert got.rejected == 0, got.errors
        assert [d.attributes[names.PLAN_TRIALS] for d in got.declarations] == [8, 8]


# Strings that are not UTF-8


def with_bytes(body: bytes, marker: str, raw: bytes) -> bytes:
    """A protobuf body with one string replaced by bytes of the same length (protobuf's own
    classes refuse to encode a string that is not UTF-8)."""
    assert len(raw) == len(marker.encode()) and body.count(marker.encode()) == 1
    return body.replace(marker.encode(), raw)


BAD = b"\xff\xfe\xc3("  # never UTF-8: a stray continuation and a lead byte without its tail


def test_a_string_that_is_not_utf8_in_another_span_is_ignored():
    other = span("GET /", {"http.route": "@@@@", "@@key": "v"})
    other.name = "%%%%"
    body = request([other, kept()]).SerializeToString()
    body = with_bytes(with_bytes(with_bytes(body, "@@@@", BAD), "@@key", b"\x80" * 5), "%%%%", BAD)
    got = extract_protobuf(body)
    assert (got.rejected, got.other_spans, got.trials) == (0, 1, [KEPT])


@pytest.mark.parametrize(
    "field", [names.RUN_ID, names.CASE_ID, names.VERDICT, names.CASE_EXPECTED, names.SUITE]
)
def test_a_string_that_is_not_utf8_rejects_the_span_that_reads_it_alone(field):
    body = request([decision(**{field: "@@@@"}), kept()]).SerializeToString()
    got = extract_protobuf(with_bytes(body, "@@@@", BAD))
    assert got.rejected == 1 and got.trials == [KEPT] and "UTF-8" in got.errors[0]


def test_a_string_that_is_not_utf8_and_not_read_leaves_its_decision_span_whole():
    content = decision(5, **{"gen_ai.output.messages": "@@@@", "@@key": "v"})
    content.name = "decide %%%%"
    unread_verdict = decision(6, **{names.OUTCOME: "error", names.VERDICT: "@@@@@@"})
    body = request([content, unread_verdict, kept()]).SerializeToString()
    body = with_bytes(with_bytes(body, "@@@@@@", b"\xc0" * 6), "@@key", b"\xed\xa0\x80@@")
    got = extract_protobuf(with_bytes(with_bytes(body, "@@@@", BAD), "%%%%", BAD))
    assert got.rejected == 0, got.errors
    assert [trial.index for trial in got.trials] == [5, 6, 0]


def test_a_run_span_with_content_that_is_not_utf8_keeps_its_declaration():
    noisy = patched(run_span("r", planned=8), {"gen_ai.input.messages": "@@@@"})
    bad_id = patched(run_span("s", planned=8), {names.RUN_ID: "@@@@@"})
    body = request([noisy, bad_id, kept()]).SerializeToString()
    got = extract_protobuf(with_bytes(with_bytes(body, "@@@@@", b"s\xff\xff\xff\xff"), "@@@@", BAD))
    assert got.rejected == 1 and "UTF-8" in got.errors[0] and got.trials == [KEPT]
    assert [d.attributes[names.RUN_ID] for d in got.declarations] == ["r"]


def test_a_lone_surrogate_in_otlp_json_rejects_the_span_that_reads_it_alone():
    bad = json_decision({"intValue": "1"}, **{names.CASE_EXPECTED: {"stringValue": "\ud800"}})
    unread = json_decision({"intValue": "2"}, **{"gen_ai.prompt": {"stringValue": "\udfff"}})
    other = {"name": "\ud800", "attributes": [{"key": "x", "value": {"stringValue": "\ud800"}}]}
    got = extract_json(json_body(bad, unread, other))
    assert (got.rejected, got.other_spans) == (1, 1) and "surrogate" in got.errors[0]
    assert [trial.index for trial in got.trials] == [2, 0]


@pytest.mark.parametrize("field", [names.RUN_ID, names.CASE_ID, names.VERDICT, names.SUITE])
def test_a_nul_character_rejects_the_span_that_reads_it_alone_in_either_encoding(field):
    """No store keeps one (PostgreSQL's text refuses it): the door refuses it, the same for
    either store, rather than the store failing the request for every retry."""
    got = extract_protobuf(request([decision(**{field: "a\x00b"}), kept()]).SerializeToString())
    assert got.rejected == 1 and got.trials == [KEPT] and "NUL" in got.errors[0]
    bad = json_decision({"intValue": "1"}, **{field: {"stringValue": "a\x00b"}})
    got = extract_json(json_body(bad))
    assert got.rejected == 1 and "NUL" in got.errors[0] and got.trials == [KEPT]


# Malformed bodies: a MalformedRequest, never another exception


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 5000 + b"]" * 5000,
        b'{"resourceSpans": ' + b"[" * 100_000,
        b'{"resourceSpans": [' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"]}",
        b'{"resourceSpans": [{"scopeSpans": 5}]}',
        b'{"resourceSpans": [1]}',
        b'{"resourceSpans": {}}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": ["decide x"]}]}]}',
        b'{"x": ' + b"9" * 5000 + b"}",
        b'{"x": 1e999999}' + b"\xff",
        b"\xff\xfe\x00\x00",
        b"\xef\xbb\xbf{}",
        "{}".encode("utf-16"),
        b"null",
        b"",
    ],
)
def test_pathological_json_is_a_malformed_request_or_is_read(body):
    try:
        got = extract_json(body)
    except MalformedRequest:
        return
    assert got.trials == [] and got.rejected == 0


def test_json_nested_deep_inside_a_span_of_ours_rejects_that_span_alone():
    deep: dict = {"stringValue": "approve"}
    for _ in range(200):
        deep = {"arrayValue": {"values": [deep]}}
    not_object = json_decision({"intValue": "1"})
    not_object["attributes"] = {"key": names.TRIAL}
    junk_items = json_decision({"intValue": "2"})
    junk_items["attributes"][:0] = [5, None, {"key": 7}, {"value": {}}, {"key": ["a"]}]
    got = extract_json(
        json_body(json_decision({"intValue": "3"}, **{names.VERDICT: deep}), not_object, junk_items)
    )
    assert got.rejected == 2 and [trial.index for trial in got.trials] == [2, 0], got.errors


def test_protobuf_nested_arrays_reject_a_span_that_reads_them_and_are_ignored_elsewhere():
    nested = AnyValue(array_value=ArrayValue(values=[any_value(["a"])]))
    for _ in range(20):
        nested = AnyValue(array_value=ArrayValue(values=[nested]))
    read = decision(**{names.VERDICT: None, names.TOOLS: nested})
    unread = decision(4, **{"x": nested})
    for got in both([read, unread, kept()]):
        assert got.rejected == 1 and [trial.index for trial in got.trials] == [4, 0]


def test_a_body_that_is_no_export_request_is_malformed():
    for body in (b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05\x12\x03\x12\x01", b"\x08"):
        with pytest.raises(MalformedRequest):
            extract_protobuf(body)


# Run spans: the same strict typing


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (names.PLAN_TRIALS, {"intValue": "1_000"}),
        (names.PLAN_TRIALS, {"intValue": 8.0}),
        (names.PLAN_TRIALS, {"doubleValue": 8}),
        (names.PLAN_TRIALS, {"intValue": True}),
        (names.PLAN_TRIALS, {"intValue": str(1 << 64)}),
        (names.PLAN_CASES, {"stringValue": "4"}),
        (names.TOLERANCE, {"doubleValue": "0.05 "}),
        (names.TOLERANCE, {"boolValue": True}),
        (names.SUITE, {"intValue": "5"}),
        (names.POINT, {"arrayValue": {"values": [{"stringValue": "p"}]}}),
        (names.ISOLATION, {"kvlistValue": {}}),
    ],
)
def test_a_run_span_with_a_mistyped_attribute_is_rejected_alone(field, value):
    document = json.loads(MessageToJson(request([run_span("r", planned=8), kept()])))
    run = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    run["attributes"] = [item for item in run["attributes"] if item["key"] != field]
    run["attributes"].append({"key": field, "value": value})
    got = extract_json(json.dumps(document).encode())
    assert got.rejected == 1 and got.declarations == [] and got.trials == [KEPT], got.errors


def test_otlp_json_reads_doubles_as_the_protobuf_json_mapping_writes_them():
    one = run_span("r", planned=8)
    document = json.loads(MessageToJson(request([one])))
    attributes = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    for item in attributes:
        if item["key"] == names.TOLERANCE:
            item["value"] = {"doubleValue": "0.05"}
    attributes.append({"key": names.MAX_P95_MS, "value": {"doubleValue": 5000}})  # a JSON integer
    attributes.append({"key": names.PASS_RATE_REQUIRED, "value": {"doubleValue": "9e-1"}})
    got = extract_json(json.dumps(document).encode())
    assert got.rejected == 0, got.errors
    declared = got.declarations[0].attributes
    assert (declared[names.TOLERANCE], declared[names.MAX_P95_MS]) == (0.05, 5000.0)
    assert type(declared[names.MAX_P95_MS]) is float and declared[names.PASS_RATE_REQUIRED] == 0.9


# Properties


OUR_KEYS = sorted(
    {
        names.RUN_ID,
        names.CASE_ID,
        names.TRIAL,
        names.OUTCOME,
        names.VERDICT,
        names.TOOLS,
        names.NO_DECISION_REASON,
        names.ERROR_TYPE,
        names.CASE_EXPECTED,
        names.PASSED,
        names.INVARIANT_FAILED,
        names.INVARIANT_WARNED,
        names.EVALUATION_SKIPPED,
        names.SUITE,
        names.POINT,
        *names.RUN_SPAN_ATTRIBUTES,
    }
)
keys = st.sampled_from([*OUR_KEYS, "http.route", ""])
texts = st.one_of(
    st.sampled_from(["decision", "no_decision", "error", "approve", "", " ", "fresh-session"]),
    st.text(max_size=6),
    st.just("x" * (MAX_ATTRIBUTE_VALUE + 1)),
)
scalars = st.one_of(
    texts.map(lambda text: AnyValue(string_value=text)),
    st.one_of(
        st.sampled_from([0, 1, MAX_TRIAL_INDEX, MAX_TRIAL_INDEX + 1, -1, (1 << 63) - 1]),
        st.integers(-(1 << 63), (1 << 63) - 1),
    ).map(lambda number: AnyValue(int_value=number)),
    st.floats().map(lambda number: AnyValue(double_value=number)),
    st.booleans().map(lambda flag: AnyValue(bool_value=flag)),
    st.binary(max_size=3).map(lambda raw: AnyValue(bytes_value=raw)),
    st.just(AnyValue()),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda vs: AnyValue(array_value=ArrayValue(values=vs))),
        st.lists(st.tuples(keys, inner), max_size=2).map(
            lambda pairs: AnyValue(
                kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in pairs])
            )
        ),
    ),
    max_leaves=6,
)
attribute_lists = st.lists(st.tuples(keys, values), max_size=12)


def junk_span(name: str, pairs: list[tuple[str, AnyValue]], start: int, end: int) -> Span:
    return Span(
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=[KeyValue(key=key, value=value) for key, value in pairs],
    )


UNREAD = "~" * 12
"""In the name of the junk requests' other span, and nowhere else in them (their strings have
at most 6 characters), so that `with_bytes` can make that name bytes that are not UTF-8."""


@st.composite
def junk_requests(draw) -> ExportTraceServiceRequest:
    """A valid decision span beside three spans with arbitrary attributes: decision, run, other."""
    times = st.integers(0, (1 << 64) - 1)
    spans = [
        junk_span("decide x", draw(attribute_lists), draw(times), draw(times)),
        kept(),
        junk_span(names.RUN_SPAN, draw(attribute_lists), 0, 0),
        junk_span(f"GET /{UNREAD}", draw(attribute_lists), 0, 0),
    ]
    return request(draw(st.permutations(spans)))


@settings(max_examples=400, deadline=None)
@given(junk_requests())
def test_any_attributes_reject_at_most_their_own_span_and_both_encodings_agree(body):
    encoded = body.SerializeToString()
    from_protobuf = extract_protobuf(encoded)
    from_json = extract_json(MessageToJson(body).encode())
    # with the other span's name not UTF-8, the map view cannot parse the request, so it is
    # read entry by entry: the same spans must read the same that way
    unreadable = with_bytes(encoded, UNREAD, BAD * 3)
    with pytest.raises((DecodeError, ValueError)):
        ExportTraceRequestView.FromString(unreadable)
    from_entries = extract_protobuf(unreadable)
    # repr: a NaN a declaration may hold is equal to itself only there
    assert repr(summary(from_protobuf)) == repr(summary(from_json)) == repr(summary(from_entries))
    assert KEPT in from_protobuf.trials and from_protobuf.other_spans == 1
    ours = len(from_protobuf.trials) + len(from_protobuf.declarations) + from_protobuf.rejected
    assert ours == 3
    for declaration in from_protobuf.declarations:
        json.dumps(declaration.attributes)  # a declaration is stored as JSON
    # what a decoder process hands back is what it read
    assert repr(pickle.loads(pickle.dumps(from_protobuf))) == repr(from_protobuf)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=8,
)
any_value_json = st.fixed_dictionaries(
    {},
    optional={
        kind: json_values
        for kind in ("stringValue", "intValue", "doubleValue", "boolValue", "arrayValue")
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(keys, any_value_json | json_values), max_size=10), json_values)
def test_any_json_attribute_values_reject_at_most_their_own_span(pairs, junk_span_json):
    attributes = [{"key": key, "value": value} for key, value in pairs]
    spans = [
        {"name": "decide x", "attributes": attributes},
        {"name": names.RUN_SPAN, "attributes": attributes},
        {"name": "GET /", "attributes": junk_span_json},
        {"name": "decide y", "attributes": junk_span_json},
    ]
    got = extract_json(json_body(*spans))
    assert KEPT in got.trials and got.other_spans == 1
    assert len(got.trials) + len(got.declarations) + got.rejected == 4


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_damage_to_a_body_is_a_malformed_request_or_is_read(data):
    body = bytearray(
        request([run_span("r", 8), *stable_run("r", 1, 2), kept()]).SerializeToString()
    )
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at : at + 1] = data.draw(st.binary(min_size=0, max_size=3))
    for decode in (extract_protobuf, extract_json):
        try:
            got = decode(bytes(body))
        except MalformedRequest:
            continue
        assert len(got.trials) + len(got.declarations) + got.rejected <= 4


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_document_is_a_malformed_request_or_is_read(document):
    for body in (json.dumps(document).encode(), json.dumps({"resourceSpans": document}).encode()):
        with contextlib.suppress(MalformedRequest):
            extract_json(body)


# Over the wire


def post(url: str, body: bytes, content_type: str = "application/x-protobuf"):
    headers = {"Content-Type": content_type}
    try:
        return urllib.request.urlopen(urllib.request.Request(url, body, headers, method="POST"))
    except urllib.error.HTTPError as error:
        return error


def grpc_export(server, body: bytes) -> ExportTraceServiceResponse:
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    try:
        export = channel.unary_unary(
            TRACE_EXPORT,
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        return export(body, timeout=10)
    finally:
        channel.close()


def http_export(server, body: bytes) -> ExportTraceServiceResponse:
    reply = post(f"http://127.0.0.1:{server.http_port}/v1/traces", body)
    assert reply.status == 200
    return ExportTraceServiceResponse.FromString(reply.read())


@pytest.mark.parametrize("export", [grpc_export, http_export])
def test_an_index_out_of_range_is_rejected_and_every_run_in_the_store_still_finishes(
    export, cli, tmp_path
):
    poison = decision_span("ok", "c0", MAX_TRIAL_INDEX + 1, "approve", "approve")
    with running_server(tmp_path / "store.sqlite") as server:
        body = request([run_span("ok", 80), poison, *stable_run("ok")]).SerializeToString()
        answer = export(server, body)
        assert answer.partial_success.rejected_spans == 1
        assert names.TRIAL in answer.partial_success.error_message
        other = request([run_span("other", 80), *stable_run("other")]).SerializeToString()
        assert not export(server, other).HasField("partial_success")
        for run_id in ("ok", "other"):
            assert server.receiver.store.run(run_id).final
        report = cli(
            "status",
            "--endpoint",
            f"127.0.0.1:{server.grpc_port}",
            "--run",
            "ok",
            "--format",
            "json",
        )
        assert json.loads(report.stdout)["trials"]["received"] == 80
        runs = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/v1/runs").read()
        )
        assert {run["run_id"] for run in runs["runs"]} == {"ok", "other"}


@pytest.mark.parametrize("export", [grpc_export, http_export])
def test_a_span_that_is_not_utf8_is_rejected_alone_over_the_wire(export):
    body = request([decision(**{names.CASE_ID: "@@@@"}), kept()]).SerializeToString()
    with running_server() as server:
        answer = export(server, with_bytes(body, "@@@@", BAD))
        assert answer.partial_success.rejected_spans == 1
        assert "UTF-8" in answer.partial_success.error_message
        assert server.receiver.store.run("r").received == 1


@pytest.mark.parametrize("export", [grpc_export, http_export])
def test_the_first_of_two_repeated_keys_wins_over_the_wire(export):
    one = with_duplicates(decision(0), (names.TRIAL, 1), (names.VERDICT, "deny"))
    with running_server() as server:
        answer = export(server, request([one]).SerializeToString())
        assert not answer.HasField("partial_success")
        evidence = server.receiver.store.evidence("r")
        assert [(t.index, t.decision) for t in evidence.trials()] == [(0, "approve")]


@pytest.fixture(scope="module")
def shared_server():
    with running_server() as server:
        yield server


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(junk_requests())
def test_http_and_grpc_answer_any_junk_beside_a_valid_span_and_keep_it(shared_server, body):
    encoded = body.SerializeToString()
    rejected = extract_protobuf(encoded).rejected
    for export in (http_export, grpc_export):
        answer = export(shared_server, encoded)
        assert answer.partial_success.rejected_spans == rejected
    evidence = shared_server.receiver.store.evidence("r")
    assert any(trial == KEPT for trial in evidence.trials())


@pytest.mark.parametrize("export", [grpc_export, http_export])
def test_invalid_utf8_in_an_unrelated_span_leaves_the_decision_beside_it_over_the_wire(export):
    other = span("GET /", {"http.route": "@@@@"})
    body = with_bytes(request([other, kept()]).SerializeToString(), "@@@@", BAD)
    with running_server() as server:
        answer = export(server, body)
        assert not answer.HasField("partial_success")
        assert list(server.receiver.store.evidence("r").trials()) == [KEPT]


@pytest.mark.parametrize("export", [grpc_export, http_export])
def test_lenient_types_are_rejected_span_by_span_over_the_wire(export):
    lenient = [
        decision(3.7),  # a double
        decision(True),  # a bool
        decision("1_000"),  # a string Python's int() would take
        decision(**{names.OUTCOME: None}),  # no outcome
        decision(verdict=""),  # an empty verdict
    ]
    with running_server() as server:
        answer = export(server, request([*lenient, kept()]).SerializeToString())
        assert answer.partial_success.rejected_spans == len(lenient)
        assert list(server.receiver.store.evidence("r").trials()) == [KEPT]


def test_otlp_json_integers_out_of_range_or_lenient_are_rejected_over_http():
    written = ["1_000", "3.7", 3.7, True, str(1 << 64), 10**400, " 12"]
    body = json_body(*(json_decision({"intValue": value}) for value in written))
    with running_server() as server:
        reply = post(f"http://127.0.0.1:{server.http_port}/v1/traces", body, "application/json")
        assert reply.status == 200
        answer = json.loads(reply.read())
        assert answer["partialSuccess"]["rejectedSpans"] == str(len(written))
        assert list(server.receiver.store.evidence("r").trials()) == [KEPT]
