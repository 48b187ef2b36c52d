"""The receiver: first record wins, completion and grace, restart, both transports, bad input."""

from __future__ import annotations

import gzip
import json
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

import grpc
import psycopg
import pytest
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

import verdictgate
from otel_support import MemoryTelemetry
from receiver_support import (
    SUITE,
    any_value,
    decision_span,
    request,
    run_span,
    running_server,
    span,
    stable_run,
)
from verdictgate import (
    Case,
    Claim,
    Contract,
    Invariant,
    Isolation,
    Policy,
    Status,
    Suite,
    Trial,
    assess,
    fingerprint,
)
from verdictgate.clock import ManualClock
from verdictgate.evidence import Evidence, compact_gaps
from verdictgate.fingerprints import KEY_VARIABLE, key_id
from verdictgate.otel import conventions as names
from verdictgate.otel.otlp_reading import extract_json, extract_protobuf
from verdictgate.otel.span_decoding import DeclaredRun
from verdictgate.otel.spans import run_attributes
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.server import Limits
from verdictgate.receiver.store import LOCAL, Batch, Store
from verdictgate.receiver.store.trial_days import SECONDS_A_DAY, day_of
from verdictgate.v1 import verdictgate_pb2 as pb


def extract(export_request):
    """What the receiver reads from an export request, through its protobuf encoding."""
    return extract_protobuf(export_request.SerializeToString())


def test_the_view_reads_what_the_full_otlp_message_holds():
    spans = [run_span("r", 8), *stable_run("r", 2, 4), span("GET /", {"http.route": "/"})]
    spans.append(decision_span("r", "c9", 0, ("search", "book"), None))
    spans.append(decision_span("r", "c9", 1, None, None))
    got = extract(request(spans))
    assert len(got.trials) == 10 and got.other_spans == 1 and len(got.declarations) == 1
    assert got.trials[8] == Trial("c9", 0, ("search", "book"), "r")
    assert got.trials[9] == Trial("c9", 1, None, "r", error_type="Boom")


@given(
    st.integers(0, 2**63),
    st.integers(0, 2**63),
    st.sampled_from([None, True, False]),
    st.lists(st.sampled_from(["no_ids", "mentions_ticket"]), max_size=2, unique=True),
)
def test_latency_verdict_and_tiers_read_alike_from_protobuf_and_json(start, end, passed, failed):
    from google.protobuf.json_format import MessageToJson

    attributes = {names.PASSED: passed} if passed is not None else {}
    if failed:
        attributes[names.INVARIANT_FAILED] = failed
    one = decision_span("r", "c", 0, "approve", "approve")
    one.attributes.extend(span("x", attributes).attributes)
    one.start_time_unix_nano, one.end_time_unix_nano = start, end
    body = request([one])
    from_protobuf = extract_protobuf(body.SerializeToString()).trials[0]
    from_json = extract_json(MessageToJson(body).encode()).trials[0]
    assert from_protobuf == from_json
    assert from_protobuf.latency_ms == ((end - start) / 1e6 if start and end >= start else None)
    assert from_protobuf.passed is passed
    assert from_protobuf.invariants_failed == tuple(failed)
    assert from_protobuf.invariants_warned == () and not from_protobuf.evaluation_skipped


def test_the_receiver_keeps_latency_verdicts_and_tiers_and_agrees_with_the_processor(new_store):
    """The same decision spans, read in process and by the receiver, give one answer."""
    memory = MemoryTelemetry()
    suite = Suite(
        "gate",
        "approval_gate",
        tuple(
            Case(f"{r}-{n}", f"please {r} {n}", r) for r in ("approve", "deny") for n in range(3)
        ),
        Contract({"approve", "deny"}),
    )
    policy = Policy(pass_rate=0.6, max_p95_ms=10_000)
    no_deny = Invariant("no_deny", lambda output, given: output != "deny" or "0" not in given)
    local = verdictgate.run(
        lambda text: text.split()[1],
        suite,
        policy,
        repeats=6,
        run_id="tiers",
        telemetry=memory.telemetry,
        invariants=[no_deny],
        judge=lambda output, given: "2" not in given,
    )
    memory.telemetry.shutdown()
    body = encode_spans(memory.spans.get_finished_spans()).SerializeToString()
    receiver = Receiver(new_store())
    receiver.ingest(extract_protobuf(body))
    received = receiver.assessment("tiers")
    assert local.passes.skipped == 6 and local.invariants.failed == {"no_deny": 6}
    assert received.passes == local.passes and received.invariants == local.invariants
    assert received.pass_rate == local.pass_rate and received.status is local.status
    assert received.latency.trials == local.latency.trials == 36
    assert received.latency.p95[0] == pytest.approx(local.latency.p95[0], rel=1e-6)
    assert received.reason_codes == local.reason_codes


def test_a_run_is_final_when_its_plan_is_complete_and_equals_assess(new_store):
    receiver = Receiver(new_store(), None, ReceiverConfig(idle=30))
    spans = stable_run("r1")
    receiver.ingest(extract(request([run_span("r1", planned=80), *spans[:40]])))
    early = receiver.assessment("r1")
    assert early.status is Status.INCONCLUSIVE and "in_progress" in early.reason_codes
    receiver.ingest(extract(request(spans[40:])))
    final = receiver.assessment("r1")
    assert not final.in_progress and receiver.store.run("r1").final
    trials = receiver.store.evidence("r1")
    assert final == assess(
        trials, SUITE, Policy(), isolation=Isolation.FRESH_SESSION, planned_trials=80
    )


def test_duplicates_are_harmless_and_a_different_answer_is_a_conflict(new_store):
    receiver = Receiver(new_store())
    spans = stable_run("r1", cases=2, trials=4)
    receiver.ingest(extract(request(spans)))
    receiver.ingest(extract(request(spans)))  # an exporter retry
    receiver.ingest(extract(request([decision_span("r1", "c0", 0, "deny", "approve")])))
    assessment = receiver.assessment("r1")
    assert assessment.trials.received == 8
    assert assessment.trials.duplicates == 8 and assessment.trials.conflicts == 1
    assert "integrity_conflict" in assessment.reason_codes


def test_after_the_grace_period_missing_trials_are_reported(new_store):
    clock = ManualClock(1000.0)
    receiver = Receiver(new_store(), None, ReceiverConfig(idle=30), clock=clock)
    receiver.ingest(extract(request([run_span("r1", planned=100), *stable_run("r1")])))
    receiver.tick()
    assert not receiver.store.run("r1").final
    clock.advance(31)
    receiver.tick()
    assessment = receiver.assessment("r1")
    assert receiver.store.run("r1").final and not assessment.in_progress
    assert "incomplete" in assessment.reason_codes and assessment.trials.missing == 20


def test_a_restart_resumes_every_run(new_store, tmp_path):
    path = tmp_path / "store.sqlite"
    same = ReceiverConfig(replica=LOCAL)  # restarted under its name (a shared store's too)
    first = Receiver(new_store(path), None, same)
    spans = stable_run("r1", cases=4, trials=40)
    first.ingest(extract(request([run_span("r1", planned=160), *spans[:100]])))
    first.store.close()
    second = Receiver(new_store(path), None, same)
    assert second.assessment("r1").trials.received == 100
    second.ingest(extract(request(spans[90:])))
    resumed = second.assessment("r1")
    assert resumed.trials.received == 160 and resumed.trials.duplicates == 10
    assert second.store.run("r1").final and resumed.status is Status.QUALIFIED


def test_malformed_decision_spans_are_rejected_and_other_spans_ignored():
    bad = span("decide approval_gate", {"verdictgate.outcome": "decision", "verdictgate.trial": -3})
    got = extract(request([bad, span("GET /", {}), *stable_run("r1", 1, 2)]))
    assert (got.rejected, got.other_spans, len(got.trials)) == (1, 1, 2)
    assert "verdictgate.run.id" in got.errors[0]


def test_grpc_and_http_transports(tmp_path):
    body = request([run_span("r1", planned=80), *stable_run("r1")]).SerializeToString()
    with running_server(tmp_path / "s.sqlite") as server:
        stub = TraceServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
        stub.Export(ExportTraceServiceRequest.FromString(body))
        url = f"http://127.0.0.1:{server.http_port}"
        reply = post(f"{url}/v1/traces", gzip.compress(body), "application/x-protobuf", gzip=True)
        assert reply.status == 200 and reply.headers["Content-Type"] == "application/x-protobuf"
        ExportTraceServiceResponse.FromString(reply.read())
        runs = json.loads(urllib.request.urlopen(f"{url}/v1/runs").read())["runs"]
        assert runs[0]["run_id"] == "r1" and runs[0]["final"] and runs[0]["trials_received"] == 80
        report = json.loads(urllib.request.urlopen(f"{url}/v1/runs/r1").read())
        assert report["status"] == "inconclusive" and report["trials"]["duplicates"] == 0
        assert report["trials"]["late"] == 80  # the resend came after the run was final
        assert report["run"]["in_progress"] is False


def post(url: str, body: bytes, content_type: str, *, gzip: bool = False, token: str | None = None):
    headers = {"Content-Type": content_type}
    if gzip:
        headers["Content-Encoding"] = "gzip"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        return urllib.request.urlopen(urllib.request.Request(url, body, headers, method="POST"))
    except urllib.error.HTTPError as error:
        return error


def otlp_json(spans_json: list[dict]) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans_json}]}]}).encode()


def test_otlp_json_with_hex_ids_integer_enums_and_unknown_fields():
    attributes = [
        {"key": "verdictgate.run.id", "value": {"stringValue": "rj"}},
        {"key": "verdictgate.case.id", "value": {"stringValue": "c1"}},
        {"key": "verdictgate.trial", "value": {"intValue": "3"}},
        {"key": "verdictgate.outcome", "value": {"stringValue": "decision"}},
        {
            "key": "verdictgate.tools",
            "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"stringValue": "b"}]}},
        },
    ]
    body = otlp_json(
        [
            {
                "traceId": "5b8efff798038103d269b633813fc60c",
                "spanId": "eee19b7ec3c1b174",
                "kind": 1,
                "name": "decide p",
                "attributes": attributes,
                "futureField": {"x": 1},
            }
        ]
    )
    with running_server() as server:
        reply = post(f"http://127.0.0.1:{server.http_port}/v1/traces", body, "application/json")
        assert reply.status == 200 and reply.headers["Content-Type"] == "application/json"
        assert json.loads(reply.read()) == {}
        assessment = server.receiver.assessment("rj")
    assert assessment.coverage.observed == ("a > b",)


def test_partial_success_names_the_rejected_spans():
    body = otlp_json(
        [
            {
                "name": "decide p",
                "attributes": [{"key": "verdictgate.outcome", "value": {"stringValue": "x"}}],
            }
        ]
    )
    with running_server() as server:
        reply = post(f"http://127.0.0.1:{server.http_port}/v1/traces", body, "application/json")
        partial = json.loads(reply.read())["partialSuccess"]
    assert (
        reply.status == 200
        and partial["rejectedSpans"] == "1"
        and "run.id" in partial["errorMessage"]
    )


@pytest.mark.parametrize(
    ("body", "content_type", "headers", "status"),
    [
        (b"\xff\xff\xff", "application/x-protobuf", {}, 400),
        (b"{not json", "application/json", {}, 400),
        (b"[]", "application/json", {}, 400),
        (b"x", "text/plain", {}, 415),
        (b"not gzip", "application/x-protobuf", {"Content-Encoding": "gzip"}, 400),
        (
            gzip.compress(b"\x00" * (2 << 20)),
            "application/x-protobuf",
            {"Content-Encoding": "gzip"},
            413,
        ),
    ],
)
def test_bad_http_requests_get_a_4xx_and_a_status_body(body, content_type, headers, status):
    with running_server(limits=Limits(max_request_bytes=1 << 20)) as server:
        url = f"http://127.0.0.1:{server.http_port}/v1/traces"
        reply = urllib.request.Request(
            url, body, {"Content-Type": content_type, **headers}, method="POST"
        )
        try:
            urllib.request.urlopen(reply)
            raise AssertionError("expected an HTTP error")
        except urllib.error.HTTPError as error:
            assert error.code == status
            payload = error.read()
            if error.headers["Content-Type"] == "application/json":
                assert "message" in json.loads(payload)
            else:
                assert status_pb2.Status.FromString(payload).message
        ok = post(url, request(stable_run("r", 1, 2)).SerializeToString(), "application/x-protobuf")
        assert ok.status == 200  # still up


def test_bearer_tokens_and_backpressure():
    body = request(stable_run("r", 1, 2)).SerializeToString()
    with running_server(token="s3cret") as server:
        url = f"http://127.0.0.1:{server.http_port}/v1/traces"
        assert post(url, body, "application/x-protobuf").status == 401
        assert post(url, body, "application/x-protobuf", token="wrong").status == 401
        assert post(url, body, "application/x-protobuf", token="s3cret").status == 200
        stub = TraceServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
        with pytest.raises(grpc.RpcError) as denied:
            stub.Export(request([]))
        assert denied.value.code() is grpc.StatusCode.UNAUTHENTICATED
        stub.Export(request(stable_run("r", 1, 4)), metadata=[("authorization", "Bearer s3cret")])
    with running_server(limits=Limits(max_in_flight=0)) as server:  # every slot taken
        reply = post(
            f"http://127.0.0.1:{server.http_port}/v1/traces", body, "application/x-protobuf"
        )
        assert reply.status == 429 and reply.headers["Retry-After"] == "1"
        stub = TraceServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
        with pytest.raises(grpc.RpcError) as busy:
            stub.Export(request([]))
        assert busy.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=300), st.integers(0, 300))
def test_random_and_truncated_bodies_never_crash_either_transport(shared_server, noise, cut):
    server, valid = shared_server
    for body in (noise, valid[:cut]):
        for content_type in ("application/x-protobuf", "application/json"):
            reply = post(f"http://127.0.0.1:{server.http_port}/v1/traces", body, content_type)
            assert reply.status in (200, 400)
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        try:
            export(body, timeout=5)
        except grpc.RpcError as error:
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        channel.close()
    assert (
        post(
            f"http://127.0.0.1:{server.http_port}/v1/traces", valid, "application/x-protobuf"
        ).status
        == 200
    )


@pytest.fixture(scope="module")
def shared_server():
    valid = request([run_span("fz", planned=8), *stable_run("fz", 2, 4)]).SerializeToString()
    with running_server() as server:
        yield server, valid


def test_extract_protobuf_refuses_garbage():
    from verdictgate.otel.otlp_reading import MalformedRequest

    with pytest.raises(MalformedRequest):
        extract_protobuf(b"\x0a\xff\xff\xff\xff\x0f")


def test_repeats_within_one_request_count_like_repeats_across_requests(new_store):
    receiver = Receiver(new_store())
    first = decision_span("r1", "c0", 0, "approve", "approve")
    receiver.ingest(
        extract(request([first, first, decision_span("r1", "c0", 0, "deny", "approve")]))
    )
    receiver.ingest(extract(request([first, decision_span("r1", "c0", 1, "approve"), first])))
    assessment = receiver.assessment("r1")
    assert assessment.trials.received == 2
    assert assessment.trials.duplicates == 3 and assessment.trials.conflicts == 1
    assert receiver.store.run("r1").received == 2


def test_worker_decoders_give_the_same_result_and_errors_as_inline():
    from verdictgate.otel.otlp_reading import MalformedRequest
    from verdictgate.receiver.ingest.decoding import Decoder, decode

    body = request(
        [run_span("w", planned=400), *stable_run("w", cases=4, trials=100)]
    ).SerializeToString()
    assert len(body) > 32 << 10  # large enough to go to a worker
    decoder = Decoder(workers=1)
    try:
        remote = decoder.decode(body, "application/x-protobuf")
        assert remote.trials == decode(body, "application/x-protobuf").trials
        assert remote.declarations == decode(body, "application/x-protobuf").declarations
        with pytest.raises(MalformedRequest):
            decoder.decode(b"\xff" * (40 << 10), "application/x-protobuf")
    finally:
        decoder.close()


def test_a_worker_answers_each_of_many_callers_with_its_own_body():
    """Callers on several threads share one worker: each gets what its own body holds (answers
    come back in the order sent, each read by the thread whose body it answers), the worker's
    errors included."""
    from concurrent.futures import ThreadPoolExecutor

    from verdictgate.otel.otlp_reading import MalformedRequest
    from verdictgate.receiver.ingest.decoding import Decoder, decode

    bodies = [
        request(
            [run_span(f"w{n}", planned=400), *stable_run(f"w{n}", cases=4, trials=100)]
        ).SerializeToString()
        for n in range(6)
    ]
    broken = b"\xff" * (40 << 10)

    def outcome(decoder: Decoder, body: bytes) -> object:
        try:
            return decoder.decode(body, "application/x-protobuf").trials
        except MalformedRequest as error:
            return type(error)

    decoder = Decoder(workers=1)
    try:
        given = [bodies[n % 6] if n % 5 else broken for n in range(60)]
        with ThreadPoolExecutor(8) as callers:
            answers = list(callers.map(lambda body: outcome(decoder, body), given))
    finally:
        decoder.close()
    expected = {body: decode(body, "application/x-protobuf").trials for body in bodies}
    assert answers == [expected.get(body, MalformedRequest) for body in given]


def test_a_request_that_fails_half_sent_breaks_only_its_worker():
    """A body that cannot be sent whole would leave the pipe out of step: its worker is
    replaced, and the next request is answered as if nothing happened."""
    from verdictgate.receiver.ingest.decoding import Decoder, decode

    body = request([run_span("h", planned=400), *stable_run("h", cases=4, trials=100)])
    encoded = body.SerializeToString()
    decoder = Decoder(workers=1)
    try:
        with pytest.raises(TypeError):
            decoder.decode("x" * (40 << 10), "application/x-protobuf")
        answer = decoder.decode(encoded, "application/x-protobuf")
    finally:
        decoder.close()
    assert answer.trials == decode(encoded, "application/x-protobuf").trials


def test_a_worker_that_does_not_answer_in_time_is_replaced():
    """A worker stopped mid-request (SIGSTOP) holds ingest no longer than `answer_seconds`: the
    request gets DecoderUnavailable (503, retried) and the next one a new worker."""
    import multiprocessing
    import os
    import signal

    from verdictgate.receiver.ingest.decoding import Decoder, DecoderUnavailable, decode

    body = request(
        [run_span("t", planned=400), *stable_run("t", cases=4, trials=100)]
    ).SerializeToString()
    decoder = Decoder(workers=1, answer_seconds=0.5)
    try:
        (stuck,) = [c for c in multiprocessing.active_children() if "decoder" in c.name]
        os.kill(stuck.pid, signal.SIGSTOP)
        with pytest.raises(DecoderUnavailable):
            decoder.decode(body, "application/x-protobuf")
        answer = decoder.decode(body, "application/x-protobuf")
        assert not stuck.is_alive()  # killed, not left stopped
    finally:
        decoder.close()
    assert answer.trials == decode(body, "application/x-protobuf").trials


def test_closing_a_decoder_whose_worker_is_stuck_returns_and_fails_its_requests():
    """A worker stopped mid-request (SIGSTOP) neither holds up `close` nor leaves its callers
    waiting: they are answered DecoderUnavailable (503, retried elsewhere)."""
    import multiprocessing
    import os
    import signal

    from verdictgate.receiver.ingest.decoding import Decoder, DecoderUnavailable

    body = request(
        [run_span("s", planned=400), *stable_run("s", cases=4, trials=100)]
    ).SerializeToString()
    decoder = Decoder(workers=1)
    (worker,) = [child for child in multiprocessing.active_children() if "decoder" in child.name]
    os.kill(worker.pid, signal.SIGSTOP)
    outcomes: list[object] = []

    def call() -> None:
        try:
            outcomes.append(decoder.decode(body, "application/x-protobuf"))
        except DecoderUnavailable as error:
            outcomes.append(error)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    closer = threading.Thread(target=decoder.close, daemon=True)
    closer.start()
    closer.join(20)
    caller.join(20)
    assert not closer.is_alive() and not caller.is_alive()
    assert len(outcomes) == 1  # answered: unavailable, or decoded inline once the pool closed
    assert not worker.is_alive()


def test_a_server_with_worker_decoders_ingests_and_stays_up():
    body = request(
        [run_span("w", planned=400), *stable_run("w", cases=4, trials=100)]
    ).SerializeToString()
    with running_server(limits=Limits(decoders=1)) as server:
        url = f"http://127.0.0.1:{server.http_port}/v1/traces"
        assert post(url, b"\xff" * (40 << 10), "application/x-protobuf").status == 400
        assert post(url, body, "application/x-protobuf").status == 200
        assert server.receiver.assessment("w").trials.received == 400


def test_final_admissions_and_canary_windows_are_published_over_otlp(new_store):
    from otel_support import OtlpCollector
    from verdictgate.otel import conventions as names
    from verdictgate.receiver.publishing.forwarder import Forwarder
    from verdictgate.receiver.publishing.otlp_target import OtlpTarget

    with OtlpCollector() as collector:
        store = new_store()
        forwarder = Forwarder(store, OtlpTarget(f"http://127.0.0.1:{collector.port}"))
        clock = ManualClock(1000.0)
        receiver = Receiver(store, forwarder, ReceiverConfig(idle=30, window=10), clock=clock)
        receiver.ingest(extract(request([run_span("planned", 80), *stable_run("planned")])))
        receiver.ingest(extract(request(stable_run("canary", 2, 4))))  # no run span
        clock.advance(11)
        receiver.tick()  # the canary's first window is due; it stays open
        assert not receiver.store.run("canary").final
        clock.advance(30)
        receiver.tick()  # idle over: the canary is final
        assert receiver.flush() and forwarder.drain() and store.outbox_size() == 0
        forwarder.stop()
    admissions = [s for s in collector.spans() if s.name == names.ADMISSION_SPAN]
    runs = [
        next(a.value.string_value for a in s.attributes if a.key == names.RUN_ID)
        for s in admissions
    ]
    assert sorted(runs) == ["canary", "canary", "planned"]
    assert names.METRIC_ADMISSION in collector.metric_names()
    assert len([r for r in collector.log_records() if r.event_name == names.EVALUATION_EVENT]) == 3


def test_a_run_holds_at_most_its_limit_of_trials_and_the_rest_are_rejected(new_store):
    receiver = Receiver(new_store(), None, ReceiverConfig(max_trials_per_run=50))
    first = extract(request(stable_run("big", 4, 10)))  # 40 trials
    receiver.ingest(first)
    assert first.rejected == 0
    more = [
        decision_span("big", f"c{c}", i, "approve", "approve")
        for c in range(4)
        for i in range(10, 20)
    ]
    second = extract(request([*more, *stable_run("small", 1, 4)]))
    receiver.ingest(second)  # 40 more for `big`, room for 10; `small` is not affected
    assert second.rejected == 30 and "limit of 50 trials: big" in second.errors[-1]
    assert receiver.store.run("big").received == 50
    assert receiver.store.run("small").received == 4


def test_canary_windows_count_each_trial_once_in_the_trials_counter(new_store):
    from verdictgate.otel import conventions as names
    from verdictgate.receiver.publishing.forwarder import Forwarder, PublisherTarget

    memory = MemoryTelemetry()
    clock = ManualClock(1000.0)
    store = new_store()
    forwarder = Forwarder(store, PublisherTarget(memory.telemetry.publisher))
    receiver = Receiver(store, forwarder, ReceiverConfig(idle=30, window=10), clock=clock)
    spans = stable_run("canary", 2, 4)
    receiver.ingest(extract(request(spans[:4])))
    clock.advance(11)
    receiver.tick()  # a window with 4 trials
    assert receiver.flush()
    receiver.ingest(extract(request(spans[4:])))
    clock.advance(11)
    receiver.tick()  # a window with all 8
    assert receiver.flush()
    clock.advance(31)
    receiver.tick()  # final
    assert receiver.flush() and forwarder.drain()
    memory.telemetry.flush()
    admissions = [s for s in memory.spans.get_finished_spans() if s.name == names.ADMISSION_SPAN]
    assert len(admissions) == 3
    counted = memory.metric_points()[names.METRIC_TRIALS]
    assert sum(point.value for point in counted) == 8
    memory.telemetry.shutdown()


def test_tls_and_a_token_on_both_transports_and_the_status_client(new_store, cli, tmp_path):
    import shutil
    import ssl
    import subprocess

    from verdictgate.receiver.server import Server, Tls

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    server = Server(
        Receiver(new_store()),
        grpc_listen="127.0.0.1:0",
        http_listen="127.0.0.1:0",
        token="s3cret",
        tls=Tls(str(cert), str(key)),
    )
    server.start()
    try:
        body = request([run_span("t", planned=80), *stable_run("t")]).SerializeToString()
        context = ssl.create_default_context(cafile=str(cert))
        reply = urllib.request.urlopen(
            urllib.request.Request(
                f"https://127.0.0.1:{server.http_port}/v1/traces",
                body,
                {"Content-Type": "application/x-protobuf", "Authorization": "Bearer s3cret"},
                method="POST",
            ),
            context=context,
        )
        assert reply.status == 200
        endpoint = f"127.0.0.1:{server.grpc_port}"
        ok = cli(
            "status",
            "--endpoint",
            endpoint,
            "--run",
            "t",
            "--tls-ca",
            str(cert),
            "--token-file",
            str(token),
            "--format",
            "json",
        )
        assert ok.exit_code == 3 and json.loads(ok.stdout)["trials"]["received"] == 80
        denied = cli("status", "--endpoint", endpoint, "--run", "t", "--tls-ca", str(cert))
        assert denied.exit_code == 2 and "token" in denied.stderr
        assert denied.stderr.endswith("--token-file: a bearer token is required\n")
        wrong = tmp_path / "wrong"
        wrong.write_text("s3cre7\n")
        wrong_token = ["--tls-ca", str(cert), "--token-file", str(wrong)]
        refused = cli("status", "--endpoint", endpoint, "--run", "t", *wrong_token)
        assert refused.stderr.endswith("--token-file: the bearer token is not this receiver's\n")
    finally:
        server.stop()


def test_a_store_made_before_the_tier_columns_gains_them_and_keeps_its_trials(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    old_schema = """CREATE TABLE trials (run_id TEXT NOT NULL, case_id TEXT NOT NULL,
        trial INTEGER NOT NULL, decision TEXT, expected TEXT, error_type TEXT,
        duplicates INTEGER NOT NULL DEFAULT 0, conflict INTEGER NOT NULL DEFAULT 0,
        batch INTEGER NOT NULL, PRIMARY KEY (run_id, case_id, trial)) WITHOUT ROWID;"""
    with sqlite3.connect(path) as connection:
        connection.executescript(old_schema)
        connection.execute(
            "INSERT INTO trials (run_id, case_id, trial, decision, batch) VALUES ('r', 'c', 0, 'l:a', 1)"
        )
    assert "passed" not in {
        row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(trials)")
    }
    store = Store(path)
    store.write(Batch([Trial("c", 1, "a", "r", latency_ms=12.5, passed=True)]))
    evidence = store.evidence("r")
    assert [trial.decision for trial in evidence.trials()] == ["a", "a"]
    assert evidence.cases[("r", "c")].pass_counts() == (1, 1)
    assert evidence.cases[("r", "c")].latency_values() == [12.5]


def test_the_first_run_span_wins_and_a_different_second_one_is_a_conflict(new_store):
    receiver = Receiver(new_store())
    honest = run_span("r", planned=80)
    receiver.ingest(extract(request([honest, *stable_run("r", trials=10)])))
    lenient_suite = Suite("gate", "approval_gate", (), Contract({"approve", "deny"}))
    lenient = span(
        names.RUN_SPAN,
        run_attributes("r", lenient_suite, Policy(tolerance=0.6), 40, Isolation.FRESH_SESSION),
    )
    receiver.ingest(extract(request([lenient, honest])))  # a rival declaration, then a retry
    assessment = receiver.assessment("r")
    assert assessment.policy.tolerance == Policy().tolerance  # the first declaration stands
    assert "declaration_conflict" in assessment.reason_codes
    assert assessment.status is Status.REJECTED


def test_records_after_a_run_is_final_are_late_and_never_change_its_admission(new_store):
    clock = ManualClock(1000.0)
    receiver = Receiver(new_store(), None, ReceiverConfig(idle=30), clock=clock)
    receiver.ingest(extract(request([run_span("r", planned=80), *stable_run("r", trials=10)])))
    clock.advance(31)
    receiver.tick()  # grace over: final, incomplete
    published = receiver.assessment("r")
    assert not published.in_progress and "incomplete" in published.reason_codes
    receiver.ingest(extract(request(stable_run("r", trials=20)[40:])))  # the rest, too late
    after = receiver.assessment("r")
    assert after.trials.late == 40 and after.trials.received == published.trials.received
    assert after.status is published.status and after.reason_codes == published.reason_codes


def test_the_tick_reads_open_runs_only(new_store, monkeypatch):
    clock = ManualClock(1000.0)
    store = new_store()
    receiver = Receiver(store, None, ReceiverConfig(idle=30), clock=clock)
    for n in range(50):
        receiver.ingest(extract(request([run_span(f"done-{n}", 80), *stable_run(f"done-{n}")])))
    receiver.ingest(extract(request(stable_run("canary", 2, 4))))
    monkeypatch.setattr(store, "runs", lambda: pytest.fail("the tick scanned every run"))
    assert [run.run_id for run in store.newest(10, status="in_progress")] == ["canary"]
    clock.advance(31)
    receiver.tick()
    assert store.run("canary").final and store.newest(10, status="in_progress") == []


def test_the_store_file_is_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "store.sqlite"
    Store(path).close()
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        (names.ISOLATION, "bogus"),
        (names.TOLERANCE, "0.05"),
        (names.TOLERANCE, float("nan")),
        (names.TOLERANCE, -1.0),
        (names.CONFIDENCE, 2.0),
        (names.PLAN_TRIALS, "ten"),
        (names.PLAN_TRIALS, -1),
        (names.PLAN_TRIALS, 1.5),
        (names.PLAN_TRIALS, [1, 2]),
        (names.CONTRACT_TARGETS, ["deny"]),
        (names.RUN_ID, ""),
    ],
)
def test_a_malformed_run_span_is_rejected_alone_and_other_runs_still_finish(
    new_store, attribute, value
):
    clock = ManualClock(1000.0)
    receiver = Receiver(new_store(), None, ReceiverConfig(idle=30), clock=clock)
    poison = run_span("poison", planned=8)
    for item in poison.attributes:
        if item.key == attribute:
            item.value.CopyFrom(any_value(value))
    got = extract(request([poison, run_span("ok", planned=80), *stable_run("ok", trials=10)]))
    assert got.rejected == 1 and "verdictgate.run" in got.errors[0]
    assert len(got.declarations) == 1 and len(got.trials) == 40  # the rest of the request stays
    receiver.ingest(got)
    clock.advance(31)
    receiver.tick()
    assert receiver.store.run("ok").final and receiver.store.run("poison") is None


def test_a_run_span_keeps_only_its_declaration_never_content(new_store):
    attributes = {"gen_ai.input.messages": "my card number is 4111", "user.email": "a@b.c"}
    noisy = run_span("r", planned=8)
    noisy.attributes.extend(span("x", attributes).attributes)
    receiver = Receiver(new_store())
    receiver.ingest(extract(request([noisy])))
    declaration = receiver.store.run("r").declaration
    assert declaration is not None and set(declaration) <= names.RUN_SPAN_ATTRIBUTES
    assert "4111" not in json.dumps(declaration) and "a@b.c" not in json.dumps(declaration)


def corrupt_declaration(location, run_id: str, attributes: dict) -> None:
    """Store a declaration this release cannot read, as an older release might have (in the
    SQLite file, or the PostgreSQL database, at `location`)."""
    update = "UPDATE runs SET declaration = ? WHERE run_id = ?"
    if str(location).startswith("postgresql://"):
        with psycopg.connect(str(location)) as connection:
            connection.execute(update.replace("?", "%s"), (json.dumps(attributes), run_id))
        return
    with sqlite3.connect(location) as connection:
        connection.execute(update, (json.dumps(attributes), run_id))


def test_one_run_that_cannot_be_assessed_never_stops_the_others(new_store, caplog):
    clock = ManualClock(1000.0)
    receiver = Receiver(new_store("store"), None, ReceiverConfig(idle=30), clock=clock)
    receiver.ingest(extract(request([run_span("bad", 80), *stable_run("bad", trials=2)])))
    receiver.ingest(extract(request([run_span("good", 80), *stable_run("good", trials=2)])))
    receiver.close()  # a replica that stops hands its runs over
    corrupt_declaration(
        new_store.location("store"), "bad", {names.RUN_ID: "bad", names.TOLERANCE: "oops"}
    )
    store = new_store("store")
    restarted = Receiver(
        store, None, ReceiverConfig(idle=30), clock=clock
    )  # takes up the open runs again
    clock.advance(31)
    restarted.tick()
    restarted.tick()
    assert restarted.flush()
    assert store.run("good").status is not None and not store.run("bad").final
    assert sum("run bad cannot be assessed" in r.getMessage() for r in caplog.records) == 1


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, 3),
        st.dictionaries(st.integers(0, 5000), st.sampled_from(["a", "b", None]), min_size=1),
        min_size=1,
    )
)
def test_compacting_gaps_never_changes_the_statistics(cases):
    """The receiver compacts long gaps of missing pairs; every figure stays that of the real
    indices (pairs, flips, received, expected, errors)."""
    trials = [
        Trial(f"c{case}", index, decision, "r", "a", None if decision else "Boom")
        for case, indices in sorted(cases.items())
        for index, decision in sorted(indices.items())
    ]
    store = Store()
    store.write(Batch(trials), now=1.0)
    compacted = assess(store.evidence("r"))
    plain = assess(Evidence(trials))
    assert compacted.pooled == plain.pooled
    assert compacted.trials == plain.trials
    assert [c.pairs for c in compacted.cases] == [c.pairs for c in plain.cases]
    assert compacted.status is plain.status and compacted.reason_codes == plain.reason_codes


def test_compact_gaps_keeps_pairs_and_order():
    indices = [1, 2, 3, 900, 901, 5000]
    compacted = list(compact_gaps(indices))
    assert compacted == sorted(compacted)
    assert [i & 1 for i in compacted] == [i & 1 for i in indices]
    pairs = lambda xs: {(a >> 1) for a in xs for b in xs if a != b and a >> 1 == b >> 1}  # noqa: E731
    assert len(pairs(compacted)) == len(pairs(indices)) == 2
    assert max(compacted) < 16


def test_watchers_share_one_assessment_per_change_and_sleep_through_other_runs(new_store):
    assessed: Counter[str] = Counter()
    asked: Counter[str] = Counter()

    class Counting(Receiver):
        def assessment_of(self, run):
            assessed[run.run_id] += 1
            return super().assessment_of(run)

        def cached_assessment(self, run_id):
            asked[run_id] += 1
            return super().cached_assessment(run_id)

    receiver = Counting(new_store(), None, ReceiverConfig(assess_interval=0.0))
    receiver.ingest(extract(request([run_span("w", planned=80), *stable_run("w", trials=20)[:40]])))
    seen: list[list] = [[] for _ in range(20)]
    started = threading.Barrier(21)

    def watcher(n):
        for number, cached in enumerate(receiver.watch("w", poll=60)):
            seen[n].append(cached.assessment)
            if number == 0:
                started.wait()

    threads = [threading.Thread(target=watcher, args=(n,), daemon=True) for n in range(20)]
    for thread in threads:
        thread.start()
    started.wait(timeout=10)
    assert assessed["w"] == 1  # twenty watchers, one assessment
    asked_before = asked["w"]
    for n in range(30):  # busy traffic of another run never wakes them
        receiver.ingest(extract(request(stable_run(f"other-{n}", cases=1, trials=2))))
    assert asked["w"] == asked_before
    receiver.ingest(extract(request(stable_run("w", trials=20)[40:])))  # completes the plan
    for thread in threads:
        thread.join(timeout=10)
    assert all(not watched[-1].in_progress for watched in seen)
    assert all(watched[-1] is seen[0][-1] for watched in seen)  # one final assessment, shared
    assert assessed["w"] <= 3


def test_an_open_run_is_reassessed_at_a_bounded_rate(new_store):
    ticks = [0.0]
    receiver = Receiver(new_store(), clock=lambda: ticks[0])  # a clock the test drives
    receiver.ingest(extract(request(stable_run("r", cases=1, trials=2))))
    first = receiver.assessment("r")
    receiver.ingest(extract(request([decision_span("r", "c0", 2, "approve", "approve")])))
    assert receiver.assessment("r") is first  # changed, but assessed less than a second ago
    ticks[0] += 1.0
    assert receiver.assessment("r").trials.received == 3


def test_a_run_with_200k_distinct_labels_gets_a_bounded_report_over_grpc():
    with running_server() as server:
        trials = [Trial(f"case-{n}", 0, f"label-{n}", "wide", f"route-{n}") for n in range(200_000)]
        server.receiver.store.write(Batch(trials), now=1.0)
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")  # the 4 MiB default
        get = channel.unary_unary(
            "/verdictgate.v1.AdmissionService/GetAdmission",
            request_serializer=pb.GetAdmissionRequest.SerializeToString,
            response_deserializer=pb.Admission.FromString,
        )
        for fmt in ("json", "text", "junit", "markdown"):
            admission = get(pb.GetAdmissionRequest(run_id="wide", format=fmt), timeout=120)
            assert len(admission.report) < 1 << 20
            assert admission.trials_received == 200_000
            assert "bounded" in admission.report or fmt in ("json", "junit")
        report = json.loads(get(pb.GetAdmissionRequest(run_id="wide"), timeout=60).report)
        channel.close()
    assert report["omitted"]["cases"] == 200_000 - len(report["cases"])
    assert report["omitted"]["routes"] == 200_000 - len(report["stability"]["routes"])
    observed = report["coverage"]["observed"]
    assert report["omitted"]["observed"] == 200_000 - len(observed) > 0
    assert all(len(reason["message"]) < 4000 for reason in report["reasons"])


@pytest.mark.parametrize("contract", [False, True], ids=["canary", "declared-contract"])
def test_decisions_at_every_label_limit_get_small_reports_status_and_pages(contract):
    """80 decision spans at the per-span maximum (256 tools of 4,000 characters, every path its
    own: 80 MiB of labels) sent through the wire: every report format over gRPC's 4 MiB
    default, the JSON query API and the run's page stay small, each label shown shortened
    with its length and fingerprint. Under a declared contract every path is an unknown
    decision, which the reasons and next steps name."""

    clock = ManualClock(1_000.0)
    with running_server(clock=clock) as server:
        spans = [
            decision_span(
                "longest",
                f"c{c}",
                i,
                tuple(f"{c:02d}-{i}-{n:03d}-" + "t" * 3_991 for n in range(256)),
            )
            for c in range(40)
            for i in range(2)
        ]
        assert len(spans[0].attributes[-1].value.array_value.values[0].string_value) == 4_000
        if contract:
            spans.insert(0, run_span("longest", 80))
        for start in range(0, len(spans), 4):
            body = request(spans[start : start + 4]).SerializeToString()
            posted = urllib.request.Request(
                f"http://127.0.0.1:{server.http_port}/v1/traces",
                body,
                {"Content-Type": "application/x-protobuf"},
            )
            with urllib.request.urlopen(posted, timeout=30) as answer:
                assert answer.status == 200
        clock.advance(31)  # the run's idle period passes
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")  # the 4 MiB default
        get = channel.unary_unary(
            "/verdictgate.v1.AdmissionService/GetAdmission",
            request_serializer=pb.GetAdmissionRequest.SerializeToString,
            response_deserializer=pb.Admission.FromString,
        )
        try:
            deadline = time.monotonic() + 30
            while get(pb.GetAdmissionRequest(run_id="longest"), timeout=60).final is False:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            for fmt in ("json", "text", "junit", "markdown", "html"):
                admission = get(pb.GetAdmissionRequest(run_id="longest", format=fmt), timeout=60)
                assert admission.trials_received == 80
                assert len(admission.SerializeToString()) < 256 << 10, fmt
                assert len(admission.headline) < 1_000
        finally:
            channel.close()
        base = f"http://127.0.0.1:{server.http_port}"
        with urllib.request.urlopen(f"{base}/v1/runs/longest", timeout=30) as answer:
            report = answer.read()
        with urllib.request.urlopen(f"{base}/runs/longest", timeout=30) as answer:
            page = answer.read()
    assert len(report) < 256 << 10 and len(page) < 256 << 10
    judged = json.loads(report)
    observed = judged["coverage"]["observed"]
    assert len(observed) == 80 and len(set(observed)) == 80  # shortened, still apart
    assert all(len(label) <= 160 and "1,024,765 chars #" in label for label in observed)
    if contract:
        assert "contract_unknown_decision" in [r["code"] for r in judged["reasons"]]
        named = [step for step in judged["next_steps"] if step.startswith("The agent returned")]
        assert named and all("1,024,765 chars #" in step and len(step) < 400 for step in named)


def test_sender_chosen_suite_names_never_grow_the_metric_series(new_store):
    from otel_support import OtlpCollector
    from verdictgate.otel.admission_record import OVERFLOW
    from verdictgate.receiver.publishing.forwarder import Forwarder
    from verdictgate.receiver.publishing.otlp_target import OtlpTarget

    with OtlpCollector() as collector:
        store = new_store()
        forwarder = Forwarder(store, OtlpTarget(f"http://127.0.0.1:{collector.port}"))
        clock = ManualClock(1000.0)
        receiver = Receiver(
            store, forwarder, ReceiverConfig(idle=30, max_metric_suites=5), clock=clock
        )
        for n in range(31):
            suite = Suite(f"suite-{n}", "approval_gate", (), Contract({"approve", "deny"}))
            spans = [run_span(f"r{n}", 8, suite), *stable_run(f"r{n}", cases=2, trials=4)]
            receiver.ingest(extract(request(spans)))
        assert forwarder.drain()
        forwarder.stop()
    labels = [
        {a.key: a.value for a in point.attributes}
        for request in collector.metrics
        for resource_metrics in request.resource_metrics
        for scope in resource_metrics.scope_metrics
        for metric in scope.metrics
        for point in (*metric.gauge.data_points, *metric.sum.data_points)
    ]
    suites = {a[names.SUITE].string_value for a in labels if names.SUITE in a}
    assert len(suites) == 5
    assert any(a.get(OVERFLOW) and a[OVERFLOW].bool_value for a in labels)
    overflow_totals = []
    for export in collector.metrics:  # one point per series in each export
        for resource_metrics in export.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    points = [*metric.gauge.data_points, *metric.sum.data_points]
                    keys = [tuple(sorted(str(a).strip() for a in p.attributes)) for p in points]
                    assert len(keys) == len(set(keys)), metric.name
                    overflow_totals += [
                        p.as_int
                        for p in metric.sum.data_points
                        if any(a.key == OVERFLOW for a in p.attributes)
                    ]
    assert overflow_totals == sorted(overflow_totals)  # a cumulative counter never goes down
    spans = [s for s in collector.spans() if s.name == names.ADMISSION_SPAN]
    assert len(spans) == 31  # spans still name every suite


def test_metric_suites_can_be_listed_by_name_and_their_points_stay_bounded():
    from verdictgate.otel.admission_record import OVERFLOW, MetricLabels

    labels = MetricLabels({"payments"}, limit=3)
    assert labels.base("payments", "router") == {names.SUITE: "payments", names.POINT: "router"}
    assert labels.base("made-up", "router") == {OVERFLOW: True}
    points = [labels.base("payments", f"point-{n}") for n in range(10)]
    assert sum(OVERFLOW not in point for point in points) == 2  # with "router": 3 pairs


def test_runs_are_listed_a_page_at_a_time_over_both_transports():
    with running_server() as server:
        for n in range(25):
            server.receiver.store.write(Batch([Trial("c", 0, "a", f"run-{n:02}")]), now=n)
        url = f"http://127.0.0.1:{server.http_port}/v1/runs"
        listed, token = [], ""
        while True:
            page = json.loads(
                urllib.request.urlopen(f"{url}?page_size=10&page_token={token}").read()
            )
            listed += [run["run_id"] for run in page["runs"]]
            token = page["next_page_token"]
            assert len(page["runs"]) <= 10
            if not token:
                break
        assert listed == [f"run-{n:02}" for n in range(25)]
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(f"{url}?page_token=bogus")
        assert bad.value.code == 400
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        list_runs = channel.unary_unary(
            "/verdictgate.v1.AdmissionService/ListRuns",
            request_serializer=pb.ListRunsRequest.SerializeToString,
            response_deserializer=pb.ListRunsResponse.FromString,
        )
        first = list_runs(pb.ListRunsRequest(page_size=20), timeout=10)
        rest = list_runs(pb.ListRunsRequest(page_token=first.next_page_token), timeout=10)
        assert [r.run_id for r in (*first.runs, *rest.runs)] == listed and not rest.next_page_token
        with pytest.raises(grpc.RpcError) as refused:
            list_runs(pb.ListRunsRequest(page_token="bogus"), timeout=10)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        channel.close()


def test_retention_deletes_old_finished_runs_only(new_store):
    store = new_store()
    clock = ManualClock((day_of(store.now()) + 1) * SECONDS_A_DAY)  # PostgreSQL drops whole days
    receiver = Receiver(store, None, ReceiverConfig(idle=30, retain=3600), clock=clock)
    for n in range(250):
        receiver.ingest(extract(request([run_span(f"old-{n}", 8), *stable_run(f"old-{n}", 2, 4)])))
    assert receiver.flush()  # admitted now
    clock.advance(2 * SECONDS_A_DAY)
    receiver.ingest(extract(request([run_span("recent", 8), *stable_run("recent", 2, 4)])))
    receiver.ingest(extract(request(stable_run("open", 2, 2))))  # still collecting
    receiver.tick()
    assert {run.run_id for run in store.runs()} == {"recent", "open"}
    assert store.evidence("old-0").cases == {}
    assert receiver.assessment("recent").trials.received == 8


def test_the_trial_limit_of_a_run_holds_under_concurrent_requests(new_store):
    receiver = Receiver(new_store(), None, ReceiverConfig(max_trials_per_run=10))
    write = receiver.store.write

    def slow_write(*args, **kwargs):  # widens the window between reading the room and using it
        time.sleep(0.02)
        return write(*args, **kwargs)

    receiver.store.write = slow_write
    extracts = [
        extract(request([decision_span("r", f"c{n}", i, "approve", "approve") for i in range(6)]))
        for n in range(12)
    ]
    threads = [threading.Thread(target=receiver.ingest, args=(e,)) for e in extracts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert receiver.store.run("r").received == 10
    assert sum(e.rejected for e in extracts) == 72 - 10


def test_a_run_that_cannot_be_assessed_never_fails_the_request_that_completes_it(new_store, caplog):
    first = Receiver(new_store("store"))
    first.ingest(extract(request([run_span("bad", 8), *stable_run("bad", 2, 2)])))
    first.close()
    corrupt_declaration(
        new_store.location("store"), "bad", {names.RUN_ID: "bad", names.ISOLATION: "bogus"}
    )
    receiver = Receiver(new_store("store"))
    got = extract(request(stable_run("bad", 2, 4)))  # completes the plan
    receiver.ingest(got)  # the request's trials are committed; it does not raise
    assert receiver.flush()
    assert receiver.store.run("bad").received == 8
    assert sum("run bad cannot be assessed" in r.getMessage() for r in caplog.records) == 1


def test_assess_and_the_receiver_report_the_same_fingerprints_and_isolation(new_store):
    cases = [fingerprint(f"refund request {n}", None) for n in range(2)]  # unkeyed sha256: ids
    trials = [Trial(case, i, "approve", "fp", "approve") for case in cases for i in range(4)]
    receiver = Receiver(new_store(), None, ReceiverConfig(idle=0))
    spans = [decision_span(t.run, t.case, t.index, "approve", "approve") for t in trials]
    receiver.ingest(extract(request(spans)))
    receiver.tick()
    assert receiver.flush()
    got, want = receiver.assessment("fp"), assess(trials)
    assert got.run.fingerprints == want.run.fingerprints == "unkeyed"
    assert got.run.isolation == want.run.isolation and got.run.id == want.run.id == "fp"


def test_the_store_keeps_the_fingerprint_a_run_named_by_ids_gave_each_case(new_store, monkeypatch):
    """A run whose cases have explicit ids records each input's keyed fingerprint beside them,
    with the key's id; the store keeps both, so that run and one named by fingerprints count
    each input once for a claim about new inputs."""
    monkeypatch.setenv(KEY_VARIABLE, "a receiver key")
    key = b"a receiver key"
    memory = MemoryTelemetry()
    suite = Suite(
        "gate",
        "approval_gate",
        tuple(
            Case(f"{r}-{n}", f"please {r} {n}", r) for r in ("approve", "deny") for n in range(3)
        ),
        Contract({"approve", "deny"}),
    )
    verdictgate.run(
        lambda text: text.split()[1], suite, repeats=2, run_id="ids", telemetry=memory.telemetry
    )
    memory.telemetry.shutdown()
    receiver = Receiver(new_store())
    receiver.ingest(
        extract_protobuf(encode_spans(memory.spans.get_finished_spans()).SerializeToString())
    )
    stored = list(receiver.store.evidence("ids").trials())
    assert {(t.case, t.aliases, t.key_id) for t in stored} == {
        (case.id, (fingerprint(case.input, key),), key_id(key)) for case in suite.cases
    }
    by_prints = [
        Trial(fingerprint(case.input, key), i, case.expected, "prints", key_id=key_id(key))
        for case in suite.cases
        for i in range(2)
    ]
    both = assess([*stored, *by_prints], suite, Policy(claim=Claim.POPULATION))
    assert both.population.cases == 6 and "mixed_case_names" not in both.reason_codes
    assert assess([*stored, *by_prints], suite).routes[0].cases == 3  # routes count inputs too


def test_a_restart_between_the_parts_of_a_sparse_case_changes_nothing(new_store, tmp_path):
    """A case whose trials jump far ahead is held as recorded, across a restart too."""
    first_part = [decision_span("r", "c0", i, "approve", "approve") for i in (0, 1, 200, 201)]
    first_part += [decision_span("r", "c1", i, "deny", "deny") for i in range(202)]
    rest = [decision_span("r", "c0", i, "approve", "approve") for i in range(2, 200)]
    answers = []
    for restart in (False, True):
        path = tmp_path / f"store-{restart}.sqlite"
        receiver = Receiver(new_store(path), None, ReceiverConfig(idle=3600))
        receiver.ingest(extract(request([run_span("r", 404), *first_part])))
        if restart:
            receiver.close()
            receiver = Receiver(new_store(path), None, ReceiverConfig(idle=3600))
        receiver.ingest(extract(request(rest)))
        assert receiver.flush() and receiver.store.run("r").final
        answers.append(receiver.assessment("r"))
        receiver.close()
    assert answers[0] == answers[1]
    assert answers[0].status is Status.QUALIFIED and answers[0].trials.received == 404


def test_a_restart_admits_a_run_whose_plan_was_complete_when_it_stopped(new_store, tmp_path):
    """Stopped between the commit of its last trials and the commit that made it final."""
    path = tmp_path / "store.sqlite"
    store = new_store(path)
    declared = run_attributes("r", SUITE, Policy(), 8, Isolation.FRESH_SESSION)
    trials = [Trial(f"c{c}", i, "approve", "r", "approve") for c in range(2) for i in range(4)]
    store.write(Batch(trials, [DeclaredRun.read(declared)], {"r": ("gate", "approval_gate")}))
    assert not store.run("r").final
    receiver = Receiver(new_store(path), None, ReceiverConfig(replica=LOCAL))  # the writer
    assert receiver.flush() and receiver.store.run("r").status is not None
    assert receiver.assessment("r").trials.received == 8


def test_a_store_of_one_process_takes_every_run_back_at_start_whoever_held_it(tmp_path):
    """A SQLite file has one writer: its runs' leases, whatever replica name took them, lapse
    with the process that held them, so a restart under another name carries on at once."""
    path = tmp_path / "store.sqlite"
    spans = stable_run("r", cases=2, trials=4)
    first = Receiver(Store(path), None, ReceiverConfig(replica="renamed"))
    first.ingest(extract(request([run_span("r", planned=8), *spans[:4]])))
    first.store.close()
    second = Receiver(Store(path))  # `local`, and the lease "renamed" took still holds
    second.ingest(extract(request(spans[4:])))  # completes the plan
    assert second.flush() and second.store.run("r").status is not None
    assert second.assessment("r").trials.received == 8
