"""End to end beside a real collector: runner -> rotel (Rust OTLP collector) -> verdictgate serve."""

from __future__ import annotations

import json
from pathlib import Path

from collector_support import rotel_agent, start_collector
from components import free_port
from receiver_support import running_server

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_runner_through_a_real_collector_to_the_receiver(cli, tmp_path):
    binary = rotel_agent()
    with running_server(tmp_path / "store.sqlite") as server:
        collector, port = start_collector(binary, server.grpc_port, tmp_path / "rotel.log")
        try:
            trials = tmp_path / "trials.jsonl"
            result = cli(
                "run",
                "--agent",
                f"{EXAMPLES / 'payment_router.py'}:flipping_router",
                "--suite",
                str(EXAMPLES / "payment_suite.json"),
                "--run-id",
                "e2e-1",
                "--isolation",
                "fresh-instance",
                "--format",
                "json",
                "--trials-out",
                str(trials),
                "--otlp-endpoint",
                f"http://127.0.0.1:{port}",
            )
            assert result.exit_code == 1, result.output
            admitted = server.receiver.wait("e2e-1", timeout=60)
        finally:
            collector.terminate()
            collector.wait(10)
        status = cli(
            "status",
            "--endpoint",
            f"127.0.0.1:{server.grpc_port}",
            "--run",
            "e2e-1",
            "--format",
            "json",
        )
    assert admitted is not None and not admitted.in_progress, (tmp_path / "rotel.log").read_text()
    offline = cli(
        "assess",
        "--trials",
        str(trials),
        "--suite",
        str(EXAMPLES / "payment_suite.json"),
        "--format",
        "json",
        "--isolation",
        "fresh-instance",
    )
    expected = json.loads(offline.stdout)
    received = json.loads(status.stdout)
    assert status.exit_code == offline.exit_code == 1
    assert received["status"] == expected["status"] == json.loads(result.stdout)["status"]
    assert received["trials"]["received"] == expected["trials"]["received"] == 856
    for field in ("stability", "coverage", "dominance"):
        assert received[field] == expected[field]
    assert [r["code"] for r in received["reasons"]] == [r["code"] for r in expected["reasons"]]


def test_status_of_an_unknown_run_and_of_a_run_in_progress(cli, tmp_path):
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

    from receiver_support import request, run_span, stable_run

    with running_server() as server:
        endpoint = f"127.0.0.1:{server.grpc_port}"
        unknown = cli("status", "--endpoint", endpoint, "--run", "nope")
        assert unknown.exit_code == 2 and "unknown run 'nope'" in unknown.stderr
        stub = TraceServiceStub(grpc.insecure_channel(endpoint))
        spans = stable_run("slow", cases=4, trials=40)
        stub.Export(request([run_span("slow", planned=160), *spans[:100]]))
        waiting = cli("status", "--endpoint", endpoint, "--run", "slow", "--format", "json")
        assert waiting.exit_code == 3
        assert "in_progress" in [r["code"] for r in json.loads(waiting.stdout)["reasons"]]
        stub.Export(request(spans[100:]))
        done = cli("status", "--endpoint", endpoint, "--run", "slow", "--wait", "10")
        assert done.exit_code == 0 and "Qualified" in done.stdout
        from verdictgate.receiver.transport.grpc_api import ADMISSION_SERVICE
        from verdictgate.v1 import verdictgate_pb2 as pb

        list_runs = grpc.insecure_channel(endpoint).unary_unary(
            f"/{ADMISSION_SERVICE}/ListRuns",
            request_serializer=pb.ListRunsRequest.SerializeToString,
            response_deserializer=pb.ListRunsResponse.FromString,
        )
        (listed,) = list_runs(pb.ListRunsRequest(), timeout=10).runs
        assert (listed.run_id, listed.final, listed.trials_received) == ("slow", True, 160)
    gone = cli("status", "--endpoint", f"127.0.0.1:{free_port()}", "--run", "x")
    assert gone.exit_code == 2 and "cannot reach" in gone.stderr
