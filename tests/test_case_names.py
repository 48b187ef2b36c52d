"""One input, one case: a claim about new inputs counts an input once, whatever its runs call it.

Names a trial links (its case and its `aliases`) are one case; names made in different ways that
no trial links are never counted as more cases than one scheme names."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conftest import codes_of, report_of
from verdictgate import Claim, Policy, Trial, assess, fingerprint
from verdictgate.fingerprints import key_id

ROUTES = ("approve", "deny", "review")
KEYS = (b"first key", b"second key")


def inputs(n: int) -> list[str]:
    return [f"request {route} {i}" for i, route in zip(range(n), ROUTES * n, strict=False)]


def records(run: str, names: list[str], pairs: int = 13, **extra) -> list[dict]:
    """Stable trials of each named input in `run`; `extra[field]` is a list, one value a case."""
    lines = []
    for number, name in enumerate(names):
        route = ROUTES[number % 3]
        fields = {field: values[number] for field, values in extra.items()}
        lines += [
            {
                "run": run,
                "case": name,
                "trial": index,
                "outcome": "decision",
                "verdict": route,
                **fields,
            }
            for index in range(2 * pairs)
        ]
    return lines


def population(cli, write, lines: list[dict]) -> tuple[dict, int]:
    result = cli(
        "assess", "--trials", write("t.jsonl", lines), "--claim", "population", "--format", "json"
    )
    return report_of(result), result.exit_code


def test_forty_cases_named_by_id_in_one_run_and_by_fingerprint_in_the_other_are_forty(cli, write):
    texts = inputs(40)
    ids = [f"case-{n}" for n in range(40)]
    prints = [fingerprint(text, None) for text in texts]
    report, exit_code = population(cli, write, records("a", ids) + records("b", prints))
    assert (report["population"]["cases"], exit_code) == (40, 3)  # not 80, not qualified
    assert report["population"]["e_det"] < 40
    assert "mixed_case_names" in codes_of(report)
    assert report["population"]["case_names"] == {
        "cases": 80,
        "schemes": [
            {"scheme": "case-ids", "key_id": None, "run": None, "cases": 40},
            {"scheme": "unkeyed", "key_id": None, "run": None, "cases": 40},
        ],
        "judged": {"scheme": "case-ids", "key_id": None, "run": None},
        "set_aside": 40,
    }
    assert any("aliases" in step for step in report["next_steps"])
    linked, exit_code = population(
        cli, write, records("a", ids, aliases=[[p] for p in prints]) + records("b", prints)
    )
    one_run, _ = population(cli, write, records("a", ids, pairs=26))
    assert linked["population"]["cases"] == 40 and exit_code == 3
    assert "mixed_case_names" not in codes_of(linked)
    assert linked["population"]["e_det"] == one_run["population"]["e_det"]  # 40 cases, once each
    assert linked["population"]["case_names"]["judged"] is None


def test_names_the_trials_link_can_qualify_and_the_same_names_unlinked_cannot(cli, write):
    """78 stable inputs qualify for new inputs; named by id in one run and by fingerprint in the
    other they still count 78 (never 156), and qualify only once a trial links the names."""
    texts = inputs(78)
    ids = [f"case-{n}" for n in range(78)]
    prints = [fingerprint(text, None) for text in texts]
    unlinked, exit_code = population(cli, write, records("a", ids) + records("b", prints))
    assert (unlinked["population"]["cases"], unlinked["population"]["result"]) == (
        78,
        "deterministic",
    )
    assert exit_code == 3 and codes_of(unlinked) == {"mixed_case_names"}
    linked, exit_code = population(
        cli, write, records("a", prints, aliases=[[i] for i in ids]) + records("b", ids)
    )
    assert (linked["population"]["cases"], linked["status"], exit_code) == (78, "qualified", 0)


def test_unkeyed_and_keyed_fingerprints_of_the_same_inputs_are_not_more_cases(cli, write):
    texts = inputs(40)
    unkeyed = [fingerprint(text, None) for text in texts]
    keyed = [fingerprint(text, KEYS[0]) for text in texts]
    key = key_id(KEYS[0])
    report, exit_code = population(
        cli, write, records("a", unkeyed) + records("b", keyed, key_id=[key] * 40)
    )
    assert (report["population"]["cases"], exit_code) == (40, 3)
    schemes = {
        (s["scheme"], s["key_id"]): s["cases"]
        for s in report["population"]["case_names"]["schemes"]
    }
    assert schemes == {("unkeyed", None): 40, ("keyed", key): 40}
    assert "mixed_case_names" in codes_of(report)


def test_fingerprints_under_two_keys_are_told_apart_by_their_key_ids(cli, write):
    texts = inputs(40)
    first, second = ([fingerprint(text, key) for text in texts] for key in KEYS)
    ids = [[key_id(key)] * 40 for key in KEYS]
    report, _ = population(
        cli, write, records("a", first, key_id=ids[0]) + records("b", second, key_id=ids[1])
    )
    assert report["population"]["cases"] == 40 and "mixed_case_names" in codes_of(report)
    named = report["population"]["case_names"]["schemes"]
    assert sorted(s["key_id"] for s in named) == sorted(key_id(key) for key in KEYS)
    unrecorded, _ = population(cli, write, records("a", first) + records("b", second))
    assert unrecorded["population"]["cases"] == 40  # no key id: a key holds within its run only
    assert {s["run"] for s in unrecorded["population"]["case_names"]["schemes"]} == {"a", "b"}
    same_key, _ = population(cli, write, records("a", first) + records("b", first))
    assert same_key["population"]["cases"] == 40 and "mixed_case_names" not in codes_of(same_key)


def test_one_run_naming_some_cases_by_id_and_others_by_fingerprint_counts_every_case(cli, write):
    """Within a run every input has one name, so a suite mixing ids and fingerprints is no mix;
    nor is that suite run again with the same names."""
    texts = inputs(78)
    names = [f"case-{n}" if n % 2 else fingerprint(text, None) for n, text in enumerate(texts)]
    report, exit_code = population(cli, write, records("a", names))
    assert (report["population"]["cases"], report["status"], exit_code) == (78, "qualified", 0)
    again, exit_code = population(cli, write, records("a", names) + records("b", names))
    assert (again["population"]["cases"], exit_code) == (78, 0)


KINDS = ("id", "unkeyed", "keyed")


def name_of(kind: str, number: int, text: str, key: bytes) -> str:
    """The input's name of one kind: its explicit id, or its fingerprint unkeyed or under `key`."""
    if kind == "id":
        return f"id-{number}"
    return fingerprint(text, key if kind == "keyed" else None)


@st.composite
def named_runs(draw, every_name: bool) -> tuple[int, list[Trial]]:
    """Distinct inputs split into runs (each input in some of them), each run naming each of its
    inputs in a way drawn for it (an id, or a fingerprint unkeyed or under one of two keys, whose
    id is recorded or not), with some of the input's other true names as its aliases (all of
    them, with `every_name`); and how many distinct inputs the runs hold."""
    count = draw(st.integers(1, 12))
    texts = inputs(count)
    trials = []
    used: set[int] = set()
    for run in ("a", "b", "c")[: draw(st.integers(1, 3))]:
        for number in draw(st.sets(st.integers(0, count - 1), min_size=1)):
            used.add(number)
            key, recorded = draw(st.sampled_from(KEYS)), draw(st.booleans())
            kind = draw(st.sampled_from(KINDS))
            others = [k for k in KINDS if k != kind]
            linked = set(others) if every_name else draw(st.sets(st.sampled_from(others)))
            aliases = tuple(name_of(k, number, texts[number], key) for k in sorted(linked))
            trials += [
                Trial(
                    name_of(kind, number, texts[number], key),
                    index,
                    ROUTES[number % 3],
                    run,
                    aliases=aliases,
                    key_id=key_id(key) if recorded else None,
                )
                for index in range(2)
            ]
    return len(used), trials


@given(named_runs(every_name=False))
def test_the_population_never_counts_more_cases_than_distinct_inputs(drawn):
    distinct, trials = drawn
    assessment = assess(trials, policy=Policy(claim=Claim.POPULATION))
    assert 1 <= assessment.population.cases <= distinct
    assert assessment.case_names.judged_cases == assessment.population.cases


@given(named_runs(every_name=True))
def test_inputs_whose_trials_give_every_name_count_once_each(drawn):
    distinct, trials = drawn
    assessment = assess(trials, policy=Policy(claim=Claim.POPULATION))
    assert assessment.population.cases == distinct
    assert "mixed_case_names" not in assessment.reason_codes
