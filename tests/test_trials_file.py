"""The trials-file decoder: round trips, streaming across chunks, and one clear error per bad line."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verdictgate import Evidence, InputError, NoDecision, Trial, assess, read_trials
from verdictgate import trials_file as trials_module
from verdictgate.trials_file import TrialWriter

names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
    min_size=1,
    max_size=12,
).filter(str.strip)  # a blank label is not a decision
decisions = st.one_of(
    names,
    st.none(),
    st.builds(NoDecision, names),
    st.lists(names, min_size=1, max_size=3).map(tuple),
)
trials = st.builds(
    Trial,
    case=names,
    index=st.integers(0, 50),
    decision=decisions,
    run=names,
    expected=st.none() | names,
    error_type=st.none(),
    passed=st.none() | st.booleans(),
    aliases=st.lists(names, max_size=3).map(tuple),
    key_id=st.none() | st.text("0123456789abcdef", min_size=16, max_size=16),
)


@settings(max_examples=150)
@given(st.lists(trials, min_size=1, max_size=40))
def test_written_trials_read_back_to_the_same_assessment(tmp_path_factory, batch):
    path = tmp_path_factory.mktemp("t") / "trials.jsonl"
    with open(path, "wb") as stream:
        writer = TrialWriter(stream)
        for trial in batch:
            writer.add(trial)
    evidence, summary = read_trials(path)
    assert summary.records == len(batch)
    assert assess(evidence) == assess(Evidence(batch))
    assert list(evidence.trials()) == list(Evidence(batch).trials())  # passed, aliases survive


def test_chunked_reading_gives_the_same_result_as_one_chunk(tmp_path, monkeypatch):
    lines = [
        json.dumps(
            {
                "case": f"c{n % 7}",
                "trial": n // 7,
                "outcome": "decision",
                "verdict": "ab"[n % 3 == 0],
            }
        )
        for n in range(500)
    ]
    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n".join(lines[:100]) + "\n\n" + "\n".join(lines[100:])
    )  # no final newline, a blank line
    whole = assess(read_trials(path)[0])
    monkeypatch.setattr(trials_module, "CHUNK_BYTES", 97)
    assert assess(read_trials(path)[0]) == whole
    assert whole.trials.received == 500


BAD_LINES = [
    (
        '{"case": "c", "trial": "zero", "outcome": "decision", "verdict": "a"}',
        "trial",
        "Expected `int`",
    ),
    ('{"case": "c", "trial": 0, "outcome": "maybe"}', "outcome", "Invalid enum value"),
    ('{"trial": 0, "outcome": "decision", "verdict": "a"}', None, "missing required field `case`"),
    ('{"case": "c", "trial": 0, "outcome": "decision"}', "verdict", "needs a `verdict` or `tools`"),
    ('{"case": "c", "trial": -1, "outcome": "error"}', "trial", "outside"),
    ('{"case": "c", "trial": 0, "outcome": "decision", "verdict": "a"', None, "invalid JSON"),
    ("[1, 2]", None, "Expected `object`"),
    (
        '{"case": "c", "trial": 0, "outcome": "decision", "verdict": "' + "v" * 4097 + '"}',
        "verdict",
        "at most 4096 characters",
    ),
    (
        '{"case": "c", "trial": 0, "outcome": "decision", "tools": ["'
        + '", "'.join("t" * 257)
        + '"]}',
        "tools",
        "at most 256 names",
    ),
    (
        '{"case": "c", "trial": 0, "outcome": "no_decision", "reason": "' + "r" * 5000 + '"}',
        "reason",
        "at most 4096 characters",
    ),
    (
        '{"case": "c", "trial": 0, "outcome": "decision", "tools": ["a", "b"], "tied_steps": [[0, 1]]}',
        "tied_steps",
        "within the 2-step path",
    ),
    (
        '{"case": "c", "trial": 0, "outcome": "decision", "verdict": "a", "tied_steps": [[0, 2]]}',
        "tied_steps",
        "within the 0-step path",
    ),
    (
        '{"case": "c", "trial": 0, "outcome": "decision", "tools": ["a", "b"], '
        '"tied_steps": [[1, 3]]}',
        "tied_steps",
        "within the 2-step path",
    ),
    (
        '{"case": "c", "trial": 0, "outcome": "decision", "verdict": "a", "aliases": "c2"}',
        "aliases",
        "Expected `array`",
    ),
    (
        '{"case": "c", "trial": 0, "outcome": "decision", "verdict": "a", "aliases": [" "]}',
        "aliases",
        "each is a case id or fingerprint",
    ),
    (
        '{"case": "c", "trial": 0, "outcome": "decision", "verdict": "a", "key_id": "my key"}',
        "key_id",
        "16 lowercase hex digits",
    ),
]


@pytest.mark.parametrize(("line", "field", "problem"), BAD_LINES)
def test_a_bad_line_is_named_with_its_file_line_and_field(tmp_path, line, field, problem):
    good = '{"case": "c", "trial": 0, "outcome": "decision", "verdict": "a"}'
    path = tmp_path / "t.jsonl"
    path.write_text(f"{good}\n\n{good}\n{line}\n{good}\n")
    with pytest.raises(InputError) as caught:
        read_trials(path)
    error = caught.value
    assert error.path == str(path) and error.line == 4
    assert error.field == field
    assert problem in str(error)
    assert str(error).startswith(f"{path}:4: ")


@given(st.binary(max_size=200))
def test_arbitrary_bytes_either_decode_or_raise_an_input_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    path.write_bytes(data)
    try:
        read_trials(path)
    except InputError as error:
        assert error.path == str(path)


def test_unknown_fields_are_ignored_and_run_defaults_to_one_per_file(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"case": "c", "trial": 0, "outcome": "decision", "verdict": "a", "future_field": {"x": 1}}\n'
        '{"case": "c", "trial": 1, "outcome": "no_decision", "reason": "refused", "latency_ms": 12.5}\n'
    )
    evidence, summary = read_trials(path)
    assert summary.runs == {"run"}
    assert [t.decision for t in evidence.trials()] == ["a", NoDecision("refused")]


def test_writer_records_error_types():
    stream = io.BytesIO()
    TrialWriter(stream, "s", "p").add(Trial("c", 3, None, "r", "deny", "TimeoutError"))
    record = json.loads(stream.getvalue())
    assert record == {
        "case": "c",
        "trial": 3,
        "outcome": "error",
        "run": "r",
        "suite": "s",
        "point": "p",
        "error_type": "TimeoutError",
        "expected": "deny",
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "holds no trial records (one JSON object a line)"),
        ("\n\n", "holds no trial records (one JSON object a line)"),
        (
            '{\n  "schema": "verdictgate.suite/v1",\n  "name": "s",\n  "cases": []\n}\n',
            "is a suite file, not trial records (pass it as --suite)",
        ),
        (
            '{"cases": [], "contract": {}, "schema": "agentverity.decision-suite/v1"}\n',
            "is a suite file, not trial records (pass it as --suite)",
        ),
    ],
)
def test_an_empty_or_suite_shaped_trials_file_is_one_line(cli, tmp_path, content, message):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    result = cli("assess", "--trials", str(path))
    assert result.exit_code == 2
    assert result.stderr == f"verdictgate: error: {path}: {message}\n"


def test_a_case_takes_its_expected_route_from_any_of_its_records(cli, tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [{"case": "c", "trial": 0, "outcome": "error", "error_type": "Timeout"}]
    lines += [
        {"case": "c", "trial": i, "outcome": "decision", "verdict": "x", "expected": "x"}
        for i in range(1, 6)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    evidence, _ = read_trials(path)
    assert [case.expected for case in evidence.cases.values()] == ["x"]
    converted = cli("convert", "--trials", str(path))
    assert all(json.loads(line).get("expected") == "x" for line in converted.stdout.splitlines())


def test_lines_whose_verdict_is_not_their_decision_settle_into_readable_records(cli, tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [
        {"case": "c", "trial": 0, "outcome": "decision", "tools": []},
        {"case": "c", "trial": 1, "outcome": "error", "verdict": "x", "error_type": "Boom"},
        {"case": "c", "trial": 2, "outcome": "no_decision", "reason": "refused"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "again.jsonl"
    assert cli("convert", "--trials", str(path), "--output", str(out)).exit_code == 0
    again = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["outcome"], r.get("reason"), r.get("verdict")) for r in again] == [
        ("no_decision", "no_tool_selected", None),
        ("error", None, None),
        ("no_decision", "refused", None),
    ]
    assert cli("assess", "--trials", str(out)).exit_code == 3  # readable again
    path.write_text(
        json.dumps({"case": "c", "trial": 0, "outcome": "decision", "verdict": {"verdict": "x"}})
        + "\n"
    )
    bad = cli("assess", "--trials", str(path))
    assert bad.exit_code == 2 and f"{path}:1: field verdict:" in bad.stderr


def test_a_json_document_given_as_trials_is_named_by_its_schema(cli, tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text(
        json.dumps(
            {"schema": "verdictgate.snapshot/v1", "suite": {"schema": "verdictgate.suite/v1"}},
            indent=2,
        )
    )
    result = cli("assess", "--trials", str(path))
    assert result.stderr == (
        f"verdictgate: error: {path}: is a verdictgate.snapshot/v1 document, not trial records "
        "(one JSON object a line)\n"
    )


@pytest.mark.parametrize("ended", [True, False], ids=["line-ends", "file-ends-mid-line"])
def test_a_line_longer_than_any_record_is_refused_as_it_is_read(cli, tmp_path, ended):
    """The issue's 200 MB verdict line (here 40 MB): an input error naming its line once 16 MiB
    of it are read, not a 200 MB label in a report."""
    good = '{"case": "c", "trial": 0, "outcome": "decision", "verdict": "a"}\n'
    path = tmp_path / "t.jsonl"
    with path.open("w") as out:
        out.write(good * 3)
        out.write('{"case": "c", "trial": 1, "outcome": "decision", "verdict": "')
        out.write("v" * (40 << 20))
        out.write('"}\n' + good if ended else "")
    result = cli("assess", "--trials", str(path), "--format", "json")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"verdictgate: error: {path}:4: the line is longer than 16 MiB")


@pytest.mark.parametrize("field", ["tools", "agents", "nodes"])
def test_a_path_is_written_under_its_rules_field_and_read_back(tmp_path, field):
    """A `nodes` or `agents` route is written under that field, not under `tools`, and each
    reads back as the same path."""
    stream = io.BytesIO()
    writer = TrialWriter(stream, "s", "p", path_key=field)
    for index in range(2):
        writer.add(Trial("c", index, ("router", "billing"), "r", None))
    line = json.loads(stream.getvalue().splitlines()[0])
    assert line[field] == ["router", "billing"]
    assert not ({"tools", "agents", "nodes"} - {field}) & set(line)
    path = tmp_path / "t.jsonl"
    path.write_bytes(stream.getvalue())
    evidence, _ = read_trials(path)
    assert [t.decision for t in evidence.trials()] == [("router", "billing")] * 2


def test_a_line_with_two_paths_is_an_input_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"case": "c", "trial": 0, "outcome": "decision", "tools": ["a"], "nodes": ["b"]}\n'
    )
    with pytest.raises(InputError) as caught:
        read_trials(path)
    assert caught.value.field == "nodes" and "one of tools, agents or nodes" in str(caught.value)


def test_a_langgraph_run_writes_its_routes_under_nodes_and_reads_them_back(cli, tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "trials.jsonl"
    ran = cli(
        "run",
        "--agent",
        f"{root}/examples/langgraph_router.py:stable_router",
        "--suite",
        f"{root}/examples/support_tools_suite.json",
        "--trials-out",
        str(out),
    )
    assert ran.exit_code == 0, ran.stderr
    first = json.loads(out.read_text().splitlines()[0])
    assert "nodes" in first and "tools" not in first
    again = cli(
        "assess", "--trials", str(out), "--suite", f"{root}/examples/support_tools_suite.json"
    )
    assert again.exit_code == 0, again.stdout
