"""Every output format drawn from one Assessment: fields, agreement, and no raw input anywhere."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

import verdictgate
from conftest import stable_answers, suite_document, trial_records
from verdictgate.reports import RENDERERS
from verdictgate.reports.json_report import report_document

REQUIRED_FIELDS = {
    "schema": None,
    "status": None,
    "reasons": None,
    "headline": None,
    "run": {"id", "suite", "point", "isolation"},
    "policy": {"tolerance", "confidence", "dominance_threshold"},
    "trials": {"expected", "received", "decisions", "no_decisions", "errors", "conflicts"},
    "stability": {"pooled", "routes", "flip_pairs"},
    "coverage": {
        "required",
        "intended",
        "observed",
        "missing_intended",
        "missing_observed",
        "unknown",
        "under_cased",
        "critical_missing",
        "satisfied",
    },
    "dominance": {"verdict", "share", "collapsed"},
    "next_steps": None,
}


def flipping_assessment():
    answers = stable_answers()
    answers["deny-0"] = ["deny", "review"] * 13
    suite = verdictgate.Suite(
        "gate",
        "approval_gate",
        tuple(
            verdictgate.Case(c["id"], c["input"], c["expected"]) for c in suite_document()["cases"]
        ),
        verdictgate.Contract(frozenset({"approve", "deny", "review"})),
    )
    trials = [
        verdictgate.Trial(r["case"], r["trial"], r.get("verdict"), r["run"])
        for r in trial_records(answers)
    ]
    return verdictgate.assess(trials, suite)


def test_json_report_has_every_field_of_the_contract():
    document = report_document(flipping_assessment())
    for field, keys in REQUIRED_FIELDS.items():
        assert field in document
        if keys:
            assert keys <= set(document[field])
    assert document["schema"] == "verdictgate.report/v1"
    pooled = document["stability"]["pooled"]
    assert {"pairs", "flips", "rate", "ci_low", "ci_high", "result"} <= set(pooled)
    route = document["stability"]["routes"][0]
    assert {"route", "cases", "pairs", "flips", "ci_low", "ci_high", "tolerance", "result"} <= set(
        route
    )
    assert [r["route"] for r in document["stability"]["routes"]] == ["approve", "deny", "review"]
    assert document["stability"]["flip_pairs"] == [{"routes": ["deny", "review"], "count": 13}]
    assert {"code", "message"} == set(document["reasons"][0])
    assert json.loads(json.dumps(document)) == document


def test_junit_has_one_testcase_per_check_with_failures_for_rejections():
    root = ET.fromstring(RENDERERS["junit"](flipping_assessment()))
    suite = root.find("testsuite")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert cases["stability.route.deny"].find("failure") is not None
    assert cases["stability.pooled"].find("failure") is not None
    assert cases["contract"].find("failure") is None
    assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) >= 2


def test_junit_marks_inconclusive_checks_as_errors():
    trials = [verdictgate.Trial("c", i, "a") for i in range(4)] + [
        verdictgate.Trial("d", i, "b") for i in range(4)
    ]
    root = ET.fromstring(RENDERERS["junit"](verdictgate.assess(trials)))
    pooled = next(c for c in root.iter("testcase") if c.get("name") == "stability.pooled")
    assert pooled.find("error") is not None and pooled.find("failure") is None


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_format_carries_the_status_and_no_raw_input(fmt):
    assessment = flipping_assessment()
    text = RENDERERS[fmt](assessment)
    assert assessment.status.value in text.lower()
    for case in suite_document()["cases"]:
        assert case["input"] not in text


def test_markdown_lists_checks_routes_and_next_steps():
    markdown = RENDERERS["markdown"](flipping_assessment())
    assert markdown.startswith("## ❌ verdictgate: rejected")
    assert "| stability.route.deny | ❌ failed |" in markdown
    assert "### What to do next" in markdown


def test_text_report_shows_the_tables(cli, write):
    trials = write("t.jsonl", trial_records(stable_answers()))
    result = cli("assess", "--trials", trials, "--suite", write("s.json", suite_document()))
    assert result.exit_code == 0
    for heading in ("Qualified:", "Stability by route", "Contract", "Evidence", "What to do next"):
        assert heading in result.stdout


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_output_file_and_one_line_saying_where(cli, write, tmp_path, fmt):
    trials = write("t.jsonl", trial_records(stable_answers()))
    out = tmp_path / f"report.{fmt}"
    result = cli("assess", "--trials", trials, "--format", fmt, "--output", str(out))
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == f"verdictgate: report written to {out}\n"
    if fmt == "junit":
        assert ET.parse(out).getroot().tag == "testsuites"
    assert out.stat().st_size > 0
