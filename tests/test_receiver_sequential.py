"""A receiver applies the sequential rule as trials arrive: a run it judges sequentially is
final, and its admission published, at the first complete round the rule decides."""

from __future__ import annotations

import threading

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from receiver_support import decision_span, request
from verdictgate import Policy, Status
from verdictgate.otel import conventions as names
from verdictgate.receiver.otlp import extract_protobuf
from verdictgate.receiver.receiver import Receiver
from verdictgate.receiver.store import Store
from verdictgate.sequential import sequential_evalues, sequential_policy
from verdictgate.stats import Stability

ROUTES = ("approve", "deny")
CASES = 4
SEQUENTIAL = sequential_policy(Policy(), None)


def round_spans(run: str, number: int, flipping: bool) -> list[Span]:
    """One round of a canary: a rerun pair of every case; case c0 flips when `flipping`."""
    spans = []
    for case in range(CASES):
        route = ROUTES[case % 2]
        second = ROUTES[1 - case % 2] if flipping and case == 0 else route
        spans += [decision_span(run, f"c{case}", 2 * number, route, route),
                  decision_span(run, f"c{case}", 2 * number + 1, second, route)]  # fmt: skip
    return spans


def send(receiver: Receiver, spans: list[Span]) -> None:
    receiver.ingest(extract_protobuf(request(spans).SerializeToString()))
    receiver.tick()


def rounds_until_final(receiver: Receiver, run: str, flipping: bool, most: int = 200) -> int:
    for number in range(most):
        send(receiver, round_spans(run, number, flipping))
        if receiver.store.run(run).final:
            return number + 1
    raise AssertionError("never final")


def test_a_flipping_canary_is_rejected_as_soon_as_the_rule_decides() -> None:
    receiver = Receiver(Store(), grace=3600, canary_policy=SEQUENTIAL)
    rounds = rounds_until_final(receiver, "canary", flipping=True)
    assessment = receiver.assessment("canary")
    assert assessment.status is Status.REJECTED and not assessment.in_progress
    assert "route_stochastic" in assessment.reason_codes  # approve: c0 flips, c2 does not
    assert assessment.policy.method.value == "sequential"
    assert rounds == first_decided_round() and assessment.pooled.pairs == CASES * rounds


def first_decided_round() -> int:
    """The first round at which route approve (one flip in its two pairs a round) is shown
    above 5% by the sequential rule."""
    return next(
        r for r in range(1, 100)
        if sequential_evalues(r, 2 * r, 0.05).result is Stability.STOCHASTIC
    )  # fmt: skip


def test_a_stable_canary_qualifies_at_the_round_the_rule_first_allows() -> None:
    receiver = Receiver(Store(), grace=3600, canary_policy=SEQUENTIAL)
    rounds = rounds_until_final(receiver, "canary", flipping=False)
    assessment = receiver.assessment("canary")
    assert assessment.status is Status.QUALIFIED
    assert rounds == 19 and assessment.pooled.pairs == 76  # 76 agreeing pairs, 4 a round


def test_only_complete_rounds_are_looked_at() -> None:
    """c0 running ten rounds ahead would be shown flipping if its pairs were pooled with the
    others' fewer ones: the rule waits until every case has caught up."""
    receiver = Receiver(Store(), grace=3600, canary_policy=SEQUENTIAL)
    send(receiver, round_spans("canary", 0, flipping=True))
    ahead = [round_spans("canary", number, flipping=True) for number in range(1, 11)]
    send(receiver, [s for spans in ahead for s in spans[:2]])  # c0's pairs alone
    approve = next(r for r in receiver.assessment_of(receiver.store.run("canary")).routes
                   if r.route == "approve")  # fmt: skip
    assert approve.change.result is Stability.STOCHASTIC  # what a look now would say
    assert not receiver.store.run("canary").final
    send(receiver, [s for spans in ahead for s in spans[2:]])
    assert receiver.store.run("canary").final


def test_a_receiver_judging_canaries_by_a_fixed_rule_waits_for_the_grace_period() -> None:
    receiver = Receiver(Store(), grace=3600)
    for number in range(40):
        send(receiver, round_spans("canary", number, flipping=True))
    assert not receiver.store.run("canary").final


def test_a_run_span_declaring_the_sequential_rule_is_applied_by_any_receiver() -> None:
    from receiver_support import SUITE, span
    from verdictgate.assessment import Isolation
    from verdictgate.otel.spans import run_attributes

    receiver = Receiver(Store(), grace=3600)
    declared = run_attributes("r", SUITE, SEQUENTIAL, 10_000, Isolation.FRESH_SESSION)
    send(receiver, [span(names.RUN_SPAN, declared)])
    rounds = rounds_until_final(receiver, "r", flipping=True)
    assert rounds == first_decided_round() and receiver.assessment("r").status is Status.REJECTED


def test_a_watcher_is_answered_when_the_rule_decides() -> None:
    receiver = Receiver(Store(), grace=3600, canary_policy=SEQUENTIAL)
    send(receiver, round_spans("canary", 0, flipping=True))
    answers = []
    waiting = threading.Thread(target=lambda: answers.append(receiver.wait("canary", 60)))
    waiting.start()
    for number in range(1, first_decided_round()):
        send(receiver, round_spans("canary", number, flipping=True))
    waiting.join(timeout=60)
    assert not waiting.is_alive()
    assert answers[0].status is Status.REJECTED and not answers[0].in_progress


def test_serve_refuses_a_canary_tolerance_beyond_the_rules_reach(cli, tmp_path) -> None:
    result = cli("serve", "--store", str(tmp_path / "s.db"), "--sequential",
                 "--canary-tolerance", "0.3")  # fmt: skip
    assert result.exit_code == 2 and "--canary-tolerance" in result.stderr
