"""`convert` is lossless: for every source, assessing the converted trials file gives the same
JSON report as assessing the source itself, field for field (run ids aside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentverity_support import EVIDENCE

FIXTURES = Path(__file__).resolve().parents[1] / "examples"
POLICY = ("--pass-rate", "0.5", "--max-p95-ms", "5000", "--tolerance", "0.2")


def span_line(attributes: dict, name: str, start: int = 0, end: int = 0) -> str:
    def value(v):
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, list):
            return {"arrayValue": {"values": [{"stringValue": x} for x in v]}}
        return {"stringValue": v}

    span = {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [{"key": k, "value": value(v)} for k, v in attributes.items()],
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})


def otlp_capture(path: Path) -> Path:
    lines = [
        span_line(
            {
                "verdictgate.run.id": "cap",
                "verdictgate.suite": "s",
                "verdictgate.point": "p",
                "verdictgate.isolation": "fresh-instance",
                "verdictgate.plan.trials": 16,
            },
            "verdictgate.run",
        )
    ]
    for case, route in (("c1", "approve"), ("c2", "deny")):
        for index in range(8):
            attributes = {
                "verdictgate.run.id": "cap",
                "verdictgate.case.id": case,
                "verdictgate.trial": index,
                "verdictgate.outcome": "decision",
                "verdictgate.case.expected": route,
                "verdictgate.verdict": route if index != 5 else "review",
                "verdictgate.passed": index % 3 != 0,
            }
            if index == 2:
                attributes["verdictgate.invariant.warned"] = ["short"]
            if case == "c1":  # a further name of its input, and the key id of its keyed names
                attributes["verdictgate.case.aliases"] = ["hmac-sha256:" + "1" * 64]
                attributes["verdictgate.case.key_id"] = "0123456789abcdef"
            lines.append(
                span_line(attributes, "decide p", 1_000_000, 1_000_000 + 10**6 * (index + 1))
            )
    path.write_text("\n".join(lines) + "\n")
    return path


def trials_file(path: Path) -> Path:
    records = []
    for case, route in (("c1", "approve"), ("c2", "deny")):
        for index in range(6):
            record = {
                "run": "t",
                "case": case,
                "trial": index,
                "outcome": "decision",
                "verdict": route,
                "expected": route,
                "latency_ms": 10.0 + index,
                "passed": index != 4,
                "isolation": "fresh-session",
            }
            if index == 3:
                record.update(invariants_failed=["no_ids"], evaluation_skipped=True)
            if index == 5:
                record.update(verdict=None, tools=["lookup", "refund"], tied_steps=[[0, 2]])
            if case == "c2":
                record.update(aliases=["hmac-sha256:" + "2" * 64], key_id="0123456789abcdef")
            records.append(record)
    records.append(
        {"run": "t", "case": "c3", "trial": 0, "outcome": "error", "error_type": "Timeout"}
    )
    records.append({"run": "t", "case": "c3", "trial": 1, "outcome": "decision", "tools": []})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def jsonl_rows(path: Path) -> Path:
    rows = [
        {
            "ticket": f"T{n % 3}",
            "out": {"route": ["a", "b", "a"][n % 3]},
            "n": n // 3,
            "want": ["a", "b", "a"][n % 3],
        }
        for n in range(12)
    ]
    rows.append({"ticket": "T9", "out": {"route": []}, "n": 0, "want": "a"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


SOURCES = {
    "promptfoo": lambda tmp: [
        "--promptfoo",
        str(FIXTURES / "promptfoo" / "promptfoo-sample.json"),
        "--provider",
        "stochastic-router",
        "--decision-path",
        "route",
        "--expected-var",
        "expected_route",
    ],
    "deepeval": lambda tmp: [
        "--deepeval",
        str(FIXTURES / "deepeval" / "deepeval-test-run-sample.json"),
    ],
    "agentverity": lambda tmp: ["--agentverity", str(_write(tmp / "e.json", EVIDENCE))],
    "jsonl": lambda tmp: [
        "--jsonl",
        str(jsonl_rows(tmp / "rows.jsonl")),
        "--case-path",
        "ticket",
        "--decision-path",
        "out.route",
        "--trial-path",
        "n",
        "--expected-path",
        "want",
    ],
    "otlp_json": lambda tmp: ["--otlp-json", str(otlp_capture(tmp / "capture.jsonl"))],
    "trials": lambda tmp: ["--trials", str(trials_file(tmp / "t.jsonl"))],
}


def _write(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document))
    return path


def report(cli, *args: str) -> dict:
    result = cli("assess", *args, *POLICY, "--format", "json")
    assert result.exit_code in (0, 1, 3), result.stderr
    document = json.loads(result.stdout)
    document["run"].pop("id")
    return document


CARRIED = {  # what each source records beyond decisions: (judged, timed, invariants, isolation)
    "agentverity": (0, None, {}, "fresh-session"),
    "deepeval": (10, None, {}, "unknown"),
    "jsonl": (0, None, {}, "unknown"),
    "otlp_json": (16, 16, {"warned": {"short": 2}}, "fresh-instance"),
    "promptfoo": (55, 60, {}, "unknown"),
    "trials": (12, 12, {"failed": {"no_ids": 2}}, "fresh-session"),
}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_assess_of_convert_equals_assess_of_the_source(cli, tmp_path, kind):
    source = SOURCES[kind](tmp_path)
    out = tmp_path / "converted.jsonl"
    converted = cli("convert", *source, "--output", str(out))
    assert converted.exit_code == 0, converted.stderr
    direct = report(cli, *source)
    again = report(cli, "--trials", str(out))
    assert again == direct
    judged, timed, invariants, isolation = CARRIED[kind]  # so the equality is not vacuous
    assert (direct.get("pass_rate") or {}).get("judged", 0) == judged
    assert (direct.get("latency") or {}).get("trials") == timed
    assert {k: v for k, v in direct["invariants"].items() if v} == invariants
    assert direct["run"]["isolation"] == isolation
    assert direct["trials"]["ambiguous_order"] == (2 if kind == "trials" else 0)
    if kind in ("trials", "otlp_json"):  # a case's further names and key id survive it
        schemes = direct["population"]["case_names"]["schemes"]
        assert {"scheme": "keyed", "key_id": "0123456789abcdef", "run": None, "cases": 1} in schemes
