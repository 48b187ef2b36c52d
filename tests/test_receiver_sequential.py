"""A receiver applies the sequential rule as trials arrive: a run it judges sequentially (its
run span, or its canary suite, says so) is final, and its admission published, at the first
complete round of every declared case that the rule decides."""

from __future__ import annotations

import json
import threading

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from receiver_support import decision_span, request, span
from verdictgate import Case, Contract, Policy, Status, Suite
from verdictgate.assessment import Isolation
from verdictgate.eprocess import sequential_evalues
from verdictgate.level_thresholds import stochastic_threshold
from verdictgate.otel import conventions as names
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.otel.spans import run_attributes
from verdictgate.receiver.config import ReceiverConfig
from verdictgate.receiver.core import Receiver
from verdictgate.receiver.store import LOCAL, Batch, Store
from verdictgate.stats import ALPHA, Method, Stability

ROUTES = ("approve", "deny")
CASES = 4
CANARY = Suite(
    "gate",
    "approval_gate",
    tuple(Case(f"c{n}", None, ROUTES[n % 2]) for n in range(CASES)),
    Contract(frozenset(ROUTES)),
    method=Method.SEQUENTIAL,
)


def canary_receiver(store: Store | None = None) -> Receiver:
    return Receiver(
        store or Store(),
        None,
        ReceiverConfig(idle=3600, canary_suites={"gate": CANARY}, replica=LOCAL),
    )


def pair(run: str, case: int, number: int, flipping: bool) -> list[Span]:
    """Rerun pair `number` of case c`case`; c0's flips when `flipping`."""
    route = ROUTES[case % 2]
    second = ROUTES[1 - case % 2] if flipping and case == 0 else route
    return [
        decision_span(run, f"c{case}", 2 * number, route, route),
        decision_span(run, f"c{case}", 2 * number + 1, second, route),
    ]


def round_spans(run: str, number: int, flipping: bool) -> list[Span]:
    """One round: a rerun pair of every case."""
    return [s for case in range(CASES) for s in pair(run, case, number, flipping)]


def send(receiver: Receiver, spans: list[Span]) -> None:
    receiver.ingest(extract_protobuf(request(spans).SerializeToString()))
    receiver.tick()
    assert receiver.flush()  # sequential looks are judged on the finisher


def rounds_until_final(receiver: Receiver, run: str, flipping: bool, most: int = 200) -> int:
    for number in range(most):
        send(receiver, round_spans(run, number, flipping))
        if receiver.store.run(run).final:
            return number + 1
    raise AssertionError("never final")


def first_decided_round() -> int:
    """The first round at which route approve (one flip in its two pairs a round) is shown
    above 5% by the sequential rule, held to 2.5% / 3 as the most telling of the run's three
    tests (the pooled one, approve's and deny's: `family`): stochastic alone, and at the
    threshold tuned to that level."""
    return next(
        r
        for r in range(1, 100)
        if sequential_evalues(r, 2 * r, 0.05).stochastic
        >= max(1 / ALPHA, stochastic_threshold(0.05, ALPHA / 3, 2 * r))
    )


def test_a_flipping_canary_is_rejected_as_soon_as_the_rule_decides() -> None:
    receiver = canary_receiver()
    rounds = rounds_until_final(receiver, "canary", flipping=True)
    assessment = receiver.assessment("canary")
    assert assessment.status is Status.REJECTED and not assessment.in_progress
    assert "route_stochastic" in assessment.reason_codes  # approve: c0 flips, c2 does not
    assert assessment.policy.method is Method.SEQUENTIAL
    assert rounds == first_decided_round() and assessment.pooled.pairs == CASES * rounds


def test_a_stable_canary_qualifies_at_the_round_the_rule_first_allows() -> None:
    receiver = canary_receiver()
    rounds = rounds_until_final(receiver, "canary", flipping=False)
    assessment = receiver.assessment("canary")
    assert assessment.status is Status.QUALIFIED and not assessment.reason_codes
    assert rounds == 19 and assessment.pooled.pairs == 76  # 76 agreeing pairs, 4 a round


def test_cases_sent_one_after_another_are_judged_only_once_all_have_arrived() -> None:
    """The first case alone, however many agreeing pairs it holds, says nothing of the others
    (a flaky case collected last would otherwise be missed)."""
    receiver = canary_receiver()
    for case in range(CASES - 1):
        send(receiver, [s for n in range(80) for s in pair("canary", case, n, flipping=False)])
        assert not receiver.store.run("canary").final
    send(receiver, [s for n in range(80) for s in pair("canary", CASES - 1, n, flipping=False)])
    assert receiver.assessment("canary").status is Status.QUALIFIED


def test_only_complete_rounds_are_looked_at() -> None:
    """c0 running ten rounds ahead would be shown flipping if its pairs were pooled with the
    others' fewer ones: the rule waits until every case has caught up."""
    receiver = canary_receiver()
    send(receiver, round_spans("canary", 0, flipping=True))
    send(receiver, [s for n in range(1, 11) for s in pair("canary", 0, n, flipping=True)])
    approve = next(
        r
        for r in receiver.assessment_of(receiver.store.run("canary")).routes
        if r.route == "approve"
    )
    assert approve.change.result is Stability.STOCHASTIC  # what a look now would say
    assert not receiver.store.run("canary").final
    send(
        receiver,
        [
            s
            for n in range(1, 11)
            for case in range(1, CASES)
            for s in pair("canary", case, n, flipping=True)
        ],
    )
    assert receiver.store.run("canary").final


def test_a_canary_of_no_known_suite_waits_for_the_grace_period(new_store) -> None:
    receiver = Receiver(new_store(), None, ReceiverConfig(idle=3600))
    for number in range(40):
        send(receiver, round_spans("canary", number, flipping=True))
    assert not receiver.store.run("canary").final


def declared_receiver(store: Store) -> Receiver:
    """A receiver holding the run span of run `r`: sequential, 4 cases, 10,000 trials at most."""
    receiver = Receiver(store, None, ReceiverConfig(idle=3600))
    suite = Suite("gate", "approval_gate", (), Contract(frozenset(ROUTES)))
    declared = run_attributes(
        "r", suite, Policy(method=Method.SEQUENTIAL), 10_000, Isolation.FRESH_SESSION
    )
    declared[names.PLAN_CASES] = CASES
    send(receiver, [span(names.RUN_SPAN, declared)])
    return receiver


def test_a_run_span_declaring_the_sequential_rule_decides_before_its_plan_is_complete(
    new_store,
) -> None:
    for flipping, want in ((True, Status.REJECTED), (False, Status.QUALIFIED)):
        receiver = declared_receiver(new_store())
        rounds = rounds_until_final(receiver, "r", flipping=flipping)
        assessment = receiver.assessment("r")
        assert assessment.status is want and "incomplete" not in assessment.reason_codes
        assert rounds == (first_decided_round() if flipping else 19)


def test_a_decided_run_reads_the_same_after_a_restart(new_store, tmp_path) -> None:
    """Its plan of 10,000 trials is not what it is missing: asked again by a new receiver, it
    is still qualified, not incomplete."""
    path = tmp_path / "store.sqlite"
    receiver = declared_receiver(new_store(path))
    rounds_until_final(receiver, "r", flipping=False)
    before = receiver.assessment("r")
    again = Receiver(new_store(path)).assessment("r")
    assert again is not None and again.status is before.status is Status.QUALIFIED
    assert again.reason_codes == before.reason_codes == ()


def test_a_watcher_is_answered_when_the_rule_decides() -> None:
    receiver = canary_receiver()
    send(receiver, round_spans("canary", 0, flipping=True))
    answers = []
    waiting = threading.Thread(target=lambda: answers.append(receiver.wait("canary", 60)))
    waiting.start()
    for number in range(1, first_decided_round()):
        send(receiver, round_spans("canary", number, flipping=True))
    waiting.join(timeout=60)
    assert not waiting.is_alive()
    assert answers[0].status is Status.REJECTED and not answers[0].in_progress


def test_serve_refuses_a_canary_suite_beyond_the_rules_reach(cli, tmp_path) -> None:
    suite = tmp_path / "wide.json"
    suite.write_text(
        json.dumps(
            {
                "schema": "verdictgate.suite/v1",
                "name": "gate",
                "method": "sequential",
                "tolerance": 0.3,
                "cases": [{"id": "c0", "expected": "approve"}],
                "contract": {"allowed": ["approve"]},
            }
        )
    )
    result = cli("serve", "--store", str(tmp_path / "s.db"), "--canary-suite", str(suite))
    assert result.exit_code == 2 and "--canary-suite" in result.stderr


def test_a_decided_canary_is_published_with_its_suites_routes(new_store) -> None:
    from otel_support import OtlpCollector
    from verdictgate.receiver.publishing.forwarder import Forwarder
    from verdictgate.receiver.publishing.otlp_target import OtlpTarget

    with OtlpCollector() as collector:
        store = new_store()
        forwarder = Forwarder(store, OtlpTarget(f"http://127.0.0.1:{collector.port}"))
        receiver = Receiver(
            store, forwarder, ReceiverConfig(idle=3600, canary_suites={"gate": CANARY})
        )
        rounds_until_final(receiver, "canary", flipping=True)
        assert forwarder.drain() and store.outbox_size() == 0
        forwarder.stop()
    routes = {
        attribute.value.string_value
        for point in collector.data_points(names.METRIC_CHANGE_RATE_UPPER)
        for attribute in point.attributes
        if attribute.key == names.ROUTE
    }
    assert routes == {"approve", "deny"}  # the canary suite's contract, not `_other`


def test_a_canary_reads_the_same_after_a_restart_without_its_suite(new_store, tmp_path) -> None:
    path = tmp_path / "store.sqlite"
    receiver = canary_receiver(new_store(path))
    rounds_until_final(receiver, "canary", flipping=False)
    before = receiver.assessment("canary")
    again = Receiver(new_store(path)).assessment("canary")  # no --canary-suite this time
    assert again is not None and again.status is before.status is Status.QUALIFIED
    assert again.policy.method is Method.SEQUENTIAL and again.reason_codes == ()
    assert again.trials == before.trials


def test_a_run_made_final_takes_no_more_trials_and_a_restart_admits_it(new_store, tmp_path) -> None:
    """Deciding that a run is final commits with the request that completed it: later records
    are late, never part of its admission; a process that stopped before the admission was
    made makes it at its next start, from the store."""
    path = tmp_path / "store.sqlite"
    receiver = canary_receiver(new_store(path))
    for number in range(19):  # the round the rule first allows
        receiver.ingest(
            extract_protobuf(request(round_spans("canary", number, False)).SerializeToString())
        )
        receiver.tick()
        assert receiver.flush()
    assert receiver.store.run("canary").final
    received = receiver.store.run("canary").received
    receiver.ingest(extract_protobuf(request(pair("canary", 0, 19, False)).SerializeToString()))
    run = receiver.store.run("canary")
    assert run.received == received and run.late == 2
    receiver.close()

    store = new_store(tmp_path / "other.sqlite")  # stopped between the two commits
    trials = [t for t in new_store(path).evidence("canary").trials()]
    store.write(Batch(trials, labels={"canary": ("gate", "approval_gate")}))
    store.close_runs(["canary"])
    assert store.run("canary").final and store.run("canary").status is None
    restarted = canary_receiver(store)
    assert restarted.flush()
    assert store.run("canary").status == "qualified"
    assert restarted.assessment("canary").status is Status.QUALIFIED
