"""Evidence: trials collected so far, de-duplicated by (run, case, trial), compact per case."""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .trial_model import Decision, NoDecision, Trial

MISSING = -2
"""Slot value of a trial index that no record has filled."""
ERROR = -1
"""Slot value of an errored trial (it has no decision key)."""
MAX_TRIAL_INDEX = (1 << 20) - 1
"""Largest trial index accepted; beyond it an index is a data error, not a plan."""


class TrialIndexError(ValueError):
    """A trial index outside 0..MAX_TRIAL_INDEX."""


@dataclass
class CaseEvidence:
    """Everything kept about one (run, case): its expected route and one slot per trial index.

    A slot holds MISSING, ERROR, or the interned id of the trial's decision key.
    """

    run: str
    case: str
    expected: str | None
    slots: array
    error_types: dict[int, str] | None = None
    """Trial index -> error type, for the (rare) error slots."""
    latencies: array | None = None
    """Per trial index, milliseconds (NaN where none was recorded); made on first use."""
    judgements: bytearray | None = None
    """Per trial index: 0 not judged, 1 an evaluator failed it, 2 passed (made on first use)."""

    def latency_values(self) -> list[float]:
        """The recorded latencies of this case's kept trials."""
        return [value for value in self.latencies or () if not math.isnan(value)]

    def pass_counts(self) -> tuple[int, int]:
        """(passed, judged) among this case's kept trials."""
        if self.judgements is None:
            return 0, 0
        passed = self.judgements.count(2)
        return passed, passed + self.judgements.count(1)

    def judge(self, index: int, passed: bool) -> None:
        """Set the evaluator's verdict on one trial index."""
        judgements = self.judgements
        if judgements is None:
            judgements = self.judgements = bytearray()
        if len(judgements) <= index:
            judgements.extend(bytes(index + 1 - len(judgements)))
        judgements[index] = 2 if passed else 1

    def received(self) -> int:
        """Number of trial indices that hold a record."""
        return len(self.slots) - self.slots.count(MISSING)


class Evidence:
    """A growing set of trials. The first record of an identity counts; a later one that
    disagrees is an integrity conflict, one that agrees a harmless duplicate.

    Memory grows with cases and trial indices, never with duplicate records.
    """

    def __init__(self, trials: Iterable[Trial] = ()) -> None:
        self._key_ids: dict[Decision, int] = {}
        self.keys: list[Decision] = []
        self.cases: dict[tuple[str, str], CaseEvidence] = {}
        self.conflicted: set[tuple[str, str, int]] = set()
        self.duplicates = 0
        self.error_types: Counter[str] = Counter()
        self.invariant_failures: Counter[str] = Counter()
        self.invariant_warnings: Counter[str] = Counter()
        self.evaluations_skipped = 0
        """Trials whose expensive tiers were skipped because a cheaper one failed."""
        self._broken: dict[tuple[str, str, int], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        for trial in trials:
            self.add(trial)

    def snapshot(self) -> Evidence:
        """A copy that later records leave unchanged: containers and per-case arrays are
        copied (a memory copy each), decisions and names are shared."""
        copy = Evidence.__new__(Evidence)
        copy.__dict__.update(self.__dict__)
        copy._key_ids = dict(self._key_ids)
        copy.keys = list(self.keys)
        copy.cases = {
            key: CaseEvidence(
                case.run,
                case.case,
                case.expected,
                case.slots[:],
                None if case.error_types is None else dict(case.error_types),
                None if case.latencies is None else case.latencies[:],
                None if case.judgements is None else case.judgements[:],
            )
            for key, case in self.cases.items()
        }
        copy.conflicted = set(self.conflicted)
        copy.error_types = Counter(self.error_types)
        copy.invariant_failures = Counter(self.invariant_failures)
        copy.invariant_warnings = Counter(self.invariant_warnings)
        copy._broken = dict(self._broken)
        return copy

    def add(self, trial: Trial) -> None:
        """Record one trial."""
        new = self.record(
            trial.run,
            trial.case,
            trial.index,
            trial.decision,
            trial.expected,
            trial.error_type,
            trial.passed,
            trial.latency_ms,
        )
        if new and (trial.invariants_failed or trial.invariants_warned or trial.evaluation_skipped):
            self.note_tiers(
                trial.run,
                trial.case,
                trial.index,
                trial.invariants_failed,
                trial.invariants_warned,
                trial.evaluation_skipped,
            )

    def note_tiers(
        self,
        run: str,
        case: str,
        index: int,
        failed: tuple[str, ...],
        warned: tuple[str, ...],
        skipped: bool = False,
    ) -> None:
        """Count what the tiers found on a newly recorded trial (call once, for its first
        record): the invariants it broke, and whether its expensive tiers were skipped. A
        blocking failure fails the trial, whatever an evaluator said."""
        self.invariant_failures.update(failed)
        self.invariant_warnings.update(warned)
        self.evaluations_skipped += bool(skipped)
        self._broken[(run, case, index)] = (tuple(failed), tuple(warned))
        evidence = self.cases.get((run, case))
        if failed and evidence is not None:
            evidence.judge(index, False)

    def record(
        self,
        run: str,
        case: str,
        index: int,
        decision: Decision | None,
        expected: str | None = None,
        error_type: str | None = None,
        passed: bool | None = None,
        latency_ms: float | None = None,
    ) -> bool:
        """Record one trial from its fields; True when it was the first record of its identity."""
        trial = (index, decision, error_type, passed, latency_ms)
        return self.record_case(run, case, (trial,), expected) == 1

    def record_case(
        self,
        run: str,
        case: str,
        trials: Iterable[tuple[int, Decision | None, str | None, bool | None, float | None]],
        expected: str | None = None,
    ) -> int:
        """Record trials `(index, decision, error_type, passed, latency_ms)` of one case; returns
        how many were new."""
        evidence = self.cases.get((run, case))
        if evidence is None:
            evidence = self.cases[(run, case)] = CaseEvidence(run, case, expected, array("i"))
        elif evidence.expected is None:
            evidence.expected = expected
        slots = evidence.slots
        key_ids = self._key_ids
        new = 0
        for index, decision, error_type, passed, latency in trials:
            if decision is None:
                slot = ERROR
            else:
                slot = key_ids.get(decision)
                if slot is None:
                    slot = key_ids[decision] = len(self.keys)
                    self.keys.append(decision)
            filled = len(slots)
            if index == filled:
                slots.append(slot)
            elif 0 <= index < filled and slots[index] == MISSING:
                slots[index] = slot
            elif filled < index <= MAX_TRIAL_INDEX:
                slots.extend([MISSING] * (index - filled))
                slots.append(slot)
            elif not 0 <= index <= MAX_TRIAL_INDEX:
                raise TrialIndexError(f"trial index {index} is outside 0..{MAX_TRIAL_INDEX}")
            else:
                if slots[index] == slot:
                    self.duplicates += 1
                else:
                    self.conflicted.add((run, case, index))
                continue
            new += 1
            if latency is not None:
                latencies = evidence.latencies
                if latencies is None:
                    latencies = evidence.latencies = array("d")
                if len(latencies) <= index:
                    latencies.extend([math.nan] * (index + 1 - len(latencies)))
                latencies[index] = latency
            if passed is not None:
                evidence.judge(index, passed)
            if slot == ERROR:
                kind = error_type or "error"
                self.error_types[kind] += 1
                if evidence.error_types is None:
                    evidence.error_types = {}
                evidence.error_types[index] = kind
        return new

    @property
    def conflicts(self) -> int:
        """Trial identities that received records with different decisions or outcomes."""
        return len(self.conflicted)

    def trials(self) -> Iterator[Trial]:
        """The kept trials (the first record of each identity), case by case in index order."""
        for evidence in self.cases.values():
            errors = evidence.error_types or {}
            for index, slot in enumerate(evidence.slots):
                if slot == MISSING:
                    continue
                decision = None if slot == ERROR else self.keys[slot]
                yield Trial(
                    evidence.case,
                    index,
                    decision,
                    evidence.run,
                    evidence.expected,
                    errors.get(index),
                )

    def is_no_decision(self, key_id: int) -> bool:
        """Whether an interned key is a no-decision."""
        return isinstance(self.keys[key_id], NoDecision)
