"""Usage and input errors: one line on stderr naming the problem, exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import stable_answers, suite_document, trial_records


@pytest.fixture
def files(write):
    return {
        "trials": write("t.jsonl", trial_records(stable_answers())),
        "suite": write("s.json", suite_document()),
        "bad_line": write("bad.jsonl", [{"case": "c", "trial": 0, "outcome": "decision"}]),
        "bad_suite": write("bad.json", {"schema": "verdictgate.suite/v1", "cases": "x"}),
    }


ERRORS = [
    (["assess", "--trials", "{missing}"], "cannot read file"),
    (["assess", "--trials", "{bad_line}"], "bad.jsonl:1: field verdict"),
    (["assess", "--trials", "{trials}", "--suite", "{bad_suite}"], "field cases"),
    (["assess", "--trials", "{trials}", "--tolerance", "2"], "tolerance"),
    (["assess", "--trials", "{trials}", "--tolerance", "0.1", "--precision", "cheap"], "not both"),
    (
        ["assess"],
        "give exactly one of --trials, --agentverity, --promptfoo, --deepeval, --jsonl, --otlp-json",
    ),
    (["assess", "--trials", "{trials}", "--format", "yaml"], "Invalid value for '--format'"),
    (["run", "--suite", "{suite}"], "Missing option '--agent'"),
    (["run", "--suite", "{suite}", "--agent", "nowhere.py:make"], "no such file"),
    (
        ["run", "--suite", "{suite}", "--agent", "json:nothing_here"],
        "json has no 'nothing_here'",
    ),
    (["run", "--suite", "{suite}", "--agent", "no_colon"], "FILE.py:NAME"),
    (["plan", "--observed", "9/3"], "FLIPS/PAIRS"),
    (
        ["snapshot", "--trials", "{trials}", "--suite", "{suite}", "--output", "{out}"],
        "--accept-reference",
    ),
    (["check", "--snapshot", "{suite}", "--trials", "{trials}"], "verdictgate.snapshot/v1"),
    (["assess", "--trials", "{trials}", "--bogus"], "No such option"),
]


@pytest.mark.parametrize(("args", "message"), ERRORS)
def test_errors_exit_2_with_one_clear_line(cli, files, tmp_path, args, message):
    values = {**files, "missing": str(tmp_path / "none.jsonl"), "out": str(tmp_path / "b.json")}
    result = cli(*(arg.format(**values) for arg in args))
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith(
        "verdictgate: error:"
    )
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_a_factory_that_raises_is_an_input_error(cli, files, tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text("def make():\n    raise RuntimeError('no model')\n")
    result = cli("run", "--suite", files["suite"], "--agent", f"{agent}:make")
    assert result.exit_code == 2 and "FACTORY() failed: RuntimeError: no model" in result.stderr


def test_a_bad_otlp_endpoint_is_refused_before_any_call(cli, files):
    router = Path(__file__).resolve().parents[1] / "examples" / "payment_router.py"
    result = cli(
        "run",
        "--suite",
        files["suite"],
        "--agent",
        f"{router}:stable_router",
        "--otlp-endpoint",
        "localhost:4317",
    )
    assert result.exit_code == 2 and "--otlp-endpoint" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grpc-listen", "4317"], "HOST:PORT"),
        (["--token-file", "/nonexistent/token"], "cannot read"),
        (["--tls-cert", "cert.pem"], "--tls-cert and --tls-key go together"),
        (["--grace", "soon"], "duration"),
    ],
)
def test_serve_refuses_bad_settings_before_listening(cli, tmp_path, args, message):
    result = cli("serve", "--store", str(tmp_path / "s.sqlite"), *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_an_unreachable_otlp_endpoint_is_refused_before_any_call(cli, files, tmp_path):
    import socket

    with socket.socket() as probe:  # a port nothing listens on once this socket is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    calls = tmp_path / "calls.txt"
    agent = tmp_path / "agent.py"
    agent.write_text(
        f"def make():\n    def call(text):\n        open({str(calls)!r}, 'a').write('x')\n"
        "        return 'approve'\n    return call\n"
    )
    result = cli(
        "run",
        "--suite",
        files["suite"],
        "--agent",
        f"{agent}:make",
        "--otlp-endpoint",
        f"http://127.0.0.1:{port}",
    )
    assert result.exit_code == 2 and f"cannot connect to 127.0.0.1:{port}" in result.stderr
    assert not calls.exists()


def test_a_run_whose_spans_a_receiver_refuses_says_so_and_exits_2(cli, files, monkeypatch):
    """`run --otlp-endpoint` to a receiver that wants a token, without one: every export is
    refused UNAUTHENTICATED: the run prints its report, says how many spans were lost and
    exits 2, not 0."""
    from receiver_support import running_server

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_HEADERS", raising=False)
    router = Path(__file__).resolve().parents[1] / "examples" / "payment_router.py"
    with running_server(token="s3cret") as server:
        result = cli(
            "run",
            "--suite",
            files["suite"],
            "--agent",
            f"{router}:stable_router",
            "--otlp-endpoint",
            f"http://127.0.0.1:{server.grpc_port}",
        )
    assert result.exit_code == 2, result.stderr
    assert result.stdout.startswith("Rejected: ")  # the report is out; the telemetry is not
    assert "of the run's spans were not acknowledged" in result.stderr
    assert "UNAUTHENTICATED" in result.stderr
