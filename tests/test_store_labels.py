"""Every value the door accepts is stored, on either store, or refused alone at the door; and
a value a store refuses anyway (one an earlier release stored) never stops the tick: the run
or trace that holds it is set aside with one log line, and every other run goes on (issue 35).

A run id, case id, suite or point is a key the store indexes, so the door bounds it in bytes
(MAX_KEY_BYTES, PostgreSQL's b-tree holding 2,704 bytes of a key); any other label is bounded in
characters (MAX_ATTRIBUTE_VALUE). Each field is tried at its limit and past it, in random ASCII,
CJK and emoji."""

from __future__ import annotations

import logging
import random

import msgspec
import pytest

from postgres_support import StoreMaker
from receiver_support import request, span, stable_run, strands_trial
from verdictgate import Contract, Isolation, NoDecision, Policy, Suite
from verdictgate.clock import ManualClock
from verdictgate.otel import conventions as names
from verdictgate.otel.otlp_reading import (
    MAX_ATTRIBUTE_VALUE,
    MAX_KEY_BYTES,
    ExportContents,
    extract_protobuf,
)
from verdictgate.otel.spans import decision_attributes, run_attributes
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.store import LOCAL, Batch

IDLE = 30.0
KEYS = (names.RUN_ID, names.CASE_ID, names.SUITE, names.POINT)
"""The fields a store indexes: bounded in UTF-8 bytes."""
LABELS = ("verdict", "tool", "reason", "error_type", names.CASE_EXPECTED, names.CASE_ALIASES)
"""The fields bounded in characters alone."""
ALPHABETS = {
    "ascii": [chr(code) for code in range(0x21, 0x7F)],
    "cjk": [chr(code) for code in range(0x4E00, 0x4E00 + 500)],
    "emoji": [chr(code) for code in range(0x1F600, 0x1F650)],
}


def text(alphabet: str, length: int, seed: int) -> str:
    """`length` random characters of an alphabet."""
    chosen = random.Random(seed)
    return "".join(chosen.choice(ALPHABETS[alphabet]) for _ in range(length))


def longest(alphabet: str, field: str) -> int:
    """The most characters of the alphabet a field holds at the door: MAX_KEY_BYTES of UTF-8
    for a key, MAX_ATTRIBUTE_VALUE characters for any other label."""
    if field not in KEYS:
        return MAX_ATTRIBUTE_VALUE
    return min(MAX_ATTRIBUTE_VALUE, MAX_KEY_BYTES // len(ALPHABETS[alphabet][0].encode()))


def decision_with(field: str, value: str, run: str) -> dict:
    """A decision span's attributes of run `run`, case c, with `field` set to `value`."""
    decision: object = "approve"
    if field == "tool":
        decision = ("lookup", value)
    elif field == "reason":
        decision = NoDecision(value)
    elif field == "error_type":
        decision = None
    attributes = {
        names.RUN_ID: run,
        names.CASE_ID: "c",
        names.TRIAL: 0,
        names.SUITE: "gate",
        names.POINT: "p",
        **decision_attributes(decision, value if field == "error_type" else None),
    }
    if field == "verdict":
        attributes[names.VERDICT] = value
    elif field == names.CASE_ALIASES:
        attributes[names.CASE_ALIASES] = [value]
    elif field in KEYS or field == names.CASE_EXPECTED:
        attributes[field] = value
    return attributes


def tried() -> list[tuple[str, str, int, bool]]:
    """(field, alphabet, length, taken at the door): each field at its limit and one past it,
    and a key at the character limit too."""
    cases = []
    for alphabet in ALPHABETS:
        for field in KEYS + LABELS:
            most = longest(alphabet, field)
            cases += [(field, alphabet, most, True), (field, alphabet, most + 1, False)]
            if most < MAX_ATTRIBUTE_VALUE:
                cases.append((field, alphabet, MAX_ATTRIBUTE_VALUE, False))
    return cases


def receiver_on(store, clock: ManualClock) -> Receiver:
    return Receiver(store, None, ReceiverConfig(idle=IDLE, replica=LOCAL), clock=clock)


def ingest(receiver: Receiver, spans: list) -> ExportContents:
    contents = extract_protobuf(request(spans).SerializeToString())
    receiver.ingest(contents)
    return contents


def test_labels_at_the_doors_limits_are_stored_or_refused_alone_on_either_store(new_store):
    clock = ManualClock(1_000.0)
    receiver = receiver_on(new_store(), clock)
    taken: dict[str, tuple[str, str]] = {}
    for number, (field, alphabet, length, expected) in enumerate(tried()):
        value = text(alphabet, length, number)
        run = value if field == names.RUN_ID else f"run-{number}"
        neighbour = f"neighbour-{number}"
        spans = [
            span("decide p", decision_with(field, value, run)),
            span("decide p", decision_with("verdict", "approve", neighbour)),
        ]
        contents = ingest(receiver, spans)
        assert contents.rejected == (0 if expected else 1), (field, alphabet, length)
        if not expected:
            assert field in contents.errors[0] or "too long" in contents.errors[0]
        assert receiver.store.run(neighbour) is not None  # the rest of the request is kept
        if expected:
            taken[run] = (field, value)
        else:
            assert receiver.store.run(run) is None
    clock.advance(IDLE + 1)
    receiver.tick()  # every run taken is made final and admitted; no tick fails
    assert receiver.flush()
    for run, (field, value) in taken.items():
        stored = receiver.store.run(run)
        assert stored is not None and stored.status is not None, field
        (trial,) = receiver.store.evidence(run).trials()
        kept = {
            names.RUN_ID: trial.run,
            names.CASE_ID: trial.case,
            names.SUITE: stored.suite,
            names.POINT: stored.point,
            "verdict": trial.decision,
            "tool": trial.decision[-1] if isinstance(trial.decision, tuple) else None,
            "reason": getattr(trial.decision, "reason", None),
            "error_type": trial.error_type,
            names.CASE_EXPECTED: trial.expected,
            names.CASE_ALIASES: trial.aliases[0] if trial.aliases else None,
        }
        assert kept[field] == value, field


@pytest.mark.parametrize("alphabet", list(ALPHABETS))
def test_run_spans_and_trial_spans_keys_are_bounded_alike(new_store, alphabet):
    clock = ManualClock(1_000.0)
    receiver = receiver_on(new_store(), clock)
    over = text(alphabet, longest(alphabet, names.RUN_ID) + 1, 7)
    at = text(alphabet, longest(alphabet, names.RUN_ID), 8)
    suite = Suite("gate", "p", (), Contract({"approve", "deny"}))
    for key in (names.RUN_ID, names.SUITE, names.POINT):
        for value, expected in ((over, 1), (at, 0)):
            declared = run_attributes("declared", suite, Policy(), 4, Isolation.FRESH_SESSION)
            declared[key] = value
            contents = ingest(receiver, [span(names.RUN_SPAN, declared), *stable_run("ok", 1, 2)])
            assert contents.rejected == expected, (key, len(value))
    everything = run_attributes(at, suite, Policy(), 4, Isolation.FRESH_SESSION)
    everything.update({names.SUITE: at, names.POINT: at})
    decided = {**decision_with("verdict", "approve", at), names.CASE_ID: at}
    decided.update({names.SUITE: at, names.POINT: at})
    contents = ingest(receiver, [span(names.RUN_SPAN, everything), span("decide p", decided)])
    assert contents.rejected == 0  # every key at its limit at once: one index key of them all
    assert [trial.case for trial in receiver.store.evidence(at).trials()] == [at]
    for key in (names.RUN_ID, names.CASE_ID):
        for value, expected in ((over, 1), (at, 0)):
            run, case = (value, "c") if key == names.RUN_ID else ("framework", value)
            contents = ingest(receiver, strands_trial(1, run, case, 0, ["lookup"]))
            assert contents.rejected == expected, (key, len(value))
            assert len(contents.framework_spans) == 4  # the spans below it are kept as facts


def poisoned(store, clock: ManualClock) -> None:
    """What a release before the door's byte bound let through: a canary whose suite is 2,800
    characters, and a trial span whose case id is, held with the spans below it."""
    long = text("ascii", 2_800, 1)
    canary = extract_protobuf(request(stable_run("poison-run", 1, 2)).SerializeToString())
    store.write(Batch(canary.trials, labels={"poison-run": (long, "p")}), now=clock())
    contents = extract_protobuf(
        request(strands_trial(9, "poison-trace", "c", 0, ["a"])).SerializeToString()
    )
    marks = [msgspec.structs.replace(mark, case=long) for mark in contents.marks]
    store.write(Batch([], marks=marks, spans=contents.framework_spans), now=clock())


def test_a_poison_value_never_stops_the_tick_on_postgresql(postgres_server, tmp_path, caplog):
    """SQLite keeps a key of any length: PostgreSQL is where a value can poison."""
    new_store = StoreMaker("postgresql", tmp_path, postgres_server)
    clock = ManualClock(1_000.0)
    poisoned(new_store("poisoned"), clock)
    receiver = receiver_on(new_store("poisoned"), clock)
    ingest(receiver, stable_run("canary", 2, 4))
    ingest(receiver, strands_trial(10, "framework", "c1", 0, ["lookup"]))
    caplog.set_level(logging.WARNING, "verdictgate.receiver.core")
    for _ in range(3):  # the tick goes on, again and again: one line for each poison
        clock.advance(IDLE + 1)
        receiver.tick()
    assert receiver.flush()
    for run in ("canary", "framework"):
        stored = receiver.store.run(run)
        assert stored is not None and stored.status is not None, run
    assert [trial.case for trial in receiver.store.evidence("framework").trials()] == ["c1"]
    assert receiver.store.run("poison-run").status is None  # set aside, never admitted
    assert not list(receiver.store.evidence("poison-trace").trials())  # given up, never stored
    lines = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
    assert len(lines) == 2, lines
    assert any("run poison-run" in line for line in lines)
    assert any("ProgramLimitExceeded" in line for line in lines)
    again = receiver_on(new_store("poisoned"), clock)
    caplog.clear()
    clock.advance(IDLE + 1)
    again.tick()
    again.tick()
    assert len([r for r in caplog.records if "set aside" in r.getMessage()]) == 1
    new_store.close()
