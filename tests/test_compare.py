"""Drift across builds: Newcombe differences, regressions only wholly on the bad side."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import snapshot, stable_answers, suite_document, trial_records
from verdictgate.stats import difference_interval


def test_known_newcombe_interval_for_a_pass_rate_drop():
    difference, low, high = difference_interval((56, 60), (48, 60))
    assert difference == pytest.approx(-8 / 60)
    assert (round(low, 3), round(high, 3)) == (-0.258, -0.010)


sides = st.integers(1, 300).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


@given(sides, sides)
def test_the_interval_holds_the_difference_and_stays_within_minus_one_and_one(before, after):
    difference, low, high = difference_interval(before, after)
    assert -1.0 <= low <= difference <= high <= 1.0
    assert difference_interval(before, (0, 0)) is None


def with_passes(records, failing_cases=(), every=1):
    for number, record in enumerate(records):
        record["passed"] = not (record["case"] in failing_cases and number % every == 0)
    return records


def test_compare_trials_files_flags_a_regression_and_exits_1(cli, write):
    before = write("before.jsonl", with_passes(trial_records(stable_answers())))
    drifted = stable_answers()
    drifted["deny-0"] = ["deny", "review"] * 13
    drifted["deny-1"] = ["deny", "review"] * 13
    after = write(
        "after.jsonl", with_passes(trial_records(drifted), {"deny-0", "deny-1", "approve-0"})
    )
    suite = write("suite.json", suite_document())
    result = cli(
        "compare", "--before", before, "--after", after, "--suite", suite, "--format", "json"
    )
    document = json.loads(result.stdout)
    assert result.exit_code == 1 and document["regression"] is True
    assert document["pooled"]["diff_low"] > 0  # the change rate rose
    assert document["pooled_pass_rate"]["diff_high"] < 0  # the pass rate fell
    deny = next(r for r in document["routes"] if r["route"] == "deny")
    assert deny["change_rate"]["before"] == [0, 26] and deny["change_rate"]["after"] == [26, 26]
    assert deny["targeted"] is False  # reported, not gated on its own


def test_no_regression_for_the_same_build_and_incomparable_sides(cli, write):
    same = write("same.jsonl", trial_records(stable_answers()))
    result = cli("compare", "--before", same, "--after", same)
    assert result.exit_code == 0 and "Regression: no" in result.stdout
    document = json.loads(
        cli("compare", "--before", same, "--after", same, "--format", "json").stdout
    )
    assert document["pooled_pass_rate"]["comparable"] is False  # no evaluator verdicts at all


def test_compare_a_snapshot_with_a_later_build_on_a_targeted_route(cli, write, tmp_path):
    suite = write("s.json", suite_document(targets={"approve": 0.2}))
    trials = write("t.jsonl", trial_records(stable_answers(pairs_per_case=40)))
    baseline = tmp_path / "baseline.json"
    made = snapshot(cli, trials, suite, baseline)
    assert made.exit_code == 0, made.output
    later = stable_answers(pairs_per_case=40)
    later["approve-0"] = ["approve", "deny"] * 40
    result = cli(
        "compare",
        "--before",
        str(baseline),
        "--after",
        write("later.jsonl", trial_records(later)),
        "--format",
        "json",
    )
    document = json.loads(result.stdout)
    approve = next(r for r in document["routes"] if r["route"] == "approve")
    assert approve["targeted"] is True and approve["regressed"] is True
    assert result.exit_code == 1


def test_compare_from_python_takes_assessments_and_loaded_baselines(tmp_path):
    """The Python API compares two builds as the CLI does: an assessment against a loaded
    baseline gives the same counts as against the assessment the baseline froze."""
    import verdictgate

    routes = {"lost-card": "card_security", "late-transfer": "transfer_delay"}
    suite = verdictgate.Suite(
        name="payments",
        point="router",
        contract=verdictgate.Contract(set(routes.values()), targets={"card_security": 0.05}),
    )

    def build(flipping: bool) -> verdictgate.Assessment:
        flip = {"card_security": "transfer_delay", "transfer_delay": "card_security"}
        trials = [
            verdictgate.Trial(
                case,
                index,
                flip[route] if flipping and index % 2 else route,
                run="b",
                expected=route,
            )
            for case, route in routes.items()
            for index in range(160)
        ]
        return verdictgate.assess(trials, suite)

    before, after = build(flipping=False), build(flipping=True)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(verdictgate.snapshot(before, suite, approved=True)))
    baseline = verdictgate.load_baseline(path)
    targets = set(suite.contract.targets)
    from_baseline = verdictgate.compare(baseline, after, targets)
    assert from_baseline == verdictgate.compare(before, after, targets)
    assert from_baseline.regression and not verdictgate.compare(before, before, targets).regression
    older = json.loads(path.read_text())
    del older["evidence"]["counts"]
    path.write_text(json.dumps(older))
    with pytest.raises(verdictgate.InputError, match="no counts"):
        verdictgate.compare(verdictgate.load_baseline(path), after, targets)
