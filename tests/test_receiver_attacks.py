"""Hostile senders through the wire: each test is a row of issue 12's attack table, and asserts
what a careful server does (the transports' own rows are in test_receiver_transport.py, the
door's in test_receiver_door.py)."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from receiver_support import (
    any_value,
    decision_span,
    request,
    run_span,
    running_server,
    span,
    stable_run,
)
from verdictgate import Contract, Isolation, ManualClock, Policy, Status, Suite
from verdictgate.evidence import MAX_TRIAL_INDEX
from verdictgate.otel import conventions as names
from verdictgate.otel.spans import run_attributes
from verdictgate.v1 import verdictgate_pb2 as pb


def export(server, spans) -> ExportTraceServiceResponse:
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    try:
        return TraceServiceStub(channel).Export(request(spans), timeout=10)
    finally:
        channel.close()


def wait_final(server, run_id: str, timeout: float = 10.0):
    return server.receiver.wait(run_id, timeout)


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        (names.ISOLATION, "bogus"),
        (names.TOLERANCE, "0.05"),
        (names.TOLERANCE, float("nan")),
        (names.CONFIDENCE, 2.0),
        (names.PLAN_TRIALS, [1, 2]),
        (names.CONTRACT_TARGETS, ["deny"]),
        (names.TOLERANCE, -1.0),
        (names.PLAN_TRIALS, "ten"),
        (names.PLAN_TRIALS, -1),
        (names.PLAN_TRIALS, 1.5),
        (names.RUN_ID, ""),
        (names.CONTRACT_MINIMUM_CASES, ["approve=1_000"]),
        (names.CONTRACT_TARGETS, ["approve= 0.1"]),
    ],
)
def test_a_malformed_run_span_is_rejected_alone_and_later_runs_still_finish(attribute, value):
    poison = run_span("poison", planned=8)
    for item in poison.attributes:
        if item.key == attribute:
            item.value.CopyFrom(any_value(value))
    clock = ManualClock(time.time())
    with running_server(clock=clock) as server:
        reply = export(server, [poison, *stable_run("poison", cases=2, trials=4)])
        assert reply.partial_success.rejected_spans == 1
        assert "verdictgate.run" in reply.partial_success.error_message
        export(server, [run_span("later", planned=8), *stable_run("later", cases=2, trials=4)])
        export(server, stable_run("canary", cases=2, trials=2))
        clock.advance(31)  # the idle period is over for the canaries
        assert not wait_final(server, "later").in_progress
        assert not wait_final(server, "canary").in_progress
        assert not wait_final(server, "poison").in_progress  # its trials still end as a canary


def test_cases_at_sparse_indices_cost_memory_for_their_trials_not_their_indices():
    spans = [
        decision_span("sparse", f"s{n}", MAX_TRIAL_INDEX, "approve", "approve") for n in range(20)
    ]
    for timed in spans:  # as an exporter sends them: with times, so each has a latency
        timed.start_time_unix_nano, timed.end_time_unix_nano = 1_000_000, 4_000_000
    with running_server() as server:
        reply = export(server, [*spans, *stable_run("sparse", cases=2, trials=4)])
        assert reply.partial_success.rejected_spans == 0
        tracemalloc.start()
        try:
            assessment = server.receiver.assessment_of(server.receiver.store.run("sparse"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 100 << 20, f"assessment peaked at {peak >> 20} MiB"
    assert assessment.trials.received == 28
    # without a plan, a case is expected to span the longest of its route: the real indices
    assert assessment.trials.expected == 21 * (MAX_TRIAL_INDEX + 1) + 4
    assert "incomplete" in assessment.reason_codes


def test_twenty_watchers_share_assessments_and_all_see_the_final_admission():
    with running_server() as server:
        store = server.receiver.store
        reads: list[str] = []
        evidence = store.evidence
        store.evidence = lambda run_id: reads.append(run_id) or evidence(run_id)
        export(server, [run_span("watched", planned=400)])
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        watch = channel.unary_stream(
            "/verdictgate.v1.AdmissionService/WatchAdmission",
            request_serializer=pb.WatchAdmissionRequest.SerializeToString,
            response_deserializer=pb.Admission.FromString,
        )
        finals: list[bool] = []

        def watcher() -> None:
            seen = list(watch(pb.WatchAdmissionRequest(run_id="watched"), timeout=60))
            finals.append(bool(seen) and seen[-1].final)

        watchers = [threading.Thread(target=watcher, daemon=True) for _ in range(20)]
        for thread in watchers:
            thread.start()
        spans = stable_run("watched", cases=4, trials=100)
        for start in range(0, len(spans), 10):  # 40 exports while twenty clients watch
            export(server, spans[start : start + 10])
            export(server, stable_run(f"busy-{start}", cases=1, trials=2))  # other runs' traffic
        for thread in watchers:
            thread.join(timeout=30)
        channel.close()
    assert finals == [True] * 20
    # each change is assessed once for all twenty (and an open run at most once a second);
    # before, every watcher assessed the run on every change of any run: 20 x 80 reads
    assert reads.count("watched") <= 42


def test_a_second_run_span_cannot_replace_the_declaration():
    honest = run_span("r", planned=80)
    lenient_suite = Suite("gate", "approval_gate", (), Contract({"approve", "deny"}))
    rival = span(
        names.RUN_SPAN,
        run_attributes("r", lenient_suite, Policy(tolerance=0.6), 40, Isolation.FRESH_SESSION),
    )
    clock = ManualClock(time.time())
    with running_server(clock=clock) as server:
        export(server, [honest, *stable_run("r", trials=10)])
        export(server, [rival])
        clock.advance(31)
        assessment = wait_final(server, "r")
    assert assessment.policy.tolerance == Policy().tolerance
    assert "declaration_conflict" in assessment.reason_codes
    assert assessment.status is Status.REJECTED


def test_records_after_the_end_are_late_and_never_change_what_was_published():
    clock = ManualClock(time.time())
    with running_server(clock=clock) as server:
        export(server, [run_span("r", planned=80), *stable_run("r", trials=10)])
        clock.advance(31)
        published = wait_final(server, "r")
        export(server, stable_run("r", trials=20)[40:])  # 40 more, after the run ended
        after = server.receiver.assessment("r")
    assert after.trials.late == 40 and after.trials.received == published.trials.received
    assert (after.status, after.reason_codes) == (published.status, published.reason_codes)


def test_content_on_a_run_span_is_never_stored(tmp_path):
    noisy = run_span("r", planned=8)
    content = {"gen_ai.input.messages": "my card number is 4111", "user.email": "a@b.c"}
    noisy.attributes.extend(span("x", content).attributes)
    store = tmp_path / "store.sqlite"
    with running_server(store) as server:
        export(server, [noisy])
        declaration = server.receiver.store.run("r").declaration
    assert declaration is not None and set(declaration) <= names.RUN_SPAN_ATTRIBUTES
    raw = b"".join(path.read_bytes() for path in tmp_path.iterdir())
    assert b"4111" not in raw and b"a@b.c" not in raw
    assert oct(store.stat().st_mode & 0o777) == "0o600"
    assert "4111" not in json.dumps(declaration)


def test_a_run_span_after_the_end_never_changes_what_was_published():
    lenient_suite = Suite("gate", "approval_gate", (), Contract({"approve", "deny"}))
    rival = span(
        names.RUN_SPAN,
        run_attributes("canary", lenient_suite, Policy(tolerance=0.6), 8, Isolation.FRESH_SESSION),
    )
    clock = ManualClock(time.time())
    with running_server(clock=clock) as server:
        export(server, stable_run("canary", cases=2, trials=4))
        clock.advance(31)
        published = wait_final(server, "canary")
        export(server, [rival])
        after = server.receiver.assessment("canary")
    assert not published.in_progress
    assert after.policy.tolerance == published.policy.tolerance
    assert (after.status, after.reason_codes) == (published.status, published.reason_codes)
    assert after.trials.late == 1


def test_watchers_beyond_the_limit_are_told_to_retry_with_retry_info():
    from google.rpc import error_details_pb2

    from verdictgate.receiver.server import Limits

    with running_server(limits=Limits(max_watchers=2)) as server:
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        watch = channel.unary_stream(
            "/verdictgate.v1.AdmissionService/WatchAdmission",
            request_serializer=pb.WatchAdmissionRequest.SerializeToString,
            response_deserializer=pb.Admission.FromString,
        )
        waiting = [watch(pb.WatchAdmissionRequest(run_id="later"), timeout=30) for _ in range(2)]
        export(server, stable_run("later", cases=1, trials=2))  # both see it appear: admitted
        for stream in waiting:
            assert next(stream).run_id == "later"
        with pytest.raises(grpc.RpcError) as refused:
            next(watch(pb.WatchAdmissionRequest(run_id="later"), timeout=30))
        for stream in waiting:
            stream.cancel()
        channel.close()
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(refused.value.trailing_metadata())
    retry = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.seconds == 1
