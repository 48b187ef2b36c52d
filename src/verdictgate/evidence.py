"""Evidence: trials collected so far, de-duplicated by (run, case, trial), compact per case."""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import msgspec

from .errors import TrialIndexError
from .trial_model import Decision, Isolation, NoDecision, TiedSteps, Trial

MISSING = -2
"""Slot value of a trial index that no record has filled."""
ERROR = -1
"""Slot value of an errored trial (it has no decision key)."""
MAX_TRIAL_INDEX = (1 << 20) - 1
"""Largest trial index accepted; beyond it an index is a data error, not a plan."""
FAR_GAP = 64
"""Slots a record may lie beyond the end of its case's slots and still extend them; a record
further out is held aside whole until the evidence is compacted, so memory follows the records
received, never the largest index a sender chose."""


_DEPENDENCE = {
    Isolation.FRESH_INSTANCE: 0,
    Isolation.FRESH_SESSION: 0,
    Isolation.UNKNOWN: 1,
    Isolation.SHARED_SESSION: 2,
}
"""How little a declared isolation shows the reruns were independent."""


@dataclass
class CaseEvidence:
    """Everything kept about one (run, case): its expected route and one slot per trial index.

    A slot holds MISSING, ERROR, or the interned id of the trial's decision key.
    """

    run: str
    case: str
    expected: str | None
    slots: array[int]
    error_types: dict[int, str] | None = None
    """Trial index -> error type, for the (rare) error slots."""
    latencies: array[float] | None = None
    """Per trial index, milliseconds (NaN where none was recorded); made on first use."""
    judgements: bytearray | None = None
    """Per trial index: 0 not judged, 1 an evaluator failed it, 2 passed (made on first use)."""
    extent: int | None = None
    """Trial indices the case really spans when its source compacted long gaps of missing pairs
    (`compact_gaps`); None when the slots are the indices themselves."""

    def length(self) -> int:
        """How many trial indices the case spans: its largest index plus one."""
        return len(self.slots) if self.extent is None else self.extent

    def latency_values(self) -> list[float]:
        """The recorded latencies of this case's kept trials."""
        return [value for value in self.latencies or () if not math.isnan(value)]

    def pass_counts(self) -> tuple[int, int]:
        """(passed, judged) among this case's kept trials."""
        if self.judgements is None:
            return 0, 0
        passed = self.judgements.count(2)
        return passed, passed + self.judgements.count(1)

    def record_latency(self, index: int, latency_ms: float) -> None:
        """Set the latency of one trial index."""
        latencies = self.latencies
        if latencies is None:
            latencies = self.latencies = array("d")
        if len(latencies) <= index:
            latencies.extend([math.nan] * (index + 1 - len(latencies)))
        latencies[index] = latency_ms

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

    def complete_pairs(self) -> int:
        """Rerun pairs the case holds with no gap before them: n when it holds exactly the
        trials 0 .. 2n - 1, else -1."""
        if self.extent is not None or len(self.slots) % 2 or MISSING in self.slots:
            return -1
        return len(self.slots) // 2


def compact_gaps(indices: Iterable[int]) -> Iterator[int]:
    """Indices of one case, in ascending order, with every run of missing pairs shortened to a
    single missing pair.

    Pairs, counts, order and the pairing (0,1), (2,3)... are kept, so the statistics are those
    of the original indices; memory then follows the trials received, not the largest index a
    sender chose (a case holding only index 2**20-1 needs four slots, not a million).
    """
    previous_pair = compact_pair = -1
    for index in indices:
        pair = index >> 1
        if pair != previous_pair:
            compact_pair += min(pair - previous_pair, 2)
            previous_pair = pair
        yield (compact_pair << 1) | (index & 1)


class Evidence:
    """A growing set of trials. The first record of an identity counts; a later one that
    disagrees is an integrity conflict, one that agrees a harmless duplicate.

    Every source hands in whole `Trial` records (`add`, `add_all`); `trials()` gives them back
    whole. Memory grows with cases and trial indices, never with duplicate records.
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
        self._tied: dict[tuple[str, str], dict[int, TiedSteps]] = {}
        """Case -> index -> the tied ranges of that trial's path (`Trial.tied_steps`)."""
        self.isolation: dict[str, Isolation] = {}
        """Run -> the isolation its records declared; when they disagree, the least independent
        (shared-session, then unknown, then a fresh one) counts."""
        self._tiers: dict[tuple[str, str, int], tuple[tuple[str, ...], tuple[str, ...], bool]] = {}
        """What the tiers found on the (rare) trials where an invariant broke or a tier was
        skipped: (failed, warned, skipped)."""
        self._far: dict[tuple[str, str], dict[int, Trial]] = {}
        """Records more than FAR_GAP slots beyond their case's slots, by case and index; laid
        out with the rest by `compacted`."""
        self._aliases: dict[tuple[str, str], set[str]] = {}
        """Case -> the further names of its input its trials gave (`Trial.aliases`)."""
        self._fingerprint_keys: dict[tuple[str, str], str] = {}
        """Case -> the key id its trials' keyed names were made with (the first given counts)."""
        self.add_all(trials)

    def complete_rounds(self) -> int | None:
        """Rounds held when every case holds the same rerun pairs with nothing beyond them (the
        look a sequential rule may take across cases); None otherwise."""
        pairs = {case.complete_pairs() for case in self.cases.values()}
        if len(pairs) != 1 or -1 in pairs or self._far:
            return None
        return pairs.pop()

    def ambiguous_orders(self) -> int:
        """Trials kept whose path's order rests on spans that started in the same instant."""
        return sum(len(tied) for tied in self._tied.values())

    def tied_steps(self, run: str, case: str) -> Mapping[int, TiedSteps]:
        """A case's trials whose paths hold tied steps: index -> the tied ranges."""
        return self._tied.get((run, case), {})

    def names_of(self, run: str, case: str) -> tuple[tuple[str, ...], str | None]:
        """A case's further names (sorted) and the key id of its keyed names, as its trials
        gave them."""
        aliases = self._aliases.get((run, case))
        key_id = self._fingerprint_keys.get((run, case))
        return (tuple(sorted(aliases)) if aliases else ()), key_id

    def kept(self) -> int:
        """How many trials it keeps (the first record of each identity)."""
        held = sum(len(records) for records in self._far.values())
        return held + sum(case.received() for case in self.cases.values())

    def rounds(self) -> int:
        """Rounds (rerun pairs of a case, (0,1), (2,3) ...) the longest case reaches."""
        return max(((self._extent(key) + 1) // 2 for key in self.cases), default=0)

    def _extent(self, key: tuple[str, str]) -> int:
        """One more than the largest trial index a case holds, records held aside included."""
        far = self._far.get(key)
        return max(len(self.cases[key].slots), max(far) + 1 if far else 0)

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
                case.extent,
            )
            for key, case in self.cases.items()
        }
        copy.conflicted = set(self.conflicted)
        copy.error_types = Counter(self.error_types)
        copy.invariant_failures = Counter(self.invariant_failures)
        copy.invariant_warnings = Counter(self.invariant_warnings)
        copy._tiers = dict(self._tiers)
        copy._tied = {key: dict(tied) for key, tied in self._tied.items()}
        copy.isolation = dict(self.isolation)
        copy._far = {key: dict(records) for key, records in self._far.items()}
        copy._aliases = {key: set(aliases) for key, aliases in self._aliases.items()}
        copy._fingerprint_keys = dict(self._fingerprint_keys)
        return copy

    def compacted(self) -> Evidence:
        """The evidence as the statistics read it: records held aside merged into their cases,
        and each sparse case (its largest index at least twice its records plus two) laid out
        with its gaps of missing pairs compacted (`compact_gaps`, its real extent kept). Which
        cases are compacted depends on their indices alone, never on the order the records
        came in. Itself when there is nothing to lay out."""
        sparse = {key for key in self.cases if self._sparse(key)}
        if not sparse and not self._far:
            return self
        merged = Evidence()
        moved: dict[tuple[str, str, int], int] = {}
        for key, evidence in self.cases.items():
            records = self._records(key, evidence)
            if key not in sparse:
                merged.add_all(records)
                continue
            indices = list(compact_gaps(trial.index for trial in records))
            moved.update(
                ((trial.run, trial.case, trial.index), index)
                for trial, index in zip(records, indices, strict=True)
            )
            merged.add_all(
                msgspec.structs.replace(trial, index=index)
                for trial, index in zip(records, indices, strict=True)
            )
            merged.cases[key].extent = records[-1].index + 1
        merged.note_repeats(
            self.duplicates, ((r, c, moved.get((r, c, i), i)) for r, c, i in self.conflicted)
        )
        merged.isolation = dict(self.isolation)
        return merged

    def _sparse(self, key: tuple[str, str]) -> bool:
        """Whether a case's largest index lies far beyond its records (the layout the store's
        readers used, now the one rule everywhere)."""
        far = self._far.get(key)
        records = self.cases[key].received() + (len(far) if far else 0)
        return self._extent(key) - 1 >= 2 * records + 2

    def _records(self, key: tuple[str, str], evidence: CaseEvidence) -> list[Trial]:
        """A case's kept trials in index order, records held aside included."""
        records = list(self._case_trials(evidence))
        far = self._far.get(key)
        if far:
            records = sorted([*records, *far.values()], key=lambda trial: trial.index)
        return records

    def prefix(self, limit: int) -> Evidence:
        """The evidence of trial indices below `limit` only (a sequential look at a round):
        its records, the conflicts among them, and every duplicate. Itself when it holds no
        index from `limit` on."""
        if 2 * self.rounds() <= limit:
            return self
        kept = Evidence(trial for trial in self.trials() if trial.index < limit)
        kept.note_repeats(self.duplicates, (c for c in self.conflicted if c[2] < limit))
        kept.isolation = dict(self.isolation)
        return kept

    def holds(self, trial: Trial) -> bool:
        """Whether a record of the trial's identity (run, case, index) is kept."""
        evidence = self.cases.get((trial.run, trial.case))
        if evidence is None:
            return False
        far = self._far.get((trial.run, trial.case))
        if far is not None and trial.index in far:
            return True
        return 0 <= trial.index < len(evidence.slots) and evidence.slots[trial.index] != MISSING

    def add(self, trial: Trial) -> bool:
        """Record one trial; True when it was the first record of its identity."""
        return self.add_all((trial,)) == 1

    def add_all(self, trials: Iterable[Trial]) -> int:
        """Record trials (fastest when those of one case come together); how many were new."""
        key_ids, keys, cases = self._key_ids, self.keys, self.cases
        evidence: CaseEvidence | None = None
        slot: int | None  # an annotation only: no work per record
        run = case = None
        new = 0
        for trial in trials:
            if trial.case != case or trial.run != run:
                run, case = trial.run, trial.case
                evidence = cases.get((run, case)) or self._new_case(run, case, trial.expected)
            assert evidence is not None
            if evidence.expected is None and trial.expected is not None:
                evidence.expected = trial.expected  # the first expected route given counts
            index, decision = trial.index, trial.decision
            if decision is None:
                slot = ERROR
            else:
                slot = key_ids.get(decision)
                if slot is None:
                    slot = key_ids[decision] = len(keys)
                    keys.append(decision)
            case_slots = evidence.slots
            filled = len(case_slots)
            far = self._far.get((run, case)) if self._far else None
            if far is not None and index in far:
                self._note_repeat(trial, far[index].decision == decision)
                continue
            if filled + FAR_GAP < index <= MAX_TRIAL_INDEX:
                self._hold_far(trial)
                new += 1
                continue
            if index == filled:
                case_slots.append(slot)
            elif 0 <= index < filled and case_slots[index] == MISSING:
                case_slots[index] = slot
            elif filled < index <= MAX_TRIAL_INDEX:
                case_slots.extend([MISSING] * (index - filled))
                case_slots.append(slot)
            elif not 0 <= index <= MAX_TRIAL_INDEX:
                raise TrialIndexError(f"trial index {index} is outside 0..{MAX_TRIAL_INDEX}")
            else:
                self._note_repeat(trial, case_slots[index] == slot)
                continue
            new += 1
            if trial.aliases or trial.key_id is not None:
                self._note_names(trial)
            if slot == ERROR:
                self._note_error(evidence, trial)
            if trial.tied_steps:
                self._tied.setdefault((trial.run, trial.case), {})[index] = trial.tied_steps
            if (
                trial.latency_ms is not None
                or trial.passed is not None
                or trial.invariants_failed
                or trial.invariants_warned
                or trial.evaluation_skipped
                or trial.isolation is not None
            ):
                self._note_tiers(evidence, trial)
        return new

    def _note_names(self, trial: Trial) -> None:
        """Keep the further names of a trial's input and its key id (the first given counts)."""
        key = (trial.run, trial.case)
        if trial.aliases:
            self._aliases.setdefault(key, set()).update(trial.aliases)
            self._aliases[key].discard(trial.case)
        if trial.key_id is not None:
            self._fingerprint_keys.setdefault(key, trial.key_id)

    def _new_case(self, run: str, case: str, expected: str | None) -> CaseEvidence:
        """The evidence of a case seen for the first time, with no slot filled yet."""
        evidence = self.cases[(run, case)] = CaseEvidence(run, case, expected, array("i"))
        return evidence

    def _note_repeat(self, trial: Trial, agrees: bool) -> None:
        """Count a later record of a kept identity: a harmless duplicate when it agrees with
        the first, else an integrity conflict."""
        if agrees:
            self.duplicates += 1
        else:
            self.conflicted.add((trial.run, trial.case, trial.index))

    def _hold_far(self, trial: Trial) -> None:
        """Keep a record far beyond its case's slots aside, counted where the whole evidence
        counts (its per-index facts are laid out when the evidence is compacted)."""
        self._far.setdefault((trial.run, trial.case), {})[trial.index] = trial
        if trial.aliases or trial.key_id is not None:
            self._note_names(trial)
        if trial.decision is None:
            self.error_types[trial.error_type or "error"] += 1
        self.invariant_failures.update(trial.invariants_failed)
        self.invariant_warnings.update(trial.invariants_warned)
        self.evaluations_skipped += bool(trial.evaluation_skipped)
        if trial.tied_steps:
            self._tied.setdefault((trial.run, trial.case), {})[trial.index] = trial.tied_steps
        if trial.isolation is not None:
            self.declare_isolation(trial.run, trial.isolation)

    def _note_error(self, evidence: CaseEvidence, trial: Trial) -> None:
        kind = trial.error_type or "error"
        self.error_types[kind] += 1
        if evidence.error_types is None:
            evidence.error_types = {}
        evidence.error_types[trial.index] = kind

    def _note_tiers(self, evidence: CaseEvidence, trial: Trial) -> None:
        """Keep what a new trial says beyond its decision: latency, an evaluator's verdict, what
        the tiers found (a blocking failure fails the trial, whatever an evaluator said), and
        its run's isolation."""
        index = trial.index
        if trial.latency_ms is not None:
            evidence.record_latency(index, trial.latency_ms)
        if trial.passed is not None:
            evidence.judge(index, trial.passed)
        if trial.isolation is not None and self.isolation.get(trial.run) is not trial.isolation:
            self.declare_isolation(trial.run, trial.isolation)
        failed, warned = tuple(trial.invariants_failed), tuple(trial.invariants_warned)
        if not (failed or warned or trial.evaluation_skipped):
            return
        self.invariant_failures.update(failed)
        self.invariant_warnings.update(warned)
        self.evaluations_skipped += bool(trial.evaluation_skipped)
        self._tiers[(trial.run, trial.case, index)] = (
            failed,
            warned,
            bool(trial.evaluation_skipped),
        )
        if failed:
            evidence.judge(index, False)

    def declare_isolation(self, run: str, isolation: Isolation) -> None:
        """Record how a run isolated its reruns; of two declarations the least independent
        counts, so a shared session once declared is never hidden by another declaration."""
        current = self.isolation.get(run)
        if current is None or _DEPENDENCE[isolation] > _DEPENDENCE[current]:
            self.isolation[run] = isolation

    def declared_isolation(self) -> Isolation:
        """The least independent isolation any run declared (unknown when none declared)."""
        return max(self.isolation.values(), key=_DEPENDENCE.__getitem__, default=Isolation.UNKNOWN)

    def note_repeats(self, duplicates: int, conflicted: Iterable[tuple[str, str, int]]) -> None:
        """Count repeated records that a store already de-duplicated: harmless duplicates, and
        identities whose records disagreed."""
        self.duplicates += duplicates
        self.conflicted.update(conflicted)

    @property
    def conflicts(self) -> int:
        """Trial identities that received records with different decisions or outcomes."""
        return len(self.conflicted)

    def trials(self) -> Iterator[Trial]:
        """The kept trials (the first record of each identity), whole: decision, expected
        route, error type, evaluator verdict, latency, tier results, the run's isolation, and
        the case's further names and key id; case by case in index order, at the indices they
        were recorded at."""
        for key, case in self.cases.items():
            yield from self._records(key, case)

    def _case_trials(self, evidence: CaseEvidence) -> Iterator[Trial]:
        """The trials one case's slots hold, in index order."""
        judged = {1: False, 2: True}
        errors = evidence.error_types or {}
        latencies = evidence.latencies
        judgements = evidence.judgements
        isolation = self.isolation.get(evidence.run)
        tied = self.tied_steps(evidence.run, evidence.case)
        aliases, key_id = self.names_of(evidence.run, evidence.case)
        for index, slot in enumerate(evidence.slots):
            if slot == MISSING:
                continue
            latency = latencies[index] if latencies and index < len(latencies) else math.nan
            failed, warned, skipped = self._tiers.get(
                (evidence.run, evidence.case, index), ((), (), False)
            )
            passed = (
                judged.get(judgements[index]) if judgements and index < len(judgements) else None
            )
            yield Trial(
                evidence.case,
                index,
                None if slot == ERROR else self.keys[slot],
                evidence.run,
                evidence.expected,
                errors.get(index),
                passed=passed,
                invariants_failed=failed,
                invariants_warned=warned,
                latency_ms=None if math.isnan(latency) else latency,
                evaluation_skipped=skipped,
                isolation=isolation,
                tied_steps=tied.get(index, ()),
                aliases=aliases,
                key_id=key_id,
            )

    def is_no_decision(self, key_id: int) -> bool:
        """Whether an interned key is a no-decision."""
        return isinstance(self.keys[key_id], NoDecision)
