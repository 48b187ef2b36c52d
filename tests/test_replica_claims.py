"""Replicas sharing one PostgreSQL store, in one process and on one clock the test drives: a run
is decided by the replica that claimed it, whatever replica took its trials; a lapsed lease is
taken over, a renewed one never; a trace is settled once, and an admission delivered once."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from postgres_support import StoreMaker
from receiver_support import decision_span, request, run_span, stable_run
from verdictgate import Contract, Suite, Trial, assess, render
from verdictgate.clock import ManualClock
from verdictgate.otel import conventions as names
from verdictgate.otel.admission_record import AdmissionRecord, TrialTally
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.publishing.forwarder import ALL_SIGNALS, Forwarder
from verdictgate.receiver.publishing.otlp_target import any_value
from verdictgate.receiver.store import Batch, Store

LEASE = 10.0
SUITE = Suite("refunds", "refund_gate", (), Contract({"approve"}))


def publication(run: str) -> str:
    """An admission of a run, as the outbox stages it."""
    trials = [Trial("c", i, "approve", run, "approve") for i in range(4)]
    return AdmissionRecord.of(assess(trials, SUITE), {"approve"}, TrialTally()).to_json()


class Recording:
    """A publish target that keeps what it was given, by the replica that delivered it."""

    endpoint = "a recording target"

    def __init__(self) -> None:
        self.delivered: list[tuple[int, str]] = []
        self.lock = threading.Lock()

    def deliver(self, seq: int, publication: AdmissionRecord, pending: int) -> tuple[int, None]:
        with self.lock:
            self.delivered.append((seq, publication.span_id))
        return ALL_SIGNALS, None

    def close(self) -> None:
        """Nothing in flight."""


@pytest.fixture
def location(postgres_server: str, tmp_path: Path) -> str:
    return StoreMaker("postgresql", tmp_path, postgres_server).location("shared")


def replica(location: str, name: str, clock: ManualClock, **config: float) -> Receiver:
    """A receiver named `name` on the shared store, with a forwarder that is never started (its
    outbox is read by the test)."""
    store = Store(location)
    config = {"idle": 60.0, "settle": 1.0, **config}
    settings = ReceiverConfig(replica=name, lease=LEASE, **config)
    return Receiver(store, Forwarder(store, Recording(), clock=clock), settings, clock=clock)


def ingest(receiver: Receiver, spans: list[Span]) -> None:
    receiver.ingest(extract_protobuf(request(spans).SerializeToString()))


def test_the_owner_decides_a_run_whose_trials_reached_both_replicas(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    spans = stable_run("r", cases=4, trials=10)
    ingest(a, [run_span("r", planned=40), *spans[:5]])  # a opens the run: a owns it
    for n, start in enumerate(range(5, 40, 5)):
        ingest((b, a)[n % 2], spans[start : start + 5])
    assert b.store.run("r").owner == "a" and not b.store.run("r").final
    b.tick()
    assert not b.store.run("r").final  # b never decides a run a owns
    waited: list = []  # `status --wait` asked of b, while a decides the run
    waiting = threading.Thread(target=lambda: waited.append(b.wait("r", timeout=60)))
    waiting.start()
    a.tick()  # a catches up with b's trials: its plan is complete
    assert a.flush()
    waiting.join(60)
    assert waited and waited[0] is not None and not waited[0].in_progress
    assert waited[0].status == a.assessment("r").status
    run = a.store.run("r")
    assert run.status is not None and run.received == 40
    assert a.assessment("r").trials.received == 40
    assert b.assessment("r") == a.assessment("r")  # either replica answers the same
    assert a.store.outbox_size() == 1  # admitted once


def test_a_lapsed_lease_is_taken_over_and_a_renewed_one_never(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    spans = stable_run("r", cases=4, trials=10)
    ingest(a, [run_span("r", planned=40), *spans[:20]])
    for _ in range(12):  # a ticks and renews: two whole leases pass
        clock.advance(LEASE / 5)
        a.tick()
        b.tick()
    assert b.store.run("r").owner == "a"
    ingest(b, spans[20:])  # a dies here, without a word: its plan is complete, in b's write
    b.tick()
    assert not b.store.run("r").final  # not b's to decide while a's lease holds
    clock.advance(LEASE + 1)
    b.tick()  # takes it over, with every trial from the store
    assert b.flush()
    run = b.store.run("r")
    assert run.owner == "b" and run.status is not None and run.received == 40
    assert b.store.outbox_size() == 1
    a.tick()  # a comes back: it lets the run go, and admits nothing
    assert a.flush() and a.store.outbox_size() == 1


def test_a_run_claimed_back_by_a_write_is_taken_up_with_what_the_owner_between_wrote(
    location: str,
) -> None:
    """An owner's own trials are never read back by it (only what other replicas relayed): so a
    replica that claims a run back in a write, after another owned it meanwhile, takes it up
    whole, with the trials that other owner wrote."""
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    spans = stable_run("r", cases=4, trials=10)
    ingest(a, [run_span("r", planned=40), *spans[:10]])  # a opens the run: a owns it
    clock.advance(LEASE + 1)  # a stalls
    b.tick()
    assert b.store.run("r").owner == "b"
    ingest(b, spans[10:20])  # b's own trials, as the run's owner
    clock.advance(LEASE + 1)  # b stalls too; a comes back with the rest
    ingest(a, spans[20:])
    assert a.store.run("r").owner == "a"
    a.tick()  # its plan is complete: every trial, b's among them
    assert a.flush()
    run = a.store.run("r")
    assert run.status is not None and run.received == 40
    assert a.assessment("r").trials.received == 40
    assert a.store.outbox_size() == 1


def test_a_write_whose_commit_was_in_doubt_is_taken_up_whole_by_its_owner(
    location: str,
) -> None:
    """A write the store failed may have committed all the same (the connection lost at its
    commit): its owner lets the run go and takes it up whole at the next tick, its own trials
    among them (an owner never reads its own writes back piece by piece)."""
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    spans = stable_run("r", cases=4, trials=10)
    ingest(a, [run_span("r", planned=40), *spans[:20]])  # a owns the run
    committed = a.store.together

    def lost_at_commit(writes):  # committed, then the connection is lost before the answer
        return [psycopg.OperationalError("server closed the connection")] * len(committed(writes))

    a.store.together = lost_at_commit  # type: ignore[method-assign]
    with pytest.raises(psycopg.OperationalError):
        ingest(a, spans[20:30])
    a.store.together = committed  # type: ignore[method-assign]
    ingest(b, spans[20:])  # the sender retries through b (the first ten are repeats), and more
    a.tick()
    assert a.flush()
    run = a.store.run("r")
    assert run.status is not None and run.received == 40
    assert a.assessment("r").trials.received == 40


def test_a_replica_that_stops_hands_its_runs_over_at_once(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock, idle=5.0)
    ingest(a, stable_run("canary", cases=2, trials=4))
    a.close()  # a rolling deploy: its leases lapse now
    b.tick()
    assert b.store.run("canary").owner == "b"
    clock.advance(6.0)
    b.tick()
    assert b.flush() and b.store.run("canary").status is not None


def test_a_run_final_but_not_admitted_by_a_dead_owner_is_admitted_by_another(
    location: str,
) -> None:
    clock = ManualClock(1_000_000.0)
    dead = Store(location)  # a replica that made the run final, then died before admitting it
    trials = [Trial(f"c{c}", i, "approve", "r", "approve") for c in range(2) for i in range(4)]
    dead.write(Batch(trials), now=clock(), claim=("a", clock() + LEASE))
    assert dead.close_runs(["r"], "a") == ["r"]
    assert dead.close_runs(["r"], "b") == []  # never another's to close
    dead.close()
    b = replica(location, "b", clock)
    assert b.store.run("r").status is None
    clock.advance(LEASE + 1)
    b.tick()
    assert b.flush() and b.store.run("r").status is not None
    assert b.assessment("r").trials.received == 8
    assert b.store.outbox_size() == 1


def strands_trace(run: str, case: str, index: int, tools: list[str]) -> list[Span]:
    """A harness's trial span and the tools called below it, in one trace."""
    trace_id = f"{case}-{index}".encode().ljust(16, b"\0")[:16]

    def made(number: int, name: str, parent: int | None, **attributes: object) -> Span:
        return Span(
            name=name,
            trace_id=trace_id,
            span_id=number.to_bytes(8, "big"),
            parent_span_id=parent.to_bytes(8, "big") if parent else b"",
            start_time_unix_nano=number,
            end_time_unix_nano=number + 1,
            attributes=[KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()],
        )

    harness = made(
        1,
        names.TRIAL_SPAN,
        None,
        **{
            names.RUN_ID: run,
            names.CASE_ID: case,
            names.TRIAL: index,
            names.DECISION_RULE: "tools",
            names.SUITE: "support",
        },
    )
    calls = [
        made(
            10 + n,
            f"execute_tool {tool}",
            1,
            **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool},
        )
        for n, tool in enumerate(tools)
    ]
    return [harness, *calls]


def test_replicas_settling_one_trace_at_once_store_its_trial_once(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    for index in range(6):
        harness, *calls = strands_trace("fw", "c0", index, ["lookup", "refund"])
        ingest(a, [harness, calls[0]])  # one trial's spans reach both replicas
        ingest(b, [calls[1]])
    clock.advance(2.0)  # quiet: every trial is due on both replicas
    start = threading.Barrier(2)

    def tick(receiver: Receiver) -> None:
        start.wait()
        receiver.tick()

    threads = [threading.Thread(target=tick, args=(r,)) for r in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    evidence = a.store.evidence("fw")
    trials = list(evidence.trials())
    assert [t.decision for t in trials] == [("lookup", "refund")] * 6
    assert a.assessment("fw").trials.duplicates == 0
    clock.advance(60.0)  # the idle period: a span that came now would be late, not amend them
    a.tick()
    assert a.store.traces.held_spans() == 0


def test_each_admission_is_delivered_by_one_replica_and_a_dead_ones_by_another(
    location: str,
) -> None:
    clock = ManualClock(1_000_000.0)
    stores = [Store(location), Store(location)]
    targets = [Recording(), Recording()]
    forwarders = [
        Forwarder(s, t, clock=clock, batch=4) for s, t in zip(stores, targets, strict=True)
    ]
    for forwarder, name in zip(forwarders, "ab", strict=True):
        forwarder.claim_as(name, LEASE)
    for number in range(40):
        run = f"r{number}"
        stores[0].write(Batch([Trial("c", 0, "approve", run, "approve")]), now=clock())
        stores[0].finish(run, "qualified", publication(run), clock())
    claimed = stores[0].outbox.claim("dead", clock(), clock() + LEASE, 5)  # then it dies
    start = threading.Barrier(2)

    def drain(forwarder: Forwarder) -> None:
        start.wait()
        forwarder.drain()

    threads = [threading.Thread(target=drain, args=(f,)) for f in forwarders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    delivered = targets[0].delivered + targets[1].delivered
    assert len(delivered) == len({seq for seq, _ in delivered}) == 35  # once each
    clock.advance(LEASE + 1)
    forwarders[1].drain()  # the dead replica's claims lapsed
    late = [entry for entry in targets[1].delivered if entry[0] in {seq for seq, _, _ in claimed}]
    assert len(late) == 5
    bodies = {seq: AdmissionRecord.from_json(body).span_id for seq, body, _ in claimed}
    assert all(span_id == bodies[seq] for seq, span_id in late)  # the same span ids
    assert stores[0].outbox_size() == 0
    for store in stores:
        store.close()


def test_a_slow_delivery_claims_its_entries_again_before_another_replica_may(
    location: str,
) -> None:
    clock = ManualClock(1_000_000.0)
    stores = [Store(location), Store(location)]
    for number in range(6):
        stores[0].write(Batch([Trial("c", 0, "approve", f"r{number}", "approve")]), now=clock())
        stores[0].finish(f"r{number}", "qualified", publication(f"r{number}"), clock())
    other = Forwarder(stores[1], Recording(), clock=clock)
    other.claim_as("b", LEASE)

    class Slow(Recording):
        """Each delivery takes most of a lease, and the other replica drains meanwhile."""

        def deliver(self, seq: int, publication: AdmissionRecord, pending: int) -> tuple[int, None]:
            clock.advance(LEASE * 0.6)
            other.drain()
            return super().deliver(seq, publication, pending)

    slow = Slow()
    forwarder = Forwarder(stores[0], slow, clock=clock)
    forwarder.claim_as("a", LEASE)
    assert forwarder.drain()
    assert len(slow.delivered) == 6 and other.target.delivered == []
    for store in stores:
        store.close()


def drop_connections(location: str) -> None:
    """End every connection the stores have to the database, as a PostgreSQL restart or a
    proxy would (the next use of each makes it again)."""
    database = location.rpartition("/")[2]
    with psycopg.connect(location.rpartition("/")[0] + "/postgres", autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = 'verdictgate'",
            (database,),
        )


def failing_once(location: str, method):
    """The method, but its first call finds the store's connection dropped."""
    calls = []

    def wrapped(*args, **kwargs):
        if not calls:
            calls.append(1)
            drop_connections(location)
        return method(*args, **kwargs)

    return wrapped


def test_a_fault_between_deciding_a_run_and_closing_it_is_taken_up_again(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a = replica(location, "a", clock)
    spans = stable_run("r", cases=4, trials=10)
    ingest(a, [run_span("r", planned=40), *spans[:39]])
    a.store.close_runs = failing_once(location, a.store.close_runs)
    ingest(a, spans[39:])  # its trial is committed, so acknowledged; making the run final is not
    assert a.store.run("r").received == 40 and not a.store.run("r").final
    a.tick()  # the store says a owns an open run it does not hold: it takes it up again
    assert a.flush()
    assert a.store.run("r").status is not None and a.store.outbox_size() == 1


def test_an_admission_that_fails_is_made_at_the_next_tick(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a = replica(location, "a", clock)
    a.store.finish = failing_once(location, a.store.finish)
    ingest(a, [run_span("r", planned=8), *stable_run("r", cases=2, trials=4)])
    assert a.flush() and a.store.run("r").final and a.store.run("r").status is None
    a.tick()  # final, owned, not admitted and not in the finisher: admitted now
    assert a.flush() and a.store.run("r").status is not None
    assert a.store.outbox_size() == 1


def test_a_store_fault_while_taking_a_run_over_never_sets_it_aside(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    spans = stable_run("r", cases=4, trials=10)
    ingest(a, [run_span("r", planned=40), *spans[:20]])  # then a dies
    ingest(b, spans[20:])
    clock.advance(LEASE + 1)
    b.store.evidence = failing_once(location, b.store.evidence)
    b.tick()  # claims the run and cannot read it; then takes it up from the store
    assert b.flush() and b.store.run("r").status is not None
    assert b.assessment("r").trials.received == 40


def test_a_started_forwarder_delivers_what_a_dead_replica_staged(location: str) -> None:
    clock = ManualClock(1_000_000.0)
    store, target = Store(location), Recording()
    forwarder = Forwarder(store, target, clock=clock)
    forwarder.claim_as("b", 0.3)  # it looks for others' entries every 0.1 s
    forwarder.start()  # finds the outbox empty, and waits
    a = replica(location, "a", clock)
    ingest(a, [run_span("r", planned=8), *stable_run("r", cases=2, trials=4)])
    assert a.flush()  # staged by a, never delivered by it: a dies; nothing wakes b's forwarder
    try:
        deadline = time.monotonic() + 30
        while not target.delivered and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        forwarder.stop()
    assert len(target.delivered) == 1 and store.outbox_size() == 0
    store.close()


def test_every_replicas_scrape_endpoint_shows_the_latest_admission_whoever_made_it(
    location: str,
) -> None:
    from verdictgate.receiver.publishing.prometheus_endpoint import PrometheusEndpoint

    clock = ManualClock(1_000_000.0)
    endpoints = [PrometheusEndpoint(), PrometheusEndpoint()]
    a, b = (
        Receiver(
            Store(location),
            None,
            ReceiverConfig(replica=name, lease=LEASE, idle=60.0),
            clock=clock,
            scrape=endpoint,
        )
        for name, endpoint in zip("ab", endpoints, strict=True)
    )
    ingest(a, [run_span("first", planned=8), *stable_run("first", cases=2, trials=4)])
    assert a.flush()
    clock.advance(10.0)
    ingest(b, [run_span("second", planned=8), *stable_run("second", cases=2, trials=4)])
    assert b.flush()
    for receiver in (a, b):
        receiver.tick()
    for endpoint in endpoints:  # alert rules read each replica's: the same latest run
        shown = endpoint.snapshot.decode()
        assert 'verdictgate_run_id="second"' in shown and 'verdictgate_run_id="first"' not in shown


def test_back_from_a_store_outage_a_replica_renews_before_it_takes_over(location: str) -> None:
    """Every lease lapses while the store is away: the replica that comes back first renews its
    own and waits a lease before taking any other's, so the others, back too, keep theirs."""
    clock = ManualClock(1_000_000.0)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    ingest(b, [run_span("theirs", planned=40), *stable_run("theirs", cases=4, trials=5)])
    a.store.claims.renew = failing_once(location, a.store.claims.renew)
    clock.advance(LEASE + 1)  # the outage: b's lease on its run lapsed
    with pytest.raises(psycopg.OperationalError):
        a.tick()
    a.tick()  # back: renews its own, takes nothing over yet
    assert a.store.run("theirs").owner == "b"
    with pytest.raises(psycopg.OperationalError):
        b.tick()  # b's connection was lost in the outage too
    for _ in range(10):  # b is back, and renews: its run stays its own
        b.tick()
        a.tick()
        assert a.store.run("theirs").owner == "b"
        clock.advance(LEASE / 5)


def test_a_scrape_endpoint_keeps_up_with_more_admissions_than_a_page(location: str) -> None:
    from verdictgate.receiver.publishing.prometheus_endpoint import PrometheusEndpoint

    clock = ManualClock(1_000_000.0)
    endpoint = PrometheusEndpoint()
    a = Receiver(
        Store(location),
        None,
        ReceiverConfig(replica="a", lease=LEASE),
        clock=clock,
        scrape=endpoint,
    )
    other = Store(location)  # another replica, admitting a burst of canaries of one suite
    for number in range(1_100):
        run = f"burst-{number:04d}"
        other.write(
            Batch(
                [Trial("c", 0, "approve", run, "approve")], labels={run: ("gate", "approval_gate")}
            ),
            now=clock(),
        )
        other.finish(run, "inconclusive", None, clock())
    a.tick()
    assert 'verdictgate_run_id="burst-1099"' in endpoint.snapshot.decode()
    clock.advance(1.0)
    other.write(
        Batch(
            [Trial("c", 0, "approve", "last", "approve")],
            labels={"last": ("gate", "approval_gate")},
        ),
        now=clock(),
    )
    other.finish("last", "inconclusive", None, clock())
    a.tick()  # more than a page within the margin: the newest is read all the same
    assert 'verdictgate_run_id="last"' in endpoint.snapshot.decode()
    other.close()


def test_a_run_whose_admission_fails_for_a_bug_is_not_tried_at_every_tick(
    location: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(1_000_000.0)
    a = replica(location, "a", clock)

    def broken(*args: object, **kwargs: object) -> bool:
        raise ValueError("a bug in admitting")

    a.store.finish = broken
    ingest(a, [run_span("r", planned=8), *stable_run("r", cases=2, trials=4)])
    assert a.flush()
    for _ in range(5):
        clock.advance(1.0)
        a.tick()
        assert a.flush()
    assert sum("run r cannot be assessed" in r.getMessage() for r in caplog.records) == 1


_SPANS = [
    run_span("one", planned=40),
    *[
        decision_span("one", f"c{case}", index, route, "approve")
        for case in range(4)
        for index in range(10)
        for route in [("deny" if case == 0 and index % 3 == 1 else "approve")]
    ],
]
"""One run: a run span and 40 decision spans, one case flipping now and then."""


@given(
    order=st.permutations(range(len(_SPANS))),
    cuts=st.sets(st.integers(1, len(_SPANS) - 1), max_size=6),
    sides=st.lists(st.booleans(), min_size=7, max_size=7),
)
@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_order_batching_and_replica_gives_the_answer_of_one_receiver(
    postgres_server: str, tmp_path: Path, order: list[int], cuts: set[int], sides: list[bool]
) -> None:
    """The same spans, in any order, cut into any requests, each sent to either replica: the
    run's admission is the one a lone SQLite receiver gives them in one request."""
    alone = Receiver(Store(), None, ReceiverConfig(idle=60.0))
    ingest(alone, _SPANS)
    assert alone.flush()
    clock = ManualClock(1_000_000.0)
    location = StoreMaker("postgresql", tmp_path, postgres_server).location(uuid.uuid4().hex)
    a, b = replica(location, "a", clock), replica(location, "b", clock)
    bounds = [0, *sorted(cuts), len(_SPANS)]
    for number, (start, end) in enumerate(itertools.pairwise(bounds)):
        ingest((a, b)[sides[number]], [_SPANS[n] for n in order[start:end]])
    for receiver in (a, b, a, b):
        receiver.tick()
        assert receiver.flush()
    assert b.store.run("one").status is not None
    assert render(b.assessment("one"), "json") == render(alone.assessment("one"), "json")
    for receiver in (a, b):
        receiver.close()
        receiver.store.close()
