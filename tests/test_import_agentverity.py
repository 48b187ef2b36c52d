"""AgentVerity evidence files (`agentverity.evidence/v2`) assessed by verdictgate."""

from __future__ import annotations

import json

import pytest

from conftest import SHARED

EVIDENCE = {
    "schema": "agentverity.evidence/v2",
    "isolation": "fresh-session",
    "layer": "verdict",
    "cases": [
        {"input": "approve me", "expected": "approve", "observations": ["approve"] * 6},
        {"input": "deny me", "expected": "deny", "observations": ["deny", "deny", "deny", "review"], "errors": 2},
        {"input": "unsure", "expected": "review",
         "observations": [{"kind": "no_decision", "reason": "refused"}] * 2 + [["lookup", "review"]] * 2},
    ],
}  # fmt: skip


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


@pytest.mark.skipif(
    not (SHARED / "fixtures/agentverity").is_dir(),
    reason="shared fixtures are not beside the checkout",
)
def test_agentverity_own_example_gives_its_numbers(cli):
    """AgentVerity reports 3/9 flips, stochastic, on its imported_evidence.json."""
    path = SHARED / "fixtures/agentverity/imported_evidence.json"
    result = cli("assess", "--agentverity", str(path), "--format", "json")
    report = json.loads(result.stdout)
    pooled = report["stability"]["pooled"]
    assert (pooled["pairs"], pooled["flips"], pooled["result"]) == (9, 3, "stochastic")
    card = next(r for r in report["stability"]["routes"] if r["route"] == "card_security")
    assert card["ci_low"] == pytest.approx(0.438, abs=1e-3) and card["ci_high"] == 1.0
    assert result.exit_code == 1
