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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .admission import RULES
from .assessment import Assessment, Status
from .trial_model import Trial

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


@dataclass(frozen=True)
class SequentialStop:
    """Where the replay stopped, and what stopping there saves."""

    rounds: int
    """Complete rounds judged (one rerun pair of every case each)."""
    stopped_at_pairs: int
    """Rerun pairs (pooled) at the stop."""
    calls_used: int
    calls_avoided: int
    reason: str


def replay(
    trials: Sequence[Trial], judge: Callable[[list[Trial]], Assessment]
) -> tuple[Assessment, SequentialStop]:
    """Judge the trials round by round with `judge` (which must judge by the sequential rule);
    the first decided assessment and where it stopped, or the last one when no round decides."""
    if not trials:
        raise ValueError("no trials to replay")
    rounds = max(trial.index for trial in trials) // 2 + 1
    for round_number in range(1, rounds + 1):
        used = [trial for trial in trials if trial.index < 2 * round_number]
        assessment = judge(used)
        decided = decides(assessment)
        if decided or round_number == rounds:
            reason = (
                f"{assessment.status.value} after round {round_number} of {rounds}"
                if decided
                else f"undecided after every one of the {rounds} rounds"
            )
            stop = SequentialStop(
                round_number, assessment.pooled.pairs, len(used), len(trials) - len(used), reason
            )
            return assessment, stop
    raise AssertionError("unreachable: the last round returns")
