"""One run written by several replicas at once: each writer adds to its own part of the run, so
that writers never wait for each other's commit, while the run's trial cap holds exactly as if
one writer had written it all, and a version of the run is a snapshot its owner reads up to."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from postgres_support import StoreMaker
from verdictgate.receiver.store import Batch, Store, WriteCaps
from verdictgate.receiver.store.connection import Cursor, open_database
from verdictgate.receiver.store.runs import Access, Runs, Visit
from verdictgate.receiver.store.trial_rows import trial_batch
from verdictgate.trial_model import Trial

NOW, UNTIL = 1_000.0, 5_000.0
"""Every write's time, and until when each writer's heartbeat holds."""


def trials(indices: range | list[int], run: str = "r") -> list[Trial]:
    return [Trial("c", index, "approve", run, "approve") for index in indices]


def test_two_writers_of_one_run_each_go_on_while_the_other_is_open(
    postgres_server: str, tmp_path: Path
) -> None:
    """Two replicas' transactions writing trials of one open run on PostgreSQL: each statement
    of either runs while the other transaction is still open, holding what it wrote (a lock
    waited for would fail at the lock timeout, a tenth of a second here), and both commit."""
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("busy")
    store = Store(location)
    for writer, index in (("a", 0), ("b", 1)):  # the run, and each writer's part of it, made
        store.write(
            Batch(trials([index])), now=NOW, claim=(writer, UNTIL), caps=WriteCaps(max_trials=100)
        )
    runs = Runs()

    def see(cursor: Cursor, writer: str) -> dict[str, Access]:
        visit = Visit({"r": 1}, frozenset(), frozenset(), {}, 100)
        return runs.see(cursor, {"r"}, set(), visit, {}, NOW, (writer, UNTIL))

    def take(cursor: Cursor, accesses: dict[str, Access], index: int) -> None:
        runs.take(cursor, trial_batch(trials([index])), accesses)

    first, second = open_database(location, 0.3), open_database(location, 0.3)
    try:
        with ExitStack() as open_transactions:
            a = open_transactions.enter_context(first.transaction())
            b = open_transactions.enter_context(second.transaction())
            held_by_a = see(a, "a")
            take(b, see(b, "b"), 3)  # while a holds the run
            take(a, held_by_a, 2)  # while b holds it, its trial written
    finally:
        first.close()
        second.close()
    run = store.run("r")
    assert run is not None and run.received == 4 and run.version.writes == 4
    assert [trial.index for trial in store.evidence("r").trials()] == [0, 1, 2, 3]
    store.close()


@st.composite
def writes(draw: st.DrawFn) -> tuple[int | None, list[tuple[str, list[int]]]]:
    """A run's cap (None: none), and writes of trials to it by three writers (repeats among
    them)."""
    cap = draw(st.none() | st.integers(0, 30))
    batches = draw(
        st.lists(
            st.tuples(
                st.sampled_from("abc"), st.lists(st.integers(0, 40), min_size=1, max_size=12)
            ),
            min_size=1,
            max_size=10,
        )
    )
    return cap, batches


@example((3, [("a", [0, 0, 0]), ("a", [1, 2])]))  # SQLite read `held` again after the update
@given(writes())
@settings(max_examples=60, deadline=None)
def test_the_cap_holds_exactly_whoever_writes(
    case: tuple[int | None, list[tuple[str, list[int]]]],
) -> None:
    """Whatever room each writer's part holds, the trials refused by each write and those stored
    are those of one writer writing it all: a write is refused only what the run has no room
    for (room held by other writers' parts is taken back first), and the run counts as
    received the trials stored, never a repeat (a part counts a write's trials ahead)."""
    cap, batches = case
    store, stored, received = Store(), set(), 0
    for writer, indices in batches:
        written = store.write(
            Batch(trials(indices)), now=NOW, claim=(writer, UNTIL), caps=WriteCaps(max_trials=cap)
        )
        assert written.runs == [store.run("r")]  # as it stands, whether read back or not
        room = len(indices) if cap is None else max(0, cap - received)
        kept = indices[:room]
        assert written.refused.get("r", 0) == len(indices) - len(kept)
        received += len(set(kept) - stored)
        stored |= set(kept)
    run = store.run("r")
    assert run is not None and run.received == received == len(stored)
    assert {trial.index for trial in store.evidence("r").trials()} == stored
    store.close()


def test_a_version_is_a_snapshot_of_what_every_writer_stored(new_store: StoreMaker) -> None:
    """A version of a run written by several writers holds the trials their writes up to it
    stored, and what the writers other than its owner (`a`, its first) relayed after it is read
    as what came since: the owner's own writes are never read back."""
    store = new_store("snapshot")

    def write(indices: list[int], writer: str, now: float = NOW) -> None:
        written = store.write(Batch(trials(indices)), now=now, claim=(writer, UNTIL))
        assert written.runs == [store.run("r")]  # the run as a write leaves it

    write([0, 1], "a")
    write([6], "a")  # through its part, nothing read back
    write([2], "b")
    write([2, 3], "b", NOW + 1)  # a repeat: one stored of the two counted
    before = store.run("r")
    write([3], "a", NOW + 2)  # a repeat of b's
    write([4, 5], "c")
    after = store.run("r")
    assert before is not None and after is not None
    assert (before.version.writes, after.version.writes) == (4, 6)
    assert [t.index for t in store.evidence("r", upto=before.version).trials()] == [0, 1, 2, 3, 6]
    since = store.claims.written_since("r", before.version, after.version)
    assert sorted(t.index for t in since) == [4, 5]
    assert after.received == 7 and after.last_seen == NOW + 2


HOLDS_ALONE = {  # a write that changes its run, or may not add to it through its part alone
    "labels its suite": ({}, {"suite": "s"}),
    "labels its point": ({}, {"point": "p"}),
    "marks it framework": ({"marking": True}, {}),
    "declares it": ({"declared": True}, {}),
    "brings late records": ({"late": True}, {}),
    "needs more room": ({"need": 60}, {}),
    "finds its owner gone": ({"now": UNTIL + 1}, {}),
    "finds it final": ({"final": True}, {}),
}


@pytest.mark.parametrize("change", ["adds to it", *HOLDS_ALONE])
def test_a_write_adds_through_its_part_only_what_changes_nothing_else(
    new_store: StoreMaker, change: str
) -> None:
    """A write holds its run alone (`Access.standing` None: it changed the run's row, read back)
    exactly when it changes the run or needs more room than its part holds; otherwise it adds
    through its part, the run's row only held shared. The run is labelled or claimed as the
    write needs, on either store."""
    location = new_store.location("alone")
    store = Store(location)
    for writer in ("a", "b"):  # the run, owned by `a`, and a part of `b`'s holding some room
        store.write(
            Batch(trials([ord(writer)])),
            now=NOW,
            claim=(writer, UNTIL),
            caps=WriteCaps(max_trials=100),
        )
    given, labelled = HOLDS_ALONE.get(change, ({}, {}))
    if given.get("final"):
        assert store.close_runs(["r"], owner="a") == ["r"]
    store.close()
    database = open_database(location)
    try:
        with database.transaction() as cursor:
            visit = Visit(
                {"r": int(given.get("need", 1))},
                frozenset({"r"} if given.get("declared") else ()),
                frozenset({"r"} if given.get("marking") else ()),
                {"r": 1} if given.get("late") else {},
                100,
            )
            labels = {"r": (labelled.get("suite"), labelled.get("point"))}
            now = float(given.get("now", NOW))
            accesses = Runs().see(cursor, {"r"}, set(), visit, labels, now, ("b", 9e9))
    finally:
        database.close()
    (access,) = accesses.values()
    assert (access.standing is not None) is (change == "adds to it"), access
    assert access.final is (change == "finds it final")
    assert access.claimed is (change == "finds its owner gone")
    run = Store(location).run("r")
    assert run is not None
    assert (run.suite, run.point) == (labelled.get("suite"), labelled.get("point"))
    assert run.owner == ("b" if change == "finds its owner gone" else "a")


def test_a_write_that_brings_labels_the_run_has_adds_through_its_part(
    new_store: StoreMaker,
) -> None:
    """Labels a run holds already change nothing: the write adds through its part, the run's
    row only held shared (`Access.standing` set), on either store."""
    location = new_store.location("labelled")
    store = Store(location)
    labels = {"r": ("s", "p")}
    for writer in ("a", "b"):
        store.write(
            Batch(trials([ord(writer)]), labels=labels),
            now=NOW,
            claim=(writer, UNTIL),
            caps=WriteCaps(max_trials=100),
        )
    store.close()
    database = open_database(location)
    try:
        with database.transaction() as cursor:
            visit = Visit({"r": 1}, frozenset(), frozenset(), {}, 100)
            accesses = Runs().see(cursor, {"r"}, set(), visit, labels, NOW, ("b", 9e9))
    finally:
        database.close()
    (access,) = accesses.values()
    assert access.standing is not None and not access.final and not access.claimed


@pytest.mark.parametrize("case", ["marks it framework, as it is", "hears of it, its owner gone"])
def test_a_write_that_changes_nothing_adds_through_its_part_whatever_it_brings(
    new_store: StoreMaker, case: str
) -> None:
    """What would change the run, when the run has it already (marked framework) or when it
    does not apply (an owner's heartbeat matters only to a write that brings the run trials,
    not to one that hears of it through a settling trace), leaves the write adding through its
    part, on either store."""
    location = new_store.location("unchanged")
    store = Store(location)
    for writer in ("a", "b"):
        store.write(
            Batch(trials([ord(writer)])),
            now=NOW,
            claim=(writer, UNTIL),
            caps=WriteCaps(max_trials=100),
        )
    marking = case.startswith("marks")
    database = open_database(location)
    try:
        if marking:  # a first write marks it (holding it alone), the next adds through its part
            for _ in range(2):
                with database.transaction() as cursor:
                    visit = Visit({"r": 1}, frozenset(), frozenset({"r"}), {}, 100)
                    accesses = Runs().see(cursor, {"r"}, set(), visit, {}, NOW, ("b", UNTIL))
                    Runs().mark_framework(cursor, {"r"})
        else:
            with database.transaction() as cursor:
                visit = Visit({}, frozenset(), frozenset(), {}, 100)
                accesses = Runs().see(cursor, set(), {"r"}, visit, {}, UNTIL + 1, ("b", 9e9))
    finally:
        database.close()
    (access,) = accesses.values()
    assert access.standing is not None and not access.final and not access.claimed
    run = store.run("r")
    assert run is not None and run.owner == "a" and run.framework is marking
    store.close()
