"""Time is not evidence: a store away for longer than the idle period, a restart, a paused
process or a backlog of traces to settle gives the same admission as the calm path, on SQLite
and on PostgreSQL, on one clock the test drives; and a replica reads the database's clock,
whatever its own says."""

from __future__ import annotations

import heapq
import json
import logging
import math
import sqlite3
import time
from contextlib import ExitStack
from dataclasses import replace

import grpc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from postgres_support import StoreMaker, refused, store_away
from receiver_support import (
    decision_span,
    request,
    run_span,
    running_server,
    stable_run,
    strands_trial,
    wait_until,
)
from verdictgate import Contract, Suite
from verdictgate.clock import ManualClock
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.replication.database_clock import DatabaseClock
from verdictgate.receiver.store import LOCAL, Store
from verdictgate.reports import render

IDLE = 30.0


def export(receiver: Receiver, spans: list) -> None:
    receiver.ingest(extract_protobuf(request(spans).SerializeToString()))


def report(receiver: Receiver, run: str) -> str:
    """The run's JSON report, once it is admitted."""
    assert receiver.flush()
    assessment = receiver.assessment(run)
    assert assessment is not None and not assessment.in_progress
    return render(assessment, "json")


def canary_halves(run: str) -> tuple[list, list]:
    spans = stable_run(run, cases=4, trials=10)
    return spans[::2], spans[1::2]


def calm_report(run: str) -> str:
    """The canary's report when nothing went wrong: its spans in two exports, 5 s apart."""
    clock = ManualClock(1_000.0)
    receiver = Receiver(Store(), None, ReceiverConfig(idle=IDLE, replica=LOCAL), clock=clock)
    first, second = canary_halves(run)
    export(receiver, first)
    clock.advance(5.0)
    export(receiver, second)
    clock.advance(IDLE + 1)
    receiver.tick()
    return report(receiver, run)


def test_a_store_away_for_longer_than_the_idle_period_loses_no_retried_trial(new_store):
    clock = ManualClock(1_000.0)
    config = ReceiverConfig(idle=IDLE, replica=LOCAL)
    receiver = Receiver(new_store("store"), None, config, clock=clock)
    first, second = canary_halves("canary")
    export(receiver, first)
    clock.advance(5.0)
    with store_away(new_store, "store"):
        assert refused(lambda: export(receiver, second))  # the exporter retries it later
        clock.advance(40.0)  # away for more than the idle period
        refused(receiver.tick)  # PostgreSQL's fails; SQLite's reads, and writes nothing
    receiver.tick()  # back: the canary's idle period starts again now
    assert not receiver.store.run("canary").final
    clock.advance(4.0)
    export(receiver, second)  # the exporter's retry
    clock.advance(IDLE + 1)
    receiver.tick()
    run = receiver.store.run("canary")
    assert run.final and run.late == 0 and run.received == 40
    assert report(receiver, "canary") == calm_report("canary")


def test_a_restart_after_the_idle_period_gives_each_open_run_its_full_idle_period(new_store):
    clock = ManualClock(1_000.0)
    config = ReceiverConfig(idle=IDLE, replica=LOCAL)
    first, second = canary_halves("canary")
    before = Receiver(new_store("store"), None, config, clock=clock)
    export(before, first)
    clock.advance(5.0)
    before.close()
    before.store.close()  # down: the exporter's export of `second` is refused and retried
    clock.advance(3 * IDLE)
    after = Receiver(new_store("store"), None, config, clock=clock)
    after.tick()
    assert not after.store.run("canary").final
    clock.advance(4.0)
    export(after, second)
    clock.advance(IDLE + 1)
    after.tick()
    assert after.store.run("canary").late == 0
    assert report(after, "canary") == calm_report("canary")


def test_a_paused_process_gives_each_open_run_its_full_idle_period(new_store):
    clock = ManualClock(1_000.0)
    receiver = Receiver(new_store(), None, ReceiverConfig(idle=IDLE, replica=LOCAL), clock=clock)
    first, second = canary_halves("canary")
    export(receiver, first)
    clock.advance(5.0 + 2 * IDLE)  # frozen meanwhile (SIGSTOP): the export of `second` waits
    receiver.resume()  # what the server's ticker says when its wait ended that late
    receiver.tick()
    assert not receiver.store.run("canary").final
    export(receiver, second)
    clock.advance(IDLE + 1)
    receiver.tick()
    assert report(receiver, "canary") == calm_report("canary")


def test_a_backlog_of_traces_to_settle_holds_only_the_runs_whose_trials_wait_in_it(new_store):
    clock = ManualClock(1_000.0)
    config = ReceiverConfig(idle=3.0, settle=1.0, settle_batch=2, replica=LOCAL)
    receiver = Receiver(new_store(), None, config, clock=clock)
    export(receiver, [decision_span("canary", "c0", i, "approve", "approve") for i in range(4)])
    backlog = [
        span
        for n in range(12)
        for span in strands_trial(n + 1, "busy", f"c{n % 3}", n // 3, ["refund"])
    ]
    export(receiver, backlog)
    clock.advance(3.5)
    receiver.tick()  # two of twelve traces settle a tick: the canary's idle period is over
    assert receiver.store.run("canary").final
    assert not receiver.store.run("busy").final  # its trials wait to settle: not idle yet
    for _ in range(6):
        receiver.tick()
    assert not receiver.store.run("busy").final  # its trials were stored just now: news
    clock.advance(3.5)
    receiver.tick()
    assert receiver.store.run("busy").final and receiver.store.run("busy").received == 12
    assert receiver.store.run("busy").late == 0


class Readings:
    """A database clock and a replica's clocks, all driven by the test: a reading of the
    database's clock takes `round_trip` seconds, and reads it `late` seconds after midway."""

    def __init__(self, database: float, monotonic: float, wall: float) -> None:
        self.database, self.monotonic, self.wall = database, monotonic, wall
        self.round_trip, self.late = 0.002, 0.0

    def read(self) -> float:
        self.advance(self.round_trip / 2)
        reading = self.database + self.late
        self.advance(self.round_trip / 2)
        return reading

    def advance(self, seconds: float) -> None:
        self.database += seconds
        self.monotonic += seconds
        self.wall += seconds


@pytest.mark.parametrize("skew", [-600.0, -120.0, 0.0, 0.4, 300.0, 600.0])
def test_a_replica_reads_the_database_clock_whatever_its_wall_clock_says(skew, caplog):
    readings = Readings(database=1_000_000.0, monotonic=42.0, wall=1_000_000.0 + skew)
    with caplog.at_level(logging.WARNING, "verdictgate.receiver.replication.database_clock"):
        clock = DatabaseClock(
            readings.read, monotonic=lambda: readings.monotonic, wall=lambda: readings.wall
        )
        for _ in range(5):
            readings.advance(7.0)
            assert clock() == pytest.approx(readings.database, abs=0.002)
            clock.measure()
    assert clock.skew == pytest.approx(skew, abs=0.01)
    warned = [r for r in caplog.records if "wall clock" in r.getMessage()]
    assert len(warned) == (1 if abs(skew) > 1.0 else 0)  # once, not at every measure


def test_a_slow_round_trip_does_not_move_the_offset():
    readings = Readings(database=5_000.0, monotonic=0.0, wall=5_000.0)
    clock = DatabaseClock(
        readings.read, monotonic=lambda: readings.monotonic, wall=lambda: readings.wall
    )
    readings.round_trip, readings.late = 3.0, 1.5  # a slow reply, its clock read late
    clock.measure()
    assert clock() == pytest.approx(readings.database, abs=0.01)


def test_replicas_whose_clocks_are_minutes_apart_agree_on_the_database_clock(
    postgres_server, tmp_path
):
    """Two replicas of one PostgreSQL store whose own clocks are 600 s apart: a canary sprayed
    across both is decided by its owner after its idle period on the database's clock, never
    taken over while the owner renews, and counts every trial."""
    location = StoreMaker("postgresql", tmp_path, postgres_server).location("shared")
    config = ReceiverConfig(idle=3.0, lease=3.0)
    later = ManualClock()  # moves the database's clock, and the replicas' with it, on
    replicas = []
    for name, skew in (("ahead", 300.0), ("behind", -300.0)):
        store = Store(location)
        clock = DatabaseClock(
            lambda store=store: store.now() + later(),
            monotonic=lambda skew=skew: time.monotonic() + skew + later(),
        )
        replicas.append(Receiver(store, None, replace(config, replica=name), clock=clock))
    spans = stable_run("canary", cases=4, trials=10)
    for n, start in enumerate(range(0, len(spans), 5)):
        export(replicas[n % 2], spans[start : start + 5])
        for replica in replicas:
            replica.tick()
    owner = replicas[0].store.run("canary").owner
    assert owner == "ahead"  # whose write opened it; the other never took it over
    for replica in replicas:
        replica.tick()
    assert not replicas[0].store.run("canary").final  # not idle on the database's clock
    later.advance(3.2)  # the idle period, on the database's clock
    for replica in replicas:
        replica.renew_leases()
        replica.tick()
    run = replicas[0].store.run("canary")
    assert run.final and run.owner == "ahead" and run.received == 40 and run.late == 0
    for replica in replicas:
        replica.close()
        replica.store.close()


FRAMEWORK_SCRIPT = {
    "c0": [["lookup_order", "issue_refund"]] * 4,
    "c1": [["lookup_order"]] * 4,
    "c2": [["lookup_order", "issue_refund"], ["issue_refund"]] * 2,  # flips on every rerun
}


def framework_spans(run: str) -> tuple[list, list[list]]:
    """A declared run of framework trials (three cases, four trials each): its run span, and
    each trial's spans, the harness's trial span first."""
    trials = []
    for case, paths in FRAMEWORK_SCRIPT.items():
        for index, tools in enumerate(paths):
            trials.append(strands_trial(len(trials) + 1, run, case, index, tools))
    declared = run_span(run, planned=len(trials), suite=FRAMEWORK_SUITE)
    return [declared], trials


FRAMEWORK_SUITE = Suite(
    "support",
    "support",
    (),
    Contract({"lookup_order,issue_refund", "lookup_order", "issue_refund"}),
)


def framework_report(maker: StoreMaker | None, delayed: bool) -> str:
    """The run's report when a third of its trials' framework spans come 8 s after their trial
    span (`delayed`, with --settle 2s), or all at once."""
    clock = ManualClock(1_000.0)
    store = Store() if maker is None else maker()
    receiver = Receiver(store, None, ReceiverConfig(settle=2.0, replica=LOCAL), clock=clock)
    declared, trials = framework_spans("framework")
    late = [spans[1:] for n, spans in enumerate(trials) if delayed and n % 3 == 0]
    export(
        receiver,
        [
            span
            for n, spans in enumerate(trials)
            for span in (spans[:1] if delayed and n % 3 == 0 else spans)
        ]
        + declared,
    )
    clock.advance(2.1)
    receiver.tick()  # the delayed third settle from their trial span alone
    clock.advance(5.9)
    export(receiver, [span for spans in late for span in spans])  # 8 s after: amends them
    for _ in range(2):
        clock.advance(2.1)
        receiver.tick()
    clock.advance(IDLE + 0.1)  # DEFAULT idle is 30 s
    receiver.tick()
    return report(receiver, "framework")


def test_framework_spans_delayed_past_the_settle_time_amend_their_trials(new_store):
    calm = framework_report(None, delayed=False)
    delayed = framework_report(new_store, delayed=True)
    assert json.loads(delayed)["trials"]["error_types"] == {}  # no `no_spans`
    assert json.loads(delayed)["trials"]["late"] == 0
    assert delayed == calm


def calm_reports() -> dict[str, str]:
    """Both runs' reports from one SQLite receiver given every span at once."""
    clock = ManualClock(1_000.0)
    receiver = Receiver(Store(), None, ReceiverConfig(settle=2.0, replica=LOCAL), clock=clock)
    declared, trials = framework_spans("framework")
    export(receiver, [*stable_run("canary", 4, 4), *declared, *(s for t in trials for s in t)])
    clock.advance(2.1)
    receiver.tick()
    clock.advance(IDLE + 0.1)
    receiver.tick()
    return {run: report(receiver, run) for run in ("canary", "framework")}


CALM: dict[str, str] = {}


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    skews=st.tuples(st.floats(-600, 600), st.floats(-600, 600)),
    routes=st.lists(st.integers(0, 1), min_size=24, max_size=24),
    delayed=st.lists(st.booleans(), min_size=12, max_size=12),
    delay=st.floats(0.0, IDLE - 2.0),
    outage_at=st.integers(0, 10),
    outage=st.floats(0.0, 2 * IDLE),
)
@example(  # the figures: a store away for longer than the idle period
    skews=(300.0, -300.0), routes=[0, 1] * 12, delayed=[False] * 12, delay=0, outage_at=5, outage=50
)
@example(  # a third of the framework trials' spans 25 s late, and a 35 s outage
    skews=(600.0, 0.0),
    routes=[1, 0] * 12,
    delayed=[True, False, False] * 4,
    delay=25,
    outage_at=8,
    outage=35,
)
def test_any_skew_outage_and_delay_gives_the_answer_of_the_calm_path(
    postgres_server, tmp_path_factory, skews, routes, delayed, delay, outage_at, outage
):
    """Two replicas of one PostgreSQL store, each replica's own clocks up to 10 minutes off;
    a canary's and a framework run's spans sprayed across them a second apart; the store away
    for up to twice the idle period at some point (the exports it refused sent again after); a
    random subset of framework trials' spans delayed up to the idle period past their trial
    span: each run's final report is the calm path's."""
    CALM.update(CALM or calm_reports())
    maker = StoreMaker("postgresql", tmp_path_factory.mktemp("property"), postgres_server)
    database = ManualClock(1_000_000.0)  # the database's clock, which the test drives
    replicas = []
    for n, skew in enumerate(skews):
        store = Store(maker.location("shared"))
        clock = DatabaseClock(
            database, monotonic=lambda s=skew: database() - s, wall=lambda s=skew: database() + s
        )
        config = ReceiverConfig(settle=2.0, lease=3.0, replica=f"replica-{n}")
        replicas.append(Receiver(store, None, config, clock=clock))
    declared, trials = framework_spans("framework")
    canary = stable_run("canary", 4, 4)
    exports = [canary[n : n + 4] for n in range(0, len(canary), 4)]
    held_back = []
    for n, spans in enumerate(trials):
        exports.append(spans[:1] if delayed[n] else spans)
        if delayed[n]:
            held_back.append(spans[1:])
    exports.append(declared)
    events = [(float(n), n, spans) for n, spans in enumerate(exports)]
    events += [(len(exports) + delay, len(events) + n, s) for n, s in enumerate(held_back)]
    heapq.heapify(events)
    start, sent = database(), 0
    with ExitStack() as outages:
        refused_spans: list[list] = []
        ends = math.inf
        while events:
            at, number, spans = heapq.heappop(events)
            while database() < start + at:
                database.advance(0.5)
                for replica in replicas:
                    refused(replica.tick)
                if database() >= ends:  # back: the exporters retry a second later
                    outages.close()
                    ends = math.inf
                    for n, retry in enumerate(refused_spans):
                        heapq.heappush(events, (database() + 1 - start, 1000 + n, retry))
                    refused_spans.clear()
            if sent == outage_at:
                outages.enter_context(store_away(maker, "shared"))
                ends = database() + outage
            sent += 1
            if refused(lambda s=spans, n=number: export(replicas[routes[n % len(routes)]], s)):
                refused_spans.append(spans)
                if not events:  # nothing else to wait for: wait for the store
                    heapq.heappush(events, (ends - start + 0.5, 2000 + number, []))
    for _ in range(int(3 * IDLE)):
        database.advance(1.0)
        for replica in replicas:
            refused(replica.tick)
    try:
        for run in ("canary", "framework"):
            stored = replicas[0].store.run(run)
            assert stored is not None and stored.final and stored.status is not None
            for replica in replicas:
                replica.flush()
            assert report(replicas[0], run) == CALM[run]
    finally:
        for replica in replicas:
            replica.close()
            replica.store.close()


class RefusingStore(Store):
    """A store whose writes fail as a locked SQLite file's do while `refusing` is set."""

    refusing = False

    def write(self, *args, **kwargs):
        if self.refusing:
            raise sqlite3.OperationalError("database is locked")
        return super().write(*args, **kwargs)


def test_writes_refused_now_and_then_hold_only_the_runs_they_brought_news_of():
    """One export in eight refused (a lock now and then) for two minutes: the runs those
    exports were for stay open until their retries land, while a canary with no news is final
    when its idle period is over, and a framework trial settles on time."""
    clock = ManualClock(1_000.0)
    store = RefusingStore()
    receiver = Receiver(
        store, None, ReceiverConfig(idle=IDLE, settle=2.0, replica=LOCAL), clock=clock
    )
    export(receiver, [decision_span("quiet", "c0", 0, "approve", "approve")])
    export(receiver, strands_trial(1, "framework", "c0", 0, ["lookup_order"]))
    retry = None
    for step in range(240):  # two minutes, a tick every half second
        clock.advance(0.5)
        if step % 8 == 0:
            store.refusing = True
            retry = [decision_span("busy", "c0", step // 8, "approve", "approve")]
            assert refused(lambda spans=retry: export(receiver, spans))
            store.refusing = False
        elif step % 8 == 4 and retry is not None:  # the sender's retry, 2 s later
            export(receiver, retry)
        receiver.tick()
        if step == 2 * int(IDLE) + 2:
            assert receiver.store.run("quiet").final  # on time: nothing of it was refused
            assert receiver.store.run("framework").received == 1  # settled on time
    busy = receiver.store.run("busy")
    assert not busy.final and busy.received == 30 and busy.late == 0


def test_a_span_that_comes_once_its_trials_spans_were_let_go_is_late_not_a_new_derivation():
    """A trial settles from its whole path; its trace stays quiet for the idle period (its
    spans let go) while the run is kept open by another trial; a copy of one of its spans then
    arrives (an exporter's retry): it is counted late, and the trial's path stands."""
    clock = ManualClock(1_000.0)
    receiver = Receiver(
        Store(), None, ReceiverConfig(idle=10.0, settle=2.0, replica=LOCAL), clock=clock
    )
    spans = strands_trial(1, "run", "c0", 0, ["lookup_order", "issue_refund"])
    export(receiver, spans)
    for number in range(2, 9):  # another trial of the run every 2 s: it stays open
        clock.advance(2.0)
        export(receiver, strands_trial(number, "run", f"c{number}", 0, ["lookup_order"]))
        receiver.tick()
    assert not receiver.store.run("run").final
    export(receiver, [spans[1]])  # the agent span, again, 14 s after it first came
    clock.advance(2.1)
    receiver.tick()
    [trial] = [t for t in receiver.store.evidence("run").trials() if t.case == "c0"]
    assert trial.decision == ("lookup_order", "issue_refund")
    assert receiver.store.run("run").late == 1


def test_a_reading_slower_than_the_best_lately_does_not_move_the_offset():
    readings = Readings(database=5_000.0, monotonic=0.0, wall=5_000.0)
    clock = DatabaseClock(
        readings.read, monotonic=lambda: readings.monotonic, wall=lambda: readings.wall
    )
    readings.round_trip, readings.late = 0.2, 0.09  # quick enough, but slower than the first
    clock.measure()
    assert clock() == pytest.approx(readings.database, abs=0.002)
    readings.advance(31.0)  # the best is stale now: the next reading counts
    clock.measure()
    assert clock() == pytest.approx(readings.database + 0.09, abs=0.002)


def test_on_the_wire_framework_spans_delayed_8_s_amend_their_trials(new_store):
    """The same through the receiver's OTLP/gRPC transport and its own ticker: a third of the
    trials' framework spans 8 s after their trial spans, with --settle 2s."""
    clock = ManualClock(1_000.0)
    config = ReceiverConfig(settle=2.0, replica=LOCAL)
    declared, trials = framework_spans("framework")
    late = [spans[1:] for n, spans in enumerate(trials) if n % 3 == 0]
    first = [s for n, spans in enumerate(trials) for s in (spans[:1] if n % 3 == 0 else spans)]
    with running_server(new_store.location("wire"), clock=clock, config=config) as server:
        stub = TraceServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
        receiver = server.receiver
        stub.Export(request([*first, *declared]), timeout=10)
        clock.advance(2.1)  # the delayed third settle from their trial span alone
        wait_until(lambda: receiver.store.run("framework").received == 12)
        clock.advance(5.9)
        stub.Export(request([s for spans in late for s in spans]), timeout=10)
        clock.advance(2.1)
        wait_until(lambda: not receiver.store.evidence("framework").error_types)
        clock.advance(IDLE + 0.1)
        wait_until(lambda: receiver.store.run("framework").status is not None)
        assert report(receiver, "framework") == framework_report(None, delayed=False)
