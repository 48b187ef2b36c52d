"""Suite files of both schemas, fingerprints, and the errors a bad suite gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import suite_document
from verdictgate import InputError, load_suite
from verdictgate.fingerprints import fingerprint, fingerprint_key, fingerprint_mode


def test_verdictgate_suite(write):
    document = suite_document(targets={"deny": 0.01}, minimum_cases={"deny": 2}, critical=["deny"])
    document["tolerance"] = 0.1
    suite = load_suite(write("s.json", document))
    assert suite.name == "gate" and suite.point == "approval_gate" and suite.tolerance == 0.1
    assert suite.contract.required == suite.contract.allowed  # required defaults to allowed
    assert suite.contract.targets == {"deny": 0.01}
    assert [case.id for case in suite.cases][:2] == ["approve-0", "approve-1"]


def test_cases_without_ids_are_fingerprinted_with_the_key(write, monkeypatch):
    monkeypatch.delenv("VERDICTGATE_FINGERPRINT_KEY", raising=False)
    document = {
        "schema": "verdictgate.suite/v1",
        "cases": [{"input": "refund me", "expected": "x"}],
    }
    path = write("s.json", document)
    unkeyed = load_suite(path).cases[0].id
    keyed = load_suite(path, key=b"secret").cases[0].id
    assert unkeyed.startswith("sha256:") and keyed.startswith("hmac-sha256:")
    assert keyed == fingerprint("refund me", b"secret") != fingerprint("refund me", b"other")
    assert "refund" not in keyed and "refund" not in unkeyed


def test_fingerprint_key_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("VERDICTGATE_FINGERPRINT_KEY", "k1")
    assert fingerprint_key() == b"k1"
    assert fingerprint_key("explicit") == b"explicit"
    monkeypatch.delenv("VERDICTGATE_FINGERPRINT_KEY")
    assert fingerprint_key() is None
    assert fingerprint_mode(["a", "hmac-sha256:00"]) == "keyed"
    assert fingerprint_mode(["hmac-sha256:00", "sha256:00"]) == "unkeyed"
    assert fingerprint_mode(["a"]) == "case-ids"


def test_agentverity_decision_suites_are_read(tmp_path):
    path = Path(__file__).resolve().parents[1] / "examples" / "agentverity" / "decision_suite.json"
    suite = load_suite(path)
    assert len(suite.cases) == 6 and suite.contract.critical == {"deny"}
    assert all(case.id.startswith("sha256:") for case in suite.cases)
    document = json.loads(path.read_text())
    document["contract"]["targets"] = {"deny": 0.01}  # AgentVerity's per-route targets
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(document))
    assert load_suite(plan).contract.targets == {"deny": 0.01}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schema": "other/v1"}, "schema"),
        ({"cases": []}, "cases"),
        ({"cases": [{"expected": "deny"}]}, "cases[0]"),
        ({"cases": [{"id": "a", "expected": "nope"}]}, "cases[0].expected"),
        ({"cases": [{"id": "a"}, {"id": "a"}]}, "cases[1]"),
        ({"contract": {"allowed": ["a"], "targets": {"a": 2}}}, "contract"),
        ({"contract": {"allowed": ["a"], "targets": {"a": "x"}}}, "contract.targets.a"),
        ({"contract": {"allowed": ["a"], "critical": ["b"]}}, "contract.critical"),
        ({"contract": {"allowed": "a"}}, "contract.allowed"),
        ({"tolerance": 5}, "tolerance"),
    ],
)
def test_a_bad_suite_is_named_by_field(write, change, field):
    document = {**suite_document(), **change}
    with pytest.raises(InputError) as caught:
        load_suite(write("s.json", document))
    assert caught.value.field == field


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{\n  "schema": "verdictgate.suite/v1",\n  "cases": [\n}')
    with pytest.raises(InputError) as caught:
        load_suite(path)
    assert caught.value.line == 4 and "invalid JSON" in str(caught.value)


@pytest.mark.parametrize(
    ("change", "field", "hint"),
    [
        (lambda d: d.update(tolerence=0.1), "tolerence", "did you mean `tolerance`?"),
        (
            lambda d: d["contract"].update(requried=["approve"]),
            "contract.requried",
            "did you mean `required`?",
        ),
        (
            lambda d: d["cases"][1].update(expeted="deny"),
            "cases[1].expeted",
            "did you mean `expected`?",
        ),
        (
            lambda d: d.update(semantic={"threshold": 0.8, "modle": "x"}),
            "semantic.modle",
            "did you mean `model`?",
        ),
        (lambda d: d.update(zzz=1), "zzz", "known: cases, claim, contract"),
    ],
)
def test_a_key_the_suite_format_does_not_have_is_named_with_the_nearest_one(
    write, change, field, hint
):
    document = suite_document()
    change(document)
    with pytest.raises(InputError) as caught:
        load_suite(write("s.json", document))
    assert caught.value.field == field and hint in str(caught.value)


def test_annotations_are_allowed_and_agentverity_fields_are_its_own(write):
    document = suite_document()
    document["_comment"] = "nightly suite"
    document["$id"] = "https://example.test/suite"
    assert load_suite(write("s.json", document)).name == "gate"
    theirs = {**suite_document(), "schema": "agentverity.decision-suite/v1", "layer": "decision"}
    assert load_suite(write("av.json", theirs)).cases
