"""promptfoo exports: grouping by provider and test, ordering, errors, refusals; real files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from agentverity_support import agentverity_report

FIXTURES = Path(__file__).resolve().parents[1] / "examples" / "promptfoo"
REAL = FIXTURES / "promptfoo-sample.json"


def assess(cli, *args):
    result = cli("assess", *args, "--format", "json")
    return result, (json.loads(result.stdout) if result.stdout else None)


def test_a_real_export_mixing_providers_is_refused_until_one_is_chosen(cli):
    result = cli("assess", "--promptfoo", str(REAL))
    assert (
        result.exit_code == 2 and "--provider" in result.stderr and "Traceback" not in result.output
    )


@pytest.mark.parametrize(
    ("provider", "exit_code"),
    # no contract is declared, so the route the keyword router never returns is not judged: its
    # 30 agreeing pairs leave the run undecided; the random one flips 5 times in 25 pairs, which
    # its six tests judged together (the pooled one first, at 2.5% / 6) do not show above 5%
    [("keyword-router", 3), ("stochastic-router", 3)],
)
def test_real_export_per_provider_follows_the_rules(cli, provider, exit_code):
    rows = [
        r
        for r in json.loads(REAL.read_text())["results"]["results"]
        if r["provider"]["label"] == provider
    ]
    errors = sum(1 for r in rows if r.get("failureReason") == 2 or not r.get("response"))
    by_test: dict[str, list[dict]] = {}
    for row in rows:
        by_test.setdefault(row["prompt"]["raw"], []).append(row)
    pairs = flips = 0
    for members in by_test.values():  # the rules, computed independently from the raw rows
        ordered = sorted(members, key=lambda r: r["testIdx"])
        routes = [
            None
            if r.get("failureReason") == 2 or not r.get("response")
            else json.loads(r["response"]["output"])["route"]
            for r in ordered
        ]
        for a, b in zip(routes[0::2], routes[1::2], strict=False):
            if a is not None and b is not None:
                pairs += 1
                flips += a != b
    result, report = assess(
        cli,
        "--promptfoo",
        str(REAL),
        "--provider",
        provider,
        "--decision-path",
        "route",
        "--expected-var",
        "expected_route",
    )
    assert report["trials"]["received"] == len(rows) == 60
    assert report["trials"]["errors"] == errors
    assert (report["stability"]["pooled"]["pairs"], report["stability"]["pooled"]["flips"]) == (
        pairs,
        flips,
    )
    assert sorted(r["route"] for r in report["stability"]["routes"]) == sorted(
        {r["vars"]["expected_route"] for r in rows}
    )
    assert result.exit_code == exit_code


def row(test: int, index: int, output, *, provider="p", prompt_id="x", failure=None, response=True):
    message = f"message {test}"
    return {
        "testIdx": index,
        "promptId": prompt_id,
        "provider": {"id": provider, "label": provider},
        "prompt": {"raw": message},
        "vars": {"message": message, "expected": f"route-{test}"},
        "response": {"output": output} if response else None,
        "failureReason": failure,
        "success": failure is None,
        "cost": 0,
        "gradingResult": {"pass": failure is None},
    }


def export(rows: list[dict]) -> dict:
    return {"evalId": "eval-1", "results": {"version": 3, "results": rows}, "config": {}}


def test_rows_are_grouped_by_test_and_ordered_by_test_index_not_by_position(cli, write):
    rows = []
    for test in range(3):
        for repeat in range(6):
            answer = (
                f"route-{test}" if repeat % 2 == 0 else ("other" if test == 0 else f"route-{test}")
            )
            rows.append(row(test, 100 * repeat + test, json.dumps({"decision": {"route": answer}})))
    random.Random(4).shuffle(rows)  # completion order
    _, report = assess(
        cli,
        "--promptfoo",
        write("r.json", export(rows)),
        "--decision-path",
        "decision.route",
        "--expected-var",
        "expected",
    )
    assert report["stability"]["pooled"]["pairs"] == 9
    assert (
        report["stability"]["pooled"]["flips"] == 3
    )  # test 0 answers route-0, other, route-0, ...
    assert report["stability"]["flip_pairs"] == [{"routes": ["other", "route-0"], "count": 3}]


def test_errors_failed_assertions_and_unreadable_outputs(cli, write):
    rows = [
        row(0, 0, '{"route": "a"}', failure=1),  # a failed assertion still decided
        row(0, 1, '{"route": "a"}'),
        row(0, 2, None, failure=2, response=False),  # provider error
        row(0, 3, '{"route": "a"}'),
        row(0, 4, "not json"),  # the decision path cannot read it
        row(0, 5, '{"route": "a"}'),
    ]
    _result, report = assess(
        cli, "--promptfoo", write("r.json", export(rows)), "--decision-path", "route"
    )
    assert report["trials"]["decisions"] == 4
    assert report["trials"]["error_types"] == {"decision_path": 1, "provider_error": 1}
    assert report["stability"]["pooled"]["pairs"] == 1  # (0,1); the others lost a partner
    assert "incomplete" in {r["code"] for r in report["reasons"]}


def test_mixed_prompts_are_refused_unless_one_is_chosen(cli, write):
    rows = [row(0, i, "a", prompt_id="p1") for i in range(4)] + [
        row(0, i + 4, "b", prompt_id="p2") for i in range(4)
    ]
    path = write("r.json", export(rows))
    refused = cli("assess", "--promptfoo", path)
    assert refused.exit_code == 2 and "--prompt-id" in refused.stderr
    _, report = assess(cli, "--promptfoo", path, "--prompt-id", "p2")
    assert report["coverage"]["observed"] == ["b"] and report["trials"]["received"] == 4


def test_rows_matching_no_suite_case_are_refused_with_their_count(cli, write):
    rows = [row(test, i, "a") for test in range(2) for i in range(2)]
    suite = {"schema": "verdictgate.suite/v1", "cases": [{"input": "message 0", "expected": "a"}]}
    result = cli(
        "assess", "--promptfoo", write("r.json", export(rows)), "--suite", write("s.json", suite)
    )
    assert result.exit_code == 2 and "2 rows match no suite case" in result.stderr


def test_an_export_without_repeats_is_inconclusive_and_says_how_to_repeat(cli, write):
    rows = [row(test, test, f"route-{test}") for test in range(4)]
    result, report = assess(cli, "--promptfoo", write("r.json", export(rows)))
    assert result.exit_code == 3 and "no_repeats" in {r["code"] for r in report["reasons"]}
    assert any("promptfoo `repeat`" in step for step in report["next_steps"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"results": {"version": 3, "results": [{"testIdx": "x"}]}}', "not a promptfoo export"),
        ('{"evalId": "e"', "not a promptfoo export"),
        ('{"evalId": "e"}', "no `results`"),
    ],
)
def test_malformed_exports_are_one_line_errors(cli, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = cli("assess", "--promptfoo", str(path))
    assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.output


def test_json_lines_and_traced_exports(cli):
    _, report = assess(
        cli,
        "--promptfoo",
        str(FIXTURES / "promptfoo-sample.traced.json"),
        "--provider",
        "keyword-router",
        "--decision-path",
        "route",
        "--expected-var",
        "expected_route",
    )
    assert report["trials"]["received"] > 0 and report["trials"]["conflicts"] == 0
    _, report = assess(
        cli,
        "--promptfoo",
        str(FIXTURES / "promptfoo-sample.per-test-repeat.jsonl"),
        "--provider",
        "keyword-router",
        "--decision-path",
        "route",
        "--expected-var",
        "expected_route",
    )
    lines = [
        json.loads(line)
        for line in (FIXTURES / "promptfoo-sample.per-test-repeat.jsonl").read_text().splitlines()
    ]
    assert report["trials"]["received"] == sum(
        1 for r in lines if r["provider"]["label"] == "keyword-router"
    )


def test_agentverity_reads_the_same_promptfoo_export_the_same_way(cli, tmp_path):
    """AgentVerity's own promptfoo import of the keyword router gives verdictgate's pairs, flips
    and interval (both group rows by test, never by testIdx). Its stochastic router's provider
    errors are not compared: AgentVerity pairs the trials left after an error, verdictgate
    leaves an errored trial's partner unpaired (REPORT.md)."""
    suite = str(FIXTURES / "decision_suite.json")
    theirs = agentverity_report(
        "--promptfoo",
        str(REAL),
        "--provider",
        "file://provider.py",
        "--decision-path",
        "route",
        "--suite",
        suite,
        tmp=tmp_path,
    )
    _, ours = assess(
        cli,
        "--promptfoo",
        str(REAL),
        "--provider",
        "file://provider.py",
        "--decision-path",
        "route",
        "--suite",
        suite,
        "--method",
        "wilson",
    )
    pooled = ours["stability"]["pooled"]
    assert (
        (pooled["pairs"], pooled["flips"])
        == (30, 0)
        == (theirs["meter"]["pair_trials"], theirs["meter"]["pair_flips"])
    )
    assert pooled["ci_high"] == pytest.approx(theirs["meter"]["ci_high"], abs=1e-3)
    assert ours["status"] == "rejected"  # the keyword router never reaches one required route


def test_streaming_in_small_chunks_reads_the_same_as_in_one(cli, monkeypatch, write):
    from verdictgate.importers import promptfoo

    args = ("--promptfoo", str(REAL), "--provider", "stochastic-router", "--decision-path", "route")
    _, whole = assess(cli, *args)
    monkeypatch.setattr(promptfoo, "CHUNK_BYTES", 997)  # boundaries fall inside rows and separators
    _, chunked = assess(cli, *args)
    assert chunked == whole
    pretty = json.dumps(json.loads(REAL.read_text()), indent=2)  # the layout promptfoo writes
    cut = write("cut.json", {})
    Path(cut).write_text(pretty[: len(pretty) // 2])
    truncated = cli("assess", "--promptfoo", cut, "--provider", "stochastic-router")
    assert truncated.exit_code == 2 and "ends inside its results" in truncated.stderr


def test_an_unknown_provider_and_matching_suite_cases_by_id(cli, write):
    rows = [row(test, 10 * i + test, f"route-{test}") for test in range(2) for i in range(2)]
    path = write("r.json", export(rows))
    unknown = cli("assess", "--promptfoo", path, "--provider", "nope")
    assert unknown.exit_code == 2 and "no row matches 'nope'" in unknown.stderr
    suite = {
        "schema": "verdictgate.suite/v1",
        "contract": {"allowed": ["route-0", "route-1"]},
        "cases": [
            {"id": "message 0", "expected": "route-0"},
            {"id": "message 1", "expected": "route-1"},
        ],
    }
    _result, report = assess(cli, "--promptfoo", path, "--suite", write("s.json", suite))
    assert report["coverage"]["intended"] == {"route-0": 1, "route-1": 1}
    assert {case["case"] for case in report["cases"]} == {"message 0", "message 1"}


def test_promptfoo_success_is_the_evaluator_verdict_on_each_trial(cli):
    rows = [
        r
        for r in json.loads(REAL.read_text())["results"]["results"]
        if r["provider"]["label"] == "keyword-router"
    ]
    _, report = assess(
        cli, "--promptfoo", str(REAL), "--provider", "keyword-router", "--decision-path", "route"
    )
    assert report["pass_rate"]["judged"] == len(rows)
    assert report["pass_rate"]["passed"] == sum(1 for r in rows if r["success"])


def test_a_file_that_is_not_a_promptfoo_export_is_refused(cli, tmp_path):
    path = tmp_path / "trials.jsonl"
    path.write_text(
        "".join(
            json.dumps({"case": f"c{n}", "trial": n, "outcome": "decision"}) + "\n"
            for n in range(4)
        )
    )
    result = cli("assess", "--promptfoo", str(path))
    assert result.exit_code == 2 and "not a promptfoo export" in result.stderr
