"""No raw input text leaves the process through any exported span, metric, event or resource."""

from __future__ import annotations

import json

import pytest

import verdictgate
from otel_support import MemoryTelemetry
from verdictgate import Case, Contract, Suite
from verdictgate.otel import conventions as names

INPUTS = {
    "approve": "Customer Ada Lovelace, account 4711, asks to approve refund of 12 EUR",
    "deny": "Customer Grace Hopper, account 0815, wants a refund after 200 days",
    "review": "Customer Alan Turing, account 1234, conflicting ledger entries",
}


def leaky_agent(text: str):
    """Answers by keyword; on one input it raises an error whose message quotes the input."""
    if "Grace" in text:
        raise ValueError(f"cannot handle {text!r}")
    return "review" if "conflicting" in text else "approve"


def exported_text(memory: MemoryTelemetry) -> str:
    spans = [json.loads(span.to_json()) for span in memory.spans.get_finished_spans()]
    logs = [json.loads(record.to_json()) for record in memory.logs.get_finished_logs()]
    metrics = memory.metrics.get_metrics_data()
    return json.dumps(spans) + json.dumps(logs) + (metrics.to_json() if metrics else "")


@pytest.mark.parametrize("key", [None, "a-secret-key"])
def test_nothing_exported_contains_an_input(monkeypatch, key):
    if key is None:
        monkeypatch.delenv("VERDICTGATE_FINGERPRINT_KEY", raising=False)
    else:
        monkeypatch.setenv("VERDICTGATE_FINGERPRINT_KEY", key)
    suite = Suite(
        name="refunds",
        point="refund_gate",
        cases=tuple(Case.from_input(text, route) for route, text in INPUTS.items()),
        contract=Contract({"approve", "deny", "review"}),
    )
    memory = MemoryTelemetry()
    assessment = verdictgate.run(leaky_agent, suite, repeats=4, telemetry=memory.telemetry)
    memory.telemetry.shutdown()

    everything = exported_text(memory)
    assert names.ADMISSION_SPAN in everything and names.EVALUATION_EVENT in everything
    for text in INPUTS.values():
        assert text not in everything
        for fragment in ("Ada Lovelace", "Grace Hopper", "Alan Turing", "ledger entries"):
            assert fragment not in everything

    decision_spans = [
        s for s in memory.spans.get_finished_spans() if s.name == "decide refund_gate"
    ]
    assert len(decision_spans) == 12 == assessment.trials.received
    prefix = "sha256:" if key is None else "hmac-sha256:"
    assert all(span.attributes[names.CASE_ID].startswith(prefix) for span in decision_spans)
    assert all(not span.events for span in decision_spans)  # exceptions are not recorded
    errors = [s for s in decision_spans if s.attributes[names.OUTCOME] == "error"]
    assert len(errors) == 4 and {s.attributes[names.ERROR_TYPE] for s in errors} == {"ValueError"}
    assert all(s.status.description is None for s in errors)


def test_the_decorator_fingerprints_the_input_it_never_exports(monkeypatch):
    monkeypatch.setenv("VERDICTGATE_FINGERPRINT_KEY", "k")
    memory = MemoryTelemetry()

    @verdictgate.decision_point("router", tracer_provider=memory.telemetry.tracer_provider)
    def route(message: str) -> str:
        return "billing"

    with verdictgate.trial(run="canary", index=0):
        assert route("my secret message") == "billing"
    memory.telemetry.shutdown()
    (span,) = [s for s in memory.spans.get_finished_spans() if s.name == "decide router"]
    assert span.attributes[names.CASE_ID] == verdictgate.fingerprint("my secret message", b"k")
    assert "my secret message" not in exported_text(memory)
