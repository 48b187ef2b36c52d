"""The generated code in src/verdictgate/v1 matches proto/verdictgate/v1 (regenerate: `make proto`)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_generated_code_is_not_stale(tmp_path):
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools is a dev dependency")
    protos = [
        str(ROOT / "proto/verdictgate/v1" / name)
        for name in ("verdictgate.proto", "otlp_view.proto")
    ]
    status = protoc.main(
        [
            "protoc",
            f"-I{ROOT / 'proto'}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            *protos,
        ]
    )
    assert status == 0
    for name in (
        "verdictgate_pb2.py",
        "otlp_view_pb2.py",
        "verdictgate_pb2.pyi",
        "otlp_view_pb2.pyi",
    ):
        fresh = (tmp_path / "verdictgate" / "v1" / name).read_text()
        committed = (ROOT / "src" / "verdictgate" / "v1" / name).read_text()
        assert committed == fresh, f"{name} is stale: run `make proto`"


def test_the_trial_message_carries_every_trials_file_field():
    from verdictgate.v1 import verdictgate_pb2

    fields = {f.name for f in verdictgate_pb2.Trial.DESCRIPTOR.fields}
    assert fields == {
        "run",
        "suite",
        "point",
        "case",
        "trial",
        "outcome",
        "verdict",
        "tools",
        "reason",
        "error_type",
        "expected",
        "invariants_failed",
        "invariants_warned",
        "passed",
        "latency_ms",
        "evaluation_skipped",
        "isolation",
        "tied_steps",
        "aliases",
        "key_id",
    }


def test_the_hand_registered_admission_service_serves_every_method_of_the_proto():
    from verdictgate.receiver.transport.grpc_api import ADMISSION_SERVICE
    from verdictgate.v1 import verdictgate_pb2

    service = verdictgate_pb2.DESCRIPTOR.services_by_name["AdmissionService"]
    assert service.full_name == ADMISSION_SERVICE
    assert {m.name for m in service.methods} == {"GetAdmission", "WatchAdmission", "ListRuns"}
    streaming = {m.name for m in service.methods if m.server_streaming}
    assert streaming == {"WatchAdmission"}
