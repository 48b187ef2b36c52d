"""Every tier's reason code, reached through the CLI, with the exit code it maps to."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import codes_of, report_of, stable_answers, suite_document, trial_records

AGENTS = '''
from verdictgate import Invariant

def router():
    """Answers the route named in the request, with a short reply."""
    def answer(text):
        route = next(r for r in ("approve", "deny", "review") if r in text.lower())
        return {"verdict": route, "text": "reply about " + route}
    return answer

def case_sensitive_router():
    """Routes `deny` to review when the request is in lower case: spelling changes its mind."""
    def answer(text):
        route = next(r for r in ("approve", "deny", "review") if r in text.lower())
        return "review" if route == "deny" and text == text.lower() else route
    return answer

never_review = Invariant("never_review", lambda output, given: output["verdict"] != "review")
short_reply = Invariant("short_reply", lambda output, given: len(output["text"]) < 16, severity="warn")

def dislikes_deny(output, given):
    return output["verdict"] != "deny"
'''


@pytest.fixture
def agents(tmp_path: Path) -> str:
    path = tmp_path / "agents.py"
    path.write_text(AGENTS)
    return str(path)


def test_a_blocking_invariant_rejects_and_the_judge_skips_blocked_trials(
    cli, agents, title_suite, tmp_path
):
    trials = str(tmp_path / "trials.jsonl")
    result = cli(
        "run",
        "--agent",
        f"{agents}:router",
        "--suite",
        title_suite,
        "--repeats",
        "4",
        "--invariant",
        f"{agents}:never_review",
        "--judge",
        f"{agents}:dislikes_deny",
        "--trials-out",
        trials,
        "--format",
        "json",
    )
    report = report_of(result)
    assert result.exit_code == 1 and "invariant_blocked" in codes_of(report)
    assert report["invariants"]["failed"] == {"never_review": 8}
    # 8 review trials were blocked, so the judge never saw them; it failed the 8 deny trials
    assert report["pass_rate"] | {"routes": None} == {
        "passed": 8,
        "judged": 24,
        "skipped": 8,
        "routes": None,
    }
    again = report_of(cli("assess", "--trials", trials, "--suite", title_suite, "--format", "json"))
    assert again["pass_rate"] == report["pass_rate"] and again["invariants"] == report["invariants"]
    assert again["latency"]["trials"] == 24  # the trials file kept every tier's result


def test_a_warning_invariant_is_reported_in_every_format_and_does_not_gate(
    cli, agents, title_suite
):
    args = [
        "run",
        "--agent",
        f"{agents}:router",
        "--suite",
        title_suite,
        "--repeats",
        "26",
        "--invariant",
        f"{agents}:short_reply",
    ]
    for fmt in ("json", "text", "markdown", "junit"):
        result = cli(*args, "--format", fmt)
        assert result.exit_code == 0, fmt
        assert "short_reply" in result.stdout, fmt


def test_a_violated_and_a_vacuous_relation_are_rejected(cli, agents, title_suite):
    result = cli(
        "run",
        "--agent",
        f"{agents}:case_sensitive_router",
        "--suite",
        title_suite,
        "--repeats",
        "2",
        "--relation",
        "case",
        "--format",
        "json",
    )
    violated = report_of(result)
    assert "relation_violated" in codes_of(violated)
    assert violated["relations"] == [
        {
            "name": "case",
            "status": "violated",
            "violated": ["deny"],
            "held": ["approve", "review"],
            "errored": [],
        }
    ]
    vacuous = cli(
        "run",
        "--agent",
        f"{agents}:router",
        "--suite",
        title_suite,
        "--repeats",
        "2",
        "--relation",
        "whitespace",
        "--format",
        "json",
    )
    assert vacuous.exit_code == 1 and "relations_vacuous" in codes_of(report_of(vacuous))


def test_the_quality_gate_stops_before_repeats(cli, agents, write):
    document = suite_document()
    document["cases"][0]["input"] = "request deny instead"  # expected approve: a wrong route
    result = cli(
        "run",
        "--agent",
        f"{agents}:router",
        "--suite",
        write("s.json", document),
        "--quality-gate",
        "--format",
        "json",
    )
    report = report_of(result)
    assert result.exit_code == 1 and "quality_failed" in codes_of(report)
    assert report["run"]["quality_failed"] == ["approve-0"] and report["trials"]["received"] == 6


def test_the_quality_gate_stops_when_a_first_answer_fails_a_tier(cli, agents, title_suite):
    result = cli(
        "run",
        "--agent",
        f"{agents}:router",
        "--suite",
        title_suite,
        "--quality-gate",
        "--judge",
        f"{agents}:dislikes_deny",
        "--format",
        "json",
    )
    report = report_of(result)
    assert result.exit_code == 1 and "quality_failed" in codes_of(report)
    assert report["run"]["quality_failed"] == ["deny-0", "deny-1"]  # right route, judged bad
    assert report["trials"]["received"] == 6


def test_a_route_below_the_required_pass_rate_is_rejected_though_the_pool_is_not(write, cli):
    records = trial_records(stable_answers(pairs_per_case=20))
    for record in records:  # approve always passes, deny and review mostly
        record["passed"] = record["verdict"] != "deny" or record["trial"] % 2 == 0
    result = cli(
        "assess",
        "--trials",
        write("t.jsonl", records),
        "--suite",
        write("s.json", suite_document()),
        "--pass-rate",
        "0.7",
        "--format",
        "json",
    )
    report = report_of(result)
    assert report["pass_rate"]["result"] == "reliable"  # 200 of 240 pooled
    assert report["pass_rate"]["routes"]["deny"]["result"] == "unreliable"  # 40 of 80
    assert result.exit_code == 1 and codes_of(report) == {"route_pass_rate_unreliable"}
    by_case = {case["case"]: case for case in report["cases"]}
    assert by_case["deny-0"]["passed"] == 20 and by_case["deny-0"]["result"] == "unreliable"
    assert by_case["approve-0"]["result"] == "reliable"


def tool_records(longest_every: int | None, trials_per_case: int) -> list[dict]:
    """Tool paths of 1 or 2 tools, and of 6 tools on every `longest_every`-th trial."""
    return [
        {
            "case": f"c{c}",
            "trial": t,
            "outcome": "decision",
            "tools": ["search", "book", "pay", "mail", "log", "bill"][
                : 6 if longest_every and t % longest_every == 0 else 1 + c % 2
            ],
        }
        for c in range(4)
        for t in range(trials_per_case)
    ]


@pytest.mark.parametrize(
    ("longest_every", "trials", "exit_code", "code"),
    [(None, 40, 0, None), (4, 40, 1, "tool_calls_exceeded"), (None, 6, 3, "tool_calls_undecided")],
)
def test_a_tool_call_threshold(write, cli, longest_every, trials, exit_code, code):
    result = cli(
        "assess",
        "--trials",
        write("t.jsonl", tool_records(longest_every, trials)),
        "--max-p95-tool-calls",
        "4",
        "--format",
        "json",
    )
    report = report_of(result)
    assert report["tool_calls"]["max_p95_tool_calls"] == 4
    assert report["policy"]["max_p95_tool_calls"] == 4
    if code is None:
        assert report["tool_calls"]["result"] == "within" and result.exit_code == 0
    else:
        assert code in codes_of(report) and result.exit_code == exit_code


def test_a_tool_call_threshold_on_label_decisions_is_undecided(write, cli):
    result = cli(
        "assess",
        "--trials",
        write("t.jsonl", trial_records(stable_answers())),
        "--max-p95-tool-calls",
        "4",
        "--format",
        "json",
    )
    assert result.exit_code == 3 and codes_of(report_of(result)) == {"tool_calls_undecided"}


def test_tier_options_name_what_is_wrong(cli, agents, title_suite):
    bad_invariant = cli(
        "run",
        "--agent",
        f"{agents}:router",
        "--suite",
        title_suite,
        "--invariant",
        f"{agents}:router",
    )
    assert bad_invariant.exit_code == 2
    assert "field --invariant: must name an Invariant" in bad_invariant.stderr
    bad_judge = cli(
        "run",
        "--agent",
        f"{agents}:router",
        "--suite",
        title_suite,
        "--judge",
        f"{agents}:never_there",
    )
    assert bad_judge.exit_code == 2 and "field --judge" in bad_judge.stderr
