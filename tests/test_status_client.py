"""`verdictgate status` as a CI job uses it: started before its run exists, and against TLS
receivers it cannot verify, always one clear line and a documented exit code."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from receiver_support import request, run_span, stable_run
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.server import Server, Tls
from verdictgate.receiver.store import Store

BINARY = str(Path(sys.executable).parent / "verdictgate")


def status(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [BINARY, "status", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture
def server():
    served = Server(Receiver(Store()), grpc_listen="127.0.0.1:0", http_listen="127.0.0.1:0")
    served.start()
    yield served
    served.stop()


def test_status_wait_waits_for_a_run_that_has_not_started(server):
    endpoint = f"127.0.0.1:{server.grpc_port}"
    waiting = status("--endpoint", endpoint, "--run", "later", "--wait", "60", "--format", "json")
    time.sleep(1.0)  # the CI job started `status` first; the agents send after
    assert waiting.poll() is None, waiting.communicate()
    body = request([run_span("later", 80), *stable_run("later")]).SerializeToString()
    server.receiver.ingest(extract_protobuf(body))
    stdout, stderr = waiting.communicate(timeout=60)
    assert waiting.returncode == 3, stderr  # final: 40 pairs are too few to qualify
    assert stderr.startswith(f"verdictgate: waiting up to 60 s for run 'later' at {endpoint}")
    report = json.loads(stdout)
    assert report["status"] == "inconclusive" and report["trials"]["received"] == 80
    assert "in_progress" not in [reason["code"] for reason in report["reasons"]]


def test_status_wait_on_a_run_that_never_appears_says_so(server):
    endpoint = f"127.0.0.1:{server.grpc_port}"
    waiting = status("--endpoint", endpoint, "--run", "never", "--wait", "1")
    stdout, stderr = waiting.communicate(timeout=60)
    assert waiting.returncode == 2 and stdout == ""
    assert stderr == (
        f"verdictgate: waiting up to 1 s for run 'never' at {endpoint} to be final\n"
        f"verdictgate: error: no run 'never' appeared at {endpoint} within 1 s\n"
    )


def test_status_without_wait_on_an_unknown_run(server):
    endpoint = f"127.0.0.1:{server.grpc_port}"
    _, stderr = status("--endpoint", endpoint, "--run", "nope").communicate(timeout=60)
    assert stderr == "verdictgate: error: unknown run 'nope'\n"


def test_status_writes_its_report_to_output(server, tmp_path):
    body = request([run_span("written", 8), *stable_run("written", 2, 4)]).SerializeToString()
    server.receiver.ingest(extract_protobuf(body))
    endpoint = f"127.0.0.1:{server.grpc_port}"
    report = tmp_path / "status.json"
    asked = status(
        "--endpoint",
        endpoint,
        "--run",
        "written",
        "--wait",
        "30",
        "--format",
        "json",
        "--output",
        str(report),
    )
    stdout, stderr = asked.communicate(timeout=60)
    assert stdout == "" and asked.returncode == 3, stderr
    assert json.loads(report.read_text())["run"]["id"] == "written"


def certificate(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
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
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificates")
def test_tls_failures_are_named_as_tls_failures(tmp_path, server):
    cert, key = certificate(tmp_path, "receiver")
    other, _ = certificate(tmp_path, "other")
    tls = Server(
        Receiver(Store()),
        grpc_listen="127.0.0.1:0",
        http_listen="127.0.0.1:0",
        tls=Tls(str(cert), str(key)),
    )
    tls.start()
    try:
        secure, plain = f"127.0.0.1:{tls.grpc_port}", f"127.0.0.1:{server.grpc_port}"
        cases = [
            (
                [secure],
                f"{secure} speaks TLS: give the CA certificate that signed it with --tls-ca FILE",
            ),
            (
                [secure, "--tls-ca", str(other)],
                f"TLS handshake with {secure} failed: its certificate is not signed by the CA in --tls-ca {other}",
            ),
            (
                [plain, "--tls-ca", str(cert)],
                f"TLS handshake with {plain} failed: it does not speak TLS (drop --tls-ca)",
            ),
        ]
        for (endpoint, *extra), message in cases:
            client = status("--endpoint", endpoint, "--run", "r", *extra)
            stdout, stderr = client.communicate(timeout=60)
            assert (client.returncode, stdout, stderr) == (
                2,
                "",
                f"verdictgate: error: {message}\n",
            )
        trusted = status("--endpoint", secure, "--run", "r", "--tls-ca", str(cert))
        assert trusted.communicate(timeout=60)[1] == "verdictgate: error: unknown run 'r'\n"
    finally:
        tls.stop()


def test_status_wait_started_before_the_receiver_is_up(tmp_path):
    from components import free_port

    port = free_port()
    waiting = status("--endpoint", f"127.0.0.1:{port}", "--run", "early", "--wait", "60")
    time.sleep(1.5)  # nothing listens yet: the client keeps trying
    assert waiting.poll() is None, waiting.communicate()
    served = Server(Receiver(Store()), grpc_listen=f"127.0.0.1:{port}", http_listen="127.0.0.1:0")
    served.start()
    try:
        body = request([run_span("early", 80), *stable_run("early")]).SerializeToString()
        served.receiver.ingest(extract_protobuf(body))
        stdout, stderr = waiting.communicate(timeout=60)
    finally:
        served.stop()
    assert waiting.returncode == 3, stderr
    assert "Inconclusive" in stdout and "in_progress" not in stdout


def test_watchers_never_starve_exports(server):
    """20 `status --wait` streams on runs that have not started hold no thread exports need."""
    import threading

    import grpc
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    from otel_support import run_spans
    from verdictgate.receiver.transport.grpc_api import ADMISSION_SERVICE
    from verdictgate.v1 import verdictgate_pb2 as pb

    endpoint = f"127.0.0.1:{server.grpc_port}"
    channel = grpc.insecure_channel(endpoint)
    watch = channel.unary_stream(
        f"/{ADMISSION_SERVICE}/WatchAdmission",
        request_serializer=pb.WatchAdmissionRequest.SerializeToString,
        response_deserializer=pb.Admission.FromString,
    )
    finals: list[str] = []

    def watcher(number: int) -> None:
        for admission in watch(pb.WatchAdmissionRequest(run_id=f"job-{number}"), timeout=60):
            if admission.final:
                finals.append(admission.run_id)

    threads = [threading.Thread(target=watcher, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=5)
    try:
        results = [exporter.export(run_spans(f"job-{n}", flips=False)) for n in range(20)]
    finally:
        exporter.shutdown()
    for thread in threads:
        thread.join(60)
    channel.close()
    assert results == [SpanExportResult.SUCCESS] * 20
    assert sorted(finals) == sorted(f"job-{n}" for n in range(20))
