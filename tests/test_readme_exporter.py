"""The README's way to point an exporter at `serve`: its variables, exactly as it prints them,
make the OpenTelemetry SDK's own exporters (OTLP/HTTP and OTLP/gRPC, no endpoint in code)
deliver a run's decision spans to a receiver that wants a token; without the token, nothing
is stored and the exporter says why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from receiver_support import running_server

README = Path(__file__).resolve().parents[1] / "README.md"
TOKEN = "s3cret-token"
CLIENT = """
import sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
if sys.argv[1] == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
import verdictgate

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))

@verdictgate.decision_point("payment_router", tracer_provider=provider)
def route(message):
    return "card_security" if "card" in message else "transfer_delay"

for index in range(4):
    for case, message in {"lost-card": "I lost my card", "late": "My transfer is late"}.items():
        with verdictgate.trial(run=sys.argv[2], case=case, index=index):
            route(message)
provider.shutdown()
"""


def readme_environment() -> dict[str, str]:
    """The variables the README's exporter block exports."""
    text = README.read_text()
    block = re.search(r"```bash[^\n]*\n((?:export OTEL_[^\n]*\n)+)```", text)
    assert block, "the README shows no exporter variables"
    return dict(re.findall(r"^export (\w+)=(\S+)", block.group(1), re.M))


def grpc_endpoint() -> str:
    """The gRPC endpoint the README says to set."""
    found = re.search(r"for OTLP/gRPC, set the endpoint to `(http://[^`]+)`", README.read_text())
    assert found, "the README names no gRPC endpoint"
    return found.group(1)


def export(transport: str, run: str, variables: dict[str, str]):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", CLIENT, transport, run],
        env={**environment, **variables},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_the_readme_variables_send_a_run_to_serve(transport):
    variables = readme_environment()
    assert set(variables) == {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    }
    with running_server(token=TOKEN) as server:
        ports = {"4318": server.http_port, "4317": server.grpc_port}
        endpoint = variables["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        if transport == "grpc":
            endpoint = grpc_endpoint()
        endpoint = re.sub(r":(4317|4318)\b", lambda m: f":{ports[m.group(1)]}", endpoint)
        with_token = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": variables[
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
            ].replace("TOKEN", TOKEN),
        }
        sent = export(transport, f"readme-{transport}", with_token)
        assert sent.returncode == 0, sent.stderr
        trials = list(server.receiver.store.evidence(f"readme-{transport}").trials())
        assert sorted((t.case, t.index, t.decision) for t in trials) == sorted(
            (case, index, route)
            for case, route in (("lost-card", "card_security"), ("late", "transfer_delay"))
            for index in range(4)
        )
        without = export(
            transport,
            f"readme-{transport}-no-token",
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint},
        )
        assert not list(server.receiver.store.evidence(f"readme-{transport}-no-token").trials())
        assert re.search(r"401|UNAUTHENTICATED|Unauthorized", without.stderr), without.stderr
