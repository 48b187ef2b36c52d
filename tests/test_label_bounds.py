"""Labels past the bounds every source is held to (4,096 characters, 256 steps) or holding a NUL
or a lone surrogate: the one rule refuses them as LabelOutOfBounds, and every importer turns one
into an input error naming its file, line or row, and field (exit 2), never an error trial of
the agent's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verdictgate.errors import InvalidDecision, LabelOutOfBounds
from verdictgate.trial_model import MAX_LABEL, MAX_PATH_STEPS, decision_from_value

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OUT_OF_BOUNDS = {
    "long": "x" * (MAX_LABEL + 1),
    "nul": "route\x00",
    "surrogate": "ro\ud800ute",
}


def sendable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@given(st.text(max_size=20) | st.text(min_size=MAX_LABEL - 2, max_size=MAX_LABEL + 2))
def test_a_label_is_taken_exactly_when_every_door_and_store_could_take_it(text: str) -> None:
    fits = len(text) <= MAX_LABEL and "\x00" not in text and sendable(text)
    try:
        taken = decision_from_value(text)
    except LabelOutOfBounds:
        assert text.strip() and not fits
    except InvalidDecision:
        assert not text.strip()
    else:
        assert fits and taken == text


@given(st.lists(st.sampled_from(["a", "b\x00", "c\ud800", "d"]), min_size=1, max_size=4))
def test_a_path_holds_only_steps_a_label_could_be(steps: list[str]) -> None:
    fits = all("\x00" not in step and sendable(step) for step in steps)
    try:
        assert decision_from_value(steps) == tuple(steps) and fits
    except LabelOutOfBounds:
        assert not fits
    with pytest.raises(LabelOutOfBounds, match=f"at most {MAX_PATH_STEPS} names"):
        decision_from_value(["step"] * (MAX_PATH_STEPS + 1))


@pytest.mark.parametrize("kind", sorted(OUT_OF_BOUNDS))
def test_jsonl_names_the_line_and_field(cli, tmp_path: Path, kind: str) -> None:
    lines = [{"case": "c", "out": {"route": "a"}}, {"case": "c", "out": {"route": "a"}}]
    lines.append({"case": "c", "out": {"route": OUT_OF_BOUNDS[kind]}})
    path = tmp_path / "trials.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = cli(
        "assess", "--jsonl", str(path), "--case-path", "case", "--decision-path", "out.route"
    )
    assert result.exit_code == 2, result.output
    assert f"{path}:3: field out.route:" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("field", ["expected", "run"])
def test_jsonl_names_an_expected_route_or_run_past_the_caps(cli, tmp_path: Path, field) -> None:
    path = tmp_path / "trials.jsonl"
    row = {"case": "c", "route": "a", "expected": "a", "run": "r", field: "x\ud800"}
    path.write_text(json.dumps(row) + "\n")
    paths = ["--case-path", "case", "--decision-path", "route", "--expected-path", "expected"]
    result = cli("assess", "--jsonl", str(path), *paths, "--run-path", "run")
    assert result.exit_code == 2 and f"{path}:1: field {field}:" in result.stderr


def test_jsonl_names_an_input_holding_a_lone_surrogate(cli, tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    path.write_text(json.dumps({"input": "hi \udfff", "route": "a"}) + "\n")
    result = cli("assess", "--jsonl", str(path), "--case-path", "input", "--decision-path", "route")
    assert (
        result.exit_code == 2 and f"{path}:1: field input: an input holds a lone" in result.stderr
    )


@pytest.mark.parametrize("kind", [*sorted(OUT_OF_BOUNDS), "steps"])
def test_deepeval_names_the_test_case_and_field(cli, tmp_path: Path, kind: str) -> None:
    document = json.loads((EXAMPLES / "deepeval" / "deepeval-test-run-sample.json").read_text())
    row = document["testCases"][1]
    if kind == "steps":
        row["toolsCalled"] = [{"name": "tool"}] * (MAX_PATH_STEPS + 1)
        args, field = ["--decision", "tools"], "toolsCalled"
    else:
        row["toolsCalled"] = [{"name": "tool"}, {"name": OUT_OF_BOUNDS[kind]}]
        args, field = ["--decision", "tools"], "toolsCalled"
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document))
    result = cli("assess", "--deepeval", str(path), *args)
    assert result.exit_code == 2, result.output
    assert f"{path}: field testCases[1].{field}:" in result.stderr


@pytest.mark.parametrize("kind", sorted(OUT_OF_BOUNDS))
def test_deepeval_names_an_output_past_the_caps(cli, tmp_path: Path, kind: str) -> None:
    document = json.loads((EXAMPLES / "deepeval" / "deepeval-repeat-r4-sample.json").read_text())
    document["testCases"][2]["actualOutput"] = OUT_OF_BOUNDS[kind]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document))
    result = cli("assess", "--deepeval", str(path))
    assert result.exit_code == 2 and f"{path}: field testCases[2].actualOutput:" in result.stderr


@pytest.mark.parametrize("kind", sorted(OUT_OF_BOUNDS))
def test_promptfoo_names_the_row_and_field(cli, tmp_path: Path, kind: str) -> None:
    document = json.loads((EXAMPLES / "promptfoo" / "promptfoo-sample.json").read_text())
    row = document["results"]["results"][5]
    row["response"]["output"] = json.dumps({"route": OUT_OF_BOUNDS[kind]})  # JSON text
    path = tmp_path / "export.json"
    path.write_text(json.dumps(document))
    args = ["--decision-path", "route", "--expected-var", "expected_route"]
    result = cli("assess", "--promptfoo", str(path), *args)
    assert result.exit_code == 2, result.output
    assert f"{path}: field results[5].response.output:" in result.stderr


def test_a_trials_file_names_the_line_and_field_of_a_nul(cli, tmp_path: Path) -> None:
    """The trials file's quick path for ordinary lines takes no label another door refuses."""
    lines = [
        {"run": "r", "case": "c", "trial": 0, "outcome": "decision", "verdict": "a"},
        {"run": "r", "case": "c", "trial": 1, "outcome": "decision", "verdict": "a\x00b"},
    ]
    path = tmp_path / "trials.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = cli("assess", "--trials", str(path))
    assert result.exit_code == 2, result.output
    assert f"{path}:2: field verdict: a label holds a NUL character" in result.stderr
