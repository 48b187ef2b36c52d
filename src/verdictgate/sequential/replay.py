"""Where a sequential run would have stopped: stored trials replayed round by round.

A round holds one rerun pair of every case (trials 2k and 2k + 1). After each complete round
the trials so far are judged under the sequential rule, whose answers stay valid however often
they are looked at; the replay stops at the first round that decides the run, and says how many
calls the rest of the trials cost that a sequential run would not have made.

Only the stability tests are sequential: a round decides the run when it qualifies, or when a
change rate is shown above its tolerance. A rejection for another reason part-way (a required
route not yet observed after a round or two) is no stopping point: more rounds may change it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..admission import RULES
from ..assessment import Assessment, Status
from ..evidence import Evidence

STABILITY_REJECTIONS = frozenset(
    rule.code.value
    for rule in RULES
    if rule.effect is Status.REJECTED and rule.check.startswith("stability.")
)
"""Reason codes of a change rate shown above its tolerance: the sequential tests' rejections."""


def decides(assessment: Assessment) -> bool:
    """Whether a sequential run may stop at this judgement: it qualifies, or a sequential test
    rejects it."""
    if assessment.status is Status.QUALIFIED:
        return True
    return assessment.status is Status.REJECTED and any(
        reason.code in STABILITY_REJECTIONS for reason in assessment.reasons
    )


def replay(
    evidence: Evidence,
    judge: Callable[[Evidence], Assessment],
    first: int = 1,
    last: int | None = None,
) -> tuple[Assessment, int]:
    """Judge the evidence round by round, from round `first` to `last` (default: the last round
    it holds), with `judge` (which must judge by the sequential rule): the first decided
    assessment, or the last one when no round decides, and its round."""
    last = evidence.rounds() if last is None else last  # rounds of the indices as recorded
    if not first <= last:
        raise ValueError("no trials to replay")
    for round_number in range(first, last + 1):
        assessment = judge(evidence.prefix(2 * round_number))
        if decides(assessment) or round_number == last:
            return assessment, round_number
    raise AssertionError("unreachable: the last round returns")
