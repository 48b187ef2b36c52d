"""AgentVerity evidence files (`agentverity.evidence/v2`) assessed by verdictgate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentverity_support import EVIDENCE, agentverity_report

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_observations_errors_and_no_decisions(cli, write):
    result = cli("assess", "--agentverity", write("evidence.json", EVIDENCE), "--format", "json")
    report = json.loads(result.stdout)
    assert (
        report["run"]["isolation"] == "fresh-session" and report["run"]["fingerprints"] == "unkeyed"
    )
    assert report["trials"]["received"] == 16 and report["trials"]["errors"] == 2
    assert report["trials"]["no_decisions"] == 2
    pooled = report["stability"]["pooled"]
    assert (pooled["pairs"], pooled["flips"]) == (7, 1)  # the two error trials pair with nothing
    assert "no_decision:refused" in report["coverage"]["observed"]
    assert "lookup > review" in report["coverage"]["observed"]
    assert "incomplete" in {r["code"] for r in report["reasons"]}
    assert result.exit_code in (1, 3)
    assert "approve me" not in result.stdout


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schema": "agentverity.evidence/v1"}, "schema"),
        ({"cases": [{"input": "x", "observations": "approve"}]}, "cases[0].observations"),
        (
            {"cases": [{"input": "x", "observations": [{"kind": "maybe"}]}]},
            "cases[0].observations[0]",
        ),
        ({"cases": [{"input": "x", "observations": ["a"], "errors": -1}]}, "cases[0].errors"),
        (
            {
                "cases": [
                    {"input": "x", "observations": ["a"]},
                    {"input": "x", "observations": ["a"]},
                ]
            },
            "cases[1]",
        ),
    ],
)
def test_malformed_evidence_is_one_line_with_the_field(cli, write, change, field):
    result = cli("assess", "--agentverity", write("e.json", {**EVIDENCE, **change}))
    assert (
        result.exit_code == 2
        and f"field {field}" in result.stderr
        and "Traceback" not in result.output
    )


def test_agentverity_and_verdictgate_agree_on_the_same_evidence(cli, tmp_path):
    """The same evidence file, assessed by AgentVerity itself and by verdictgate: the same pairs,
    flips and route results, intervals within 1e-3 (AgentVerity rounds z to 1.96)."""
    evidence = str(EXAMPLES / "agentverity" / "evidence.json")
    suite = str(EXAMPLES / "agentverity" / "decision_suite.json")
    theirs = agentverity_report("--evidence", evidence, "--suite", suite, tmp=tmp_path)
    result = cli(
        "assess",
        "--agentverity",
        evidence,
        "--suite",
        suite,
        "--method",
        "wilson",
        "--format",
        "json",
    )
    ours = json.loads(result.stdout)
    pooled = ours["stability"]["pooled"]
    assert (pooled["pairs"], pooled["flips"]) == (
        theirs["meter"]["pair_trials"],
        theirs["meter"]["pair_flips"],
    )
    routes = {r["route"]: r for r in ours["stability"]["routes"]}
    assert set(routes) == {r["decision"] for r in theirs["route_stability"]["routes"]}
    for route in theirs["route_stability"]["routes"]:
        mine = routes[route["decision"]]
        assert (mine["pairs"], mine["flips"]) == (route["pair_trials"], route["pair_flips"])
        assert mine["ci_low"] == pytest.approx(route["ci_low"], abs=1e-3)
        assert mine["ci_high"] == pytest.approx(route["ci_high"], abs=1e-3)
    for result_name in ("stochastic", "undecided", "deterministic"):
        assert sorted(r for r, v in routes.items() if v["result"] == result_name) == sorted(
            theirs["route_stability"][result_name]
        ), result_name
    assert ours["stability"]["flip_pairs"] == [
        {"routes": sorted(p["decisions"]), "count": p["count"]}
        for p in theirs["route_stability"]["flip_pairs"]
    ]
