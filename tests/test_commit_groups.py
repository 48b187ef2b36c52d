"""Writes committed in groups (issue 35): the requests that arrive while a group commits are
committed together by the next one, each acknowledged only after that commit, and a request
refused for what it is (past --max-open-runs, or a write the store refuses) is refused alone,
never failing the others of its group."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from receiver_support import request, stable_run
from verdictgate.clock import ManualClock
from verdictgate.otel.otlp_reading import ExportContents, extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.ingest.commit_groups import CommitGroups
from verdictgate.receiver.ingest.fair_gate import Busy
from verdictgate.receiver.store import LOCAL, Batch, Store
from verdictgate.trial_model import Trial

IDLE = 30.0


def in_thread(work) -> tuple[threading.Thread, list]:
    """`work()` on a thread of its own, started; the thread, and what it returned or raised."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(work())
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


class Commits:
    """A commit function that records each group it is given, refuses the request "bad" alone,
    and holds the first group until `release` is set."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, group: list[str]) -> list[str | Exception]:
        self.entered.set()
        assert self.release.wait(30)
        self.groups.append(group)
        return [ValueError(name) if name == "bad" else name.upper() for name in group]


def test_a_group_is_acknowledged_after_its_commit_and_a_refusal_is_its_own() -> None:
    commits = Commits()
    groups: CommitGroups[str, str] = CommitGroups(threading.Lock(), commits)
    queued = [groups.queue(name) for name in ("a", "bad", "c")]
    waiting = [in_thread(one.outcome) for one in queued]
    assert commits.entered.wait(30)
    assert all(thread.is_alive() for thread, _ in waiting)  # nothing answered before the commit
    commits.release.set()
    for thread, _ in waiting:
        thread.join(30)
    assert commits.groups == [["a", "bad", "c"]]  # one commit for the three
    (a,), (bad,), (c,) = (outcome for _, outcome in waiting)
    assert (a, c) == ("A", "C")
    assert isinstance(bad, ValueError)


def test_requests_that_come_while_a_group_commits_go_in_the_next_one() -> None:
    commits = Commits()
    groups: CommitGroups[str, str] = CommitGroups(threading.Lock(), commits)
    first = in_thread(lambda: groups.submit("a"))
    assert commits.entered.wait(30)  # "a" is being committed: the next ones wait for it
    later = [groups.queue(name) for name in ("b", "c")]
    waiting = [in_thread(one.outcome) for one in later]
    commits.release.set()
    for thread, _ in (first, *waiting):
        thread.join(30)
    assert commits.groups == [["a"], ["b", "c"]]
    assert [outcome for _, outcome in (first, *waiting)] == [["A"], ["B"], ["C"]]


def test_a_commit_that_fails_fails_every_request_of_its_group() -> None:
    def commit(group: list[str]) -> list[str | Exception]:
        raise OSError("the disk is gone")

    groups: CommitGroups[str, str] = CommitGroups(threading.Lock(), commit)
    queued = [groups.queue(name) for name in ("a", "b")]
    for one in queued:
        with pytest.raises(OSError, match="disk"):
            one.outcome()


class GatedStore(Store):
    """A store whose groups of writes wait for `release`, that counts the writes of each group
    it committed, and that fails every write to a run of `failing` inside its transaction (as
    a bug would)."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.entered, self.release = threading.Event(), threading.Event()
        self.committed: list[int] = []
        self.failing: set[str] = set()

    def together(self, writes):
        self.entered.set()
        assert self.release.wait(30)
        outcomes = super().together(writes)
        self.committed.append(len(writes))
        return outcomes

    def write(self, batch, *args, **kwargs):
        if any(trial.run in self.failing for trial in batch.trials):
            batch = replace(batch, marks=failing_marks())  # read inside the transaction
        return super().write(batch, *args, **kwargs)


def failing_marks():
    raise KeyError("a bug inside the write")
    yield


def contents(run: str, trials: int = 2) -> ExportContents:
    return extract_protobuf(request(stable_run(run, cases=1, trials=trials)).SerializeToString())


def test_a_receiver_commits_a_group_once_and_refuses_its_requests_alone(new_store) -> None:
    store = GatedStore(new_store.location())
    try:
        config = ReceiverConfig(idle=IDLE, replica=LOCAL, max_open_runs=2)
        receiver = Receiver(store, None, config, clock=ManualClock(1_000.0))
        store.release.set()
        receiver.ingest(contents("a"))  # one open run of two
        store.release.clear()
        requests = {
            "b": contents("b"),  # a new run: the second and last one there is room for
            "c": contents("c"),  # a third new run: past --max-open-runs, refused alone
            "a": contents("a", trials=4),  # an open run goes on
        }
        queued = [receiver.commits.queue((one, None)) for one in requests.values()]
        waiting = [in_thread(one.outcome) for one in queued]
        assert store.entered.wait(30)
        assert all(thread.is_alive() for thread, _ in waiting)  # none acknowledged yet
        assert store.committed == [1]
        store.release.set()
        for thread, _ in waiting:
            thread.join(30)
        assert store.committed == [1, 2]  # b and a in one transaction
        outcomes = dict(zip(requests, (outcome for _, (outcome,) in waiting), strict=True))
        assert isinstance(outcomes["c"], Busy)
        assert store.run("c") is None  # nothing of it taken
        assert store.run("b").received == 2
        assert store.run("a").received == 4

        store.failing = {"a"}
        queued = [receiver.commits.queue((contents(run, 6), None)) for run in ("b", "a")]
        with pytest.raises(KeyError):  # the store fails it: it alone
            queued[1].outcome()
        assert queued[0].outcome().accepted.keys() == {"b"}
        assert store.committed == [1, 2, 2]
        assert store.run("a").received == 4
        assert store.run("b").received == 6
        assert store.run("b").version.writes == 2  # written once more: the group's try was undone
    finally:
        store.close()


def test_a_store_commits_writes_together_and_one_that_fails_alone(new_store) -> None:
    store = new_store()

    def write(run: str):
        return lambda: store.write(Batch([Trial("c0", 0, "approve", run, "approve")]), now=1.0)

    def failing() -> None:
        store.write(
            Batch([Trial("c0", 0, "approve", "x", "approve")], marks=failing_marks()), now=1.0
        )

    outcomes = store.together([write("r1"), failing, write("r2")])
    assert isinstance(outcomes[1], KeyError)
    assert [run.run_id for outcome in (outcomes[0], outcomes[2]) for run in outcome.runs] == [
        "r1",
        "r2",
    ]
    assert store.run("r1").received == store.run("r2").received == 1
    assert store.run("r1").version.writes == 1  # written once: the group's try was undone
    assert store.run("x") is None


def test_a_write_failing_after_its_statements_ran_is_undone_and_the_others_redone_durably(
    new_store,
) -> None:
    """A write the store fails halfway (its run made and claimed, then a value no driver can
    bind): the group's transaction is undone whole, and each write done again in a transaction
    of its own, so the failed run leaves nothing and the others are committed for good (seen
    by another connection), each counted once."""
    store = new_store("grouped")

    def write(run: str, latency: object = 1.0):
        trial = Trial("c0", 0, "approve", run, "approve", latency_ms=latency)
        return lambda: store.write(Batch([trial]), now=1.0)

    outcomes = store.together([write("r1"), write("x", object()), write("r2")])
    assert isinstance(outcomes[1], Exception) and not isinstance(outcomes[0], Exception)
    other = new_store("grouped")  # another connection to the same store
    for reader in (store, other):
        assert reader.run("x") is None
        for run in ("r1", "r2"):
            stored = reader.run(run)
            assert stored is not None and (stored.received, stored.version.writes) == (1, 1)
    store.together([write("r1")])  # a repeat: counted as a duplicate, not stored again
    assert store.run("r1").received == 1


def test_a_group_whose_copy_repeats_a_held_trial_is_done_again_whole(new_store) -> None:
    """Writes of many trials each, one of which repeats trials held: on PostgreSQL their copy
    fails the group's transaction, which is done again inserting them as written, once and
    whole (no write done alone); on either store each write stores its new trials once and
    counts the repeats, and the runs it returns stand as the store holds them."""
    store = new_store("copies")

    def write(run: str, indices: range):
        trials = [Trial("c0", index, "approve", run, "approve") for index in indices]
        return lambda: store.write(Batch(trials), now=1.0)

    store.together([write("r1", range(16))])
    outcomes = store.together([write("r2", range(16)), write("r1", range(8, 24))])
    assert not any(isinstance(outcome, Exception) for outcome in outcomes)
    assert [outcome.runs for outcome in outcomes] == [[store.run("r2")], [store.run("r1")]]
    r1, r2 = store.run("r1"), store.run("r2")
    assert (r1.received, r1.version.writes) == (24, 2)  # the group committed once
    assert (r2.received, r2.version.writes) == (16, 1)
    evidence = store.evidence("r1")
    assert sorted(trial.index for trial in evidence.trials()) == list(range(24))
    assert evidence.duplicates == 8
