"""Decision-point instrumentation: decorator and context manager, sync and async, errors."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import verdictgate
from verdictgate import NoDecision, decision, decision_point, fingerprint, trial
from verdictgate.fingerprints import KEY_VARIABLE, key_id
from verdictgate.otel import conventions as names


@pytest.fixture
def traced():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def finished() -> list[dict]:
        return [dict(span.attributes) for span in exporter.get_finished_spans()]

    return provider, finished


def test_decorated_sync_function_records_scope_and_verdict(traced, monkeypatch):
    """A case named by id whose input is at hand also carries the input's fingerprint, a further
    name of it (`verdictgate.case.aliases`), so runs named either way count it once."""
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    provider, finished = traced

    @decision_point("router", tracer_provider=provider, verdict=lambda result: result["route"])
    def route(message: str) -> dict:
        return {"route": "billing", "confidence": 0.9}

    with trial(run="r", index=3, case="c7", expected="billing", suite="s"):
        assert route("hello") == {"route": "billing", "confidence": 0.9}
    (span,) = finished()
    assert span == {
        names.POINT: "router",
        names.RUN_ID: "r",
        names.TRIAL: 3,
        names.CASE_ID: "c7",
        names.CASE_EXPECTED: "billing",
        names.SUITE: "s",
        names.OUTCOME: "decision",
        names.VERDICT: "billing",
        names.CASE_ALIASES: (fingerprint("hello", None),),
    }


def test_a_keyed_fingerprint_carries_its_key_id_beside_whichever_name_the_trial_has(traced):
    """Named by id: the input's keyed fingerprint is a further name, with its key's id. Named by
    that fingerprint: the key's id alone. Named by a keyed fingerprint it did not make (another
    key's, say): its own fingerprint is a further name, with no key id, which could be wrong."""
    provider, finished = traced
    key = b"a decision key"
    for case in ("c7", None, "hmac-sha256:" + "0" * 64):
        with (
            trial(run="r", index=0, case=case),
            decision("p", input="hello", tracer_provider=provider, key=key) as d,
        ):
            d.record("billing")
    by_id, by_print, by_other = finished()
    mine = fingerprint("hello", key)
    assert (by_id[names.CASE_ALIASES], by_id[names.CASE_KEY_ID]) == ((mine,), key_id(key))
    assert (by_print[names.CASE_ID], by_print[names.CASE_KEY_ID]) == (mine, key_id(key))
    assert names.CASE_ALIASES not in by_print
    assert by_other[names.CASE_ALIASES] == (mine,) and names.CASE_KEY_ID not in by_other
    assert "hello" not in repr([by_id, by_print, by_other])


def test_decorated_async_function_and_tool_paths(traced):
    provider, finished = traced

    @decision_point("planner", tracer_provider=provider)
    async def plan(message: str) -> list[str]:
        await asyncio.sleep(0)
        return ["search", "book"]

    with trial(run="r", index=0):
        assert asyncio.run(plan("trip to Rome")) == ["search", "book"]
    (span,) = finished()
    assert span[names.TOOLS] == ("search", "book") and span[names.OUTCOME] == "decision"
    assert span[names.CASE_ID].startswith(("sha256:", "hmac-sha256:"))


def test_an_exception_is_an_error_outcome_and_is_re_raised(traced):
    provider, finished = traced

    @decision_point("router", tracer_provider=provider)
    def route(message: str) -> str:
        raise KeyError(message)

    with pytest.raises(KeyError):
        route("secret")
    (span,) = finished()
    assert span[names.OUTCOME] == "error" and span[names.ERROR_TYPE] == "KeyError"


def test_context_manager_no_decision_unrecorded_and_unreadable(traced):
    provider, finished = traced
    with decision("gate", input="x", tracer_provider=provider) as d:
        d.record(NoDecision("refused"))
    with decision("gate", tracer_provider=provider):
        pass
    with decision("gate", tracer_provider=provider) as d:
        d.record(3.14)

    @decision_point("gate", tracer_provider=provider, verdict=lambda result: result.missing)
    def gate(text: str) -> str:
        return "approve"

    assert gate("y") == "approve"  # a verdict that cannot be read never breaks the caller
    outcomes = [
        (s[names.OUTCOME], s.get(names.NO_DECISION_REASON) or s.get(names.ERROR_TYPE))
        for s in finished()
    ]
    assert outcomes == [
        ("no_decision", "refused"),
        ("error", "unrecorded"),
        ("error", "invalid_return"),
        ("error", "verdict_unreadable"),
    ]


def test_without_an_sdk_the_decorator_is_transparent():
    @decision_point("router")
    def route(message: str) -> str:
        return "billing"

    with trial(run="r", index=0):
        assert route("hello") == "billing"
    with decision("router") as d:
        d.record("billing")
    assert d.recorded


def test_the_trial_scope_is_restored_after_the_block(traced):
    provider, finished = traced
    with trial(run="outer", index=1):
        with trial(run="inner", index=2):
            pass
        with decision("p", tracer_provider=provider) as d:
            d.record("x")
    with decision("p", tracer_provider=provider) as d:
        d.record("y")
    first, second = finished()
    assert (first[names.RUN_ID], first[names.TRIAL]) == ("outer", 1)
    assert names.RUN_ID not in second and names.TRIAL not in second


def test_evaluation_run_declares_the_contract():
    suite = verdictgate.Suite(
        "s", "p", (), verdictgate.Contract({"a", "b"}, targets={"a": 0.01}, minimum_cases={"b": 2})
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with verdictgate.evaluation_run(
        run_id="r",
        suite=suite,
        policy=verdictgate.Policy(tolerance=0.1),
        planned_trials=10,
        isolation=verdictgate.Isolation.FRESH_SESSION,
        tracer_provider=provider,
    ):
        pass
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes)
    assert span.name == names.RUN_SPAN
    assert attributes[names.CONTRACT_TARGETS] == ("a=0.01",)
    assert attributes[names.CONTRACT_MINIMUM_CASES] == ("b=2",)
    assert attributes[names.PLAN_TRIALS] == 10 and attributes[names.ISOLATION] == "fresh-session"


def test_instrumenting_needs_the_api_only():
    import subprocess
    import sys

    code = (
        "import sys, verdictgate\n"
        "@verdictgate.decision_point('p')\n"
        "def f(x): return 'a'\n"
        "with verdictgate.trial(run='r', index=0): f('x')\n"
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('opentelemetry.')}))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "sdk" not in loaded and "trace" in loaded


def test_every_public_name_resolves_to_what_it_names():
    import importlib
    import pkgutil

    submodules = {module.name for module in pkgutil.iter_modules(verdictgate.__path__)}
    assert not set(verdictgate.__all__) & submodules  # a submodule would shadow the name
    for name in verdictgate.__all__:
        assert getattr(verdictgate, name) is not None
    assert callable(importlib.import_module("verdictgate").trial)
