"""Which case names are one input: names a trial links (its case and its aliases) are one case,
and names made in different ways that no trial links may be one input counted twice.

A name is an explicit case id, an unkeyed SHA-256 fingerprint or a keyed HMAC one (`fingerprints`).
Within one naming scheme (one way of naming: explicit ids, unkeyed fingerprints, fingerprints
under one key) two different names are two inputs, and within one run every input has one name.
Across schemes and runs nothing says so: the same input named by id in one run and by its
fingerprint in another is two names. `CaseNames.naming` says when that can happen among the
cases a claim counts, and which cases can be counted without it: those of the scheme that names
the most of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from .fingerprints import naming_scheme

_ORDER = {"case-ids": 0, "keyed": 1, "unkeyed": 2}


@dataclass(frozen=True)
class Scheme:
    """One way of naming inputs: explicit ids, unkeyed fingerprints, or fingerprints under one
    key. A keyed name whose key id no trial recorded is taken to share its key only with the
    names of its own run (`run`), where one process made them."""

    kind: str
    """`case-ids`, `unkeyed` or `keyed` (`fingerprints.naming_scheme`)."""
    key_id: str | None = None
    """The key of a keyed scheme (`fingerprints.key_id`), when recorded."""
    run: str | None = None
    """The run of a keyed scheme whose key was not recorded."""

    def describe(self) -> str:
        """The scheme in words: `case ids`, `fingerprints under key 0123abcd...`."""
        if self.kind == "case-ids":
            return "explicit case ids"
        if self.kind == "unkeyed":
            return "unkeyed fingerprints"
        if self.key_id is not None:
            return f"fingerprints under key {self.key_id}"
        return f"fingerprints under an unrecorded key (run {self.run})"

    def _rank(self) -> tuple[int, str, str]:
        return _ORDER.get(self.kind, 3), self.key_id or "", self.run or ""


@dataclass(frozen=True)
class Naming:
    """How the cases a population claim counts are named: each scheme with the cases it names
    (most first), and, when one input may be counted twice under two names, the scheme the
    claim is judged on."""

    cases: int = 0
    """Cases counted (each with at least one rerun pair), before any is set aside."""
    schemes: tuple[tuple[Scheme, int], ...] = ()
    judged: Scheme | None = None
    """The scheme whose cases alone are judged; None when every case counts."""
    judged_cases: int = 0
    """The cases judged: all of them, or those the judged scheme names."""

    @property
    def set_aside(self) -> int:
        """Cases not judged: named only outside the judged scheme."""
        return self.cases - self.judged_cases


class CaseNames:
    """Names of inputs, united where a trial links them (union-find over names), with the runs
    each is named in and the key id of a keyed one."""

    def __init__(self) -> None:
        self._parent: dict[str, str] = {}
        self._runs: dict[str, set[str]] = {}
        self._key_ids: dict[str, str] = {}

    def add(
        self, run: str, case: str, aliases: Iterable[str] = (), key_id: str | None = None
    ) -> None:
        """One case of a run: its name and the further names its trials gave, all one input;
        `key_id` is the key its keyed names were made with, when known."""
        for name in (case, *aliases):
            self._runs.setdefault(name, set()).add(run)
            if key_id is not None and naming_scheme(name) == "keyed":
                self._key_ids.setdefault(name, key_id)
            self._union(case, name)

    def case_of(self, name: str) -> str:
        """The case a name is one of, named by the least of its names (a name no run holds is
        a case of its own)."""
        parent = self._parent
        root = parent.setdefault(name, name)
        while parent[root] != root:
            root = parent[root]
        while name != root:  # every name on the way now points at the case
            parent[name], name = root, parent[name]
        return root

    def _union(self, a: str, b: str) -> None:
        root_a, root_b = self.case_of(a), self.case_of(b)
        if root_a != root_b:
            low, high = sorted((root_a, root_b))
            self._parent[high] = low

    def naming(self, cases: Iterable[str]) -> tuple[Naming, frozenset[str]]:
        """How `cases` (each the case of `case_of`) are named, and those to judge.

        Two cases may be one input named twice only when no scheme names both and no run holds
        both. When every case is named in one common scheme, or one run holds every case, all
        are judged; otherwise only the cases of the scheme that names the most (a choice made
        from names alone, never from flips, so the cases kept are a fair sample of them)."""
        counted = set(cases)
        schemes: dict[str, set[Scheme]] = {case: set() for case in counted}
        runs: dict[str, set[str]] = {case: set() for case in counted}
        for name, held_in in self._runs.items():
            case = self.case_of(name)
            if case in counted:
                schemes[case].update(self._schemes_of(name, held_in))
                runs[case].update(held_in)
        tally = Counter(scheme for named in schemes.values() for scheme in named)
        ranked = tuple(sorted(tally.items(), key=lambda item: (-item[1], item[0]._rank())))
        common_run = set.intersection(*runs.values()) if runs else set()
        if not ranked or ranked[0][1] == len(counted) or common_run:
            return Naming(len(counted), ranked, None, len(counted)), frozenset(counted)
        judged, judged_cases = ranked[0]
        kept = frozenset(case for case, named in schemes.items() if judged in named)
        return Naming(len(counted), ranked, judged, judged_cases), kept

    def _schemes_of(self, name: str, held_in: set[str]) -> list[Scheme]:
        """The schemes a name was made in: a keyed name of no recorded key, one per run."""
        kind = naming_scheme(name)
        if kind != "keyed":
            return [Scheme(kind)]
        key_id = self._key_ids.get(name)
        if key_id is not None:
            return [Scheme(kind, key_id)]
        return [Scheme(kind, run=run) for run in held_in]
