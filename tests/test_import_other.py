"""DeepEval runs and test cases, generic JSON Lines, OTLP/JSON captures, and `convert`."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROUTES, codes_of, suite_document
from verdictgate import assess, fingerprint
from verdictgate.fingerprints import KEY_VARIABLE, key_id
from verdictgate.importers.deepeval import evidence_from_deepeval

FIXTURES = Path(__file__).resolve().parents[1] / "examples"


def report_of(cli, *args):
    result = cli("assess", *args, "--format", "json")
    return result, (json.loads(result.stdout) if result.stdout else None)


def test_deepeval_repeats_are_ordered_by_their_name_suffix(cli):
    path = FIXTURES / "deepeval" / "deepeval-repeat-r4-sample.json"
    document = json.loads(path.read_text())
    document["testCases"].reverse()  # file order must not matter when the suffix is there
    scrambled = path.parent / "scrambled.json"
    scrambled.write_text(json.dumps(document))
    try:
        _, report = report_of(cli, "--deepeval", str(scrambled))
    finally:
        scrambled.unlink()
    names = sorted(case["name"] for case in document["testCases"])
    outputs = [
        next(c["actualOutput"] for c in document["testCases"] if c["name"] == n) for n in names
    ]
    flips = sum(a != b for a, b in zip(outputs[0::2], outputs[1::2], strict=False))
    assert report["trials"]["received"] == 4 and report["stability"]["pooled"]["flips"] == flips
    # the route table comes from expectedOutput; with no contract declared nothing is required
    assert [route["route"] for route in report["stability"]["routes"]] == ["card_security"]
    assert report["coverage"]["required"] == []


def test_deepeval_json_outputs_and_tool_paths(cli):
    path = str(FIXTURES / "deepeval" / "deepeval-test-run-sample.json")
    _, by_output = report_of(cli, "--deepeval", path, "--decision-path", "route")
    _, by_tools = report_of(cli, "--deepeval", path, "--decision", "tools")
    assert by_output["trials"]["received"] == by_tools["trials"]["received"] == 10
    assert "card_security" in by_output["coverage"]["observed"]
    assert by_tools["coverage"]["observed"] == ["route_to"]


def test_evidence_from_deepeval_test_case_objects():
    cases = [
        SimpleNamespace(
            input="lost card",
            actual_output=out,
            expected_output="card_security",
            name=f"t[{i + 1}-4]",
        )
        for i, out in enumerate(["card_security", "billing", "card_security", "card_security"])
    ]
    imported = evidence_from_deepeval(cases)
    assessment = assess(imported.evidence)
    assert (assessment.pooled.pairs, assessment.pooled.flips) == (2, 1)
    assert assessment.cases[0].route == "card_security"
    tools = [
        SimpleNamespace(
            input="x", tools_called=[SimpleNamespace(name="a"), SimpleNamespace(name="b")]
        )
    ] * 2
    assert assess(evidence_from_deepeval(tools, "tools").evidence).coverage.observed == ("a > b",)


def test_generic_jsonl_with_paths_order_and_unreadable_decisions(cli, write):
    rows = [
        {"meta": {"ticket": "T1"}, "result": {"route": "a"}, "want": "a"},
        {"meta": {"ticket": "T2"}, "result": {"route": "b"}, "want": "b"},
        {"meta": {"ticket": "T1"}, "result": {"route": "a"}, "want": "a"},
        {"meta": {"ticket": "T2"}, "result": {"route": 7}, "want": "b"},
    ]
    _, report = report_of(
        cli,
        "--jsonl",
        write("h.jsonl", rows),
        "--case-path",
        "meta.ticket",
        "--decision-path",
        "result.route",
        "--expected-path",
        "want",
    )
    assert report["stability"]["pooled"]["pairs"] == 1 and report["trials"]["error_types"] == {
        "decision_path": 1
    }
    assert sorted(r["route"] for r in report["stability"]["routes"]) == ["a", "b"]
    missing = cli("assess", "--jsonl", write("x.jsonl", rows), "--case-path", "meta.ticket")
    assert missing.exit_code == 2 and "--decision-path" in missing.stderr
    bad = cli(
        "assess",
        "--jsonl",
        write("y.jsonl", [{"x": 1}]),
        "--case-path",
        "meta.ticket",
        "--decision-path",
        "r",
    )
    assert bad.exit_code == 2 and "y.jsonl:1" in bad.stderr and "meta.ticket" in bad.stderr


def test_otlp_json_capture_replays_a_canary(cli, tmp_path):
    def line(index: int, verdict: str) -> str:
        attributes = {
            "verdictgate.run.id": "nightly",
            "verdictgate.case.id": "c1",
            "verdictgate.trial": index,
            "verdictgate.outcome": "decision",
            "verdictgate.verdict": verdict,
        }
        encoded = [
            {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
            for k, v in attributes.items()
        ]
        span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "decide p", "attributes": encoded}
        return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})

    capture = tmp_path / "capture.jsonl"
    capture.write_text("\n".join(line(i, "a" if i != 3 else "b") for i in range(4)) + "\n")
    _, report = report_of(cli, "--otlp-json", str(capture))
    assert report["run"]["id"] == "nightly"
    assert (report["stability"]["pooled"]["pairs"], report["stability"]["pooled"]["flips"]) == (
        2,
        1,
    )
    capture.write_text("{broken\n")
    bad = cli("assess", "--otlp-json", str(capture))
    assert bad.exit_code == 2 and "capture.jsonl:1" in bad.stderr


@pytest.mark.parametrize(
    "source",
    [
        ["--deepeval", str(FIXTURES / "deepeval" / "deepeval-repeat-r4-sample.json")],
        [
            "--promptfoo",
            str(FIXTURES / "promptfoo" / "promptfoo-sample.json"),
            "--provider",
            "stochastic-router",
            "--decision-path",
            "route",
            "--expected-var",
            "expected_route",
        ],
    ],
)
def test_convert_writes_trials_that_assess_the_same(cli, tmp_path, source):
    out = tmp_path / "trials.jsonl"
    converted = cli("convert", *source, "--output", str(out))
    assert converted.exit_code == 0 and out.read_text()
    _, direct = report_of(cli, *source)
    _, again = report_of(cli, "--trials", str(out))
    for field in ("stability", "coverage", "dominance"):
        assert again[field] == direct[field]
    assert again["trials"]["error_types"] == direct["trials"]["error_types"]


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"testRuns": []}, "testCases"),
        ({"testCases": [{"name": "x"}]}, "testCases[0]"),
        ({"testCases": "x"}, "testCases"),
    ],
)
def test_a_file_that_is_not_a_deepeval_run_is_one_line(cli, write, document, field):
    result = cli("assess", "--deepeval", write("d.json", document))
    assert (
        result.exit_code == 2
        and f"field {field}" in result.stderr
        and "Traceback" not in result.output
    )


def test_an_import_names_an_input_by_its_suite_id_and_its_fingerprint_both(cli, write, monkeypatch):
    """Rows matched to a suite case by input carry the case's id and the input's fingerprint (a
    further name, with its key's id), so the import and a run named by fingerprints count each
    input once."""
    monkeypatch.setenv(KEY_VARIABLE, "an import key")
    key = b"an import key"
    suite = write("suite.json", suite_document(cases_per_route=1))
    texts = {f"{route}-0": f"request {route} 0" for route in ROUTES}
    rows = [{"ask": text, "out": case.split("-")[0]} for case, text in texts.items() for _ in "ab"]
    converted = cli(
        "convert",
        "--jsonl",
        write("h.jsonl", rows),
        "--case-path",
        "ask",
        "--decision-path",
        "out",
        "--suite",
        suite,
    )
    lines = [json.loads(line) for line in converted.stdout.splitlines()]
    assert {(r["case"], tuple(r["aliases"]), r["key_id"]) for r in lines} == {
        (case, (fingerprint(text, key),), key_id(key)) for case, text in texts.items()
    }
    assert not any(text in converted.stdout for text in texts.values())
    prints = [
        {
            "run": "b",
            "case": fingerprint(text, key),
            "trial": i,
            "outcome": "decision",
            "verdict": case.split("-")[0],
            "key_id": key_id(key),
        }
        for case, text in texts.items()
        for i in range(2)
    ]
    both = write("both.jsonl", lines + prints)
    _, report = report_of(cli, "--trials", both, "--claim", "population")
    assert report["population"]["cases"] == 3 and "mixed_case_names" not in codes_of(report)


def test_deepeval_4_latest_test_run_is_read_under_test_run_data(cli):
    """A real DeepEval 4.3.1 run (`deepeval test run -r 4`, offline: ExactMatchMetric), saved
    as it wrote `.deepeval/.latest_test_run.json`: the run under `testRunData`."""
    path = FIXTURES / "deepeval" / "deepeval-4-latest-test-run.json"
    assert "testCases" not in json.loads(path.read_text())  # the 3.x shape is not there
    result, report = report_of(cli, "--deepeval", str(path))
    assert result.exit_code == 3 and report["trials"]["received"] == 8
    assert report["coverage"]["observed"] == ["billing", "card_security", "refunds"]
    pooled = report["stability"]["pooled"]
    assert (pooled["pairs"], pooled["flips"]) == (4, 1)
    _, by_tools = report_of(cli, "--deepeval", str(path), "--decision", "tools")
    assert by_tools["coverage"]["observed"] == ["freeze_card > open_case", "lookup_order"]


def test_deepeval_logged_in_file_holding_only_a_link_is_one_clear_line(cli, tmp_path):
    """Logged in to Confident AI, DeepEval 4.x writes only `{"testRunLink": ...}` there
    (`TestRunManager.save_final_test_run_link`): refused in one line naming what to read."""
    path = tmp_path / ".latest_test_run.json"
    path.write_text(json.dumps({"testRunLink": "https://app.confident-ai.com/x/test-runs/y"}))
    result = cli("assess", "--deepeval", str(path))
    assert result.exit_code == 2
    assert "holds only a link" in result.output and ".latest_run_full.json" in result.output
    assert "Traceback" not in result.output
