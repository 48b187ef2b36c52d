"""What a run is judged by (its run span, its canary suite, or the default), and its
assessment."""

from __future__ import annotations

from collections.abc import Mapping

from ...assessment import Assessment
from ...declaration import RunDeclaration
from ...engine import assess_declared
from ...evidence import Evidence
from ...suite import Suite
from ..store import Store, StoredRun


class Judge:
    """Judges a run of `store`: by its run span's declaration, or, for a canary, by the suite
    of `canary_suites` its decision spans name, or by the default policy."""

    def __init__(self, store: Store, canary_suites: Mapping[str, Suite]) -> None:
        self._store = store
        self.canary_suites = canary_suites

    def declaration(self, run: StoredRun) -> RunDeclaration:
        """What the run is judged by: its run span, or its canary suite's, or the default."""
        if run.declared is not None:
            return run.declared
        return self.canary(run.run_id, run.suite, run.point)

    def canary(self, run_id: str, suite: str | None, point: str | None) -> RunDeclaration:
        """What a run without a run span is judged by: its suite's, when known, or the
        default."""
        known = self.canary_suites.get(suite or "")
        if known is not None:
            return RunDeclaration.of_suite(run_id, known)
        return RunDeclaration.default(run_id, suite, point)

    def assess(
        self,
        run: StoredRun,
        declaration: RunDeclaration | None = None,
        evidence: Evidence | None = None,
        *,
        in_progress: bool | None = None,
    ) -> Assessment:
        """Assess a run, uncached: on `evidence` (read from the store unless given), judged by
        `declaration` (the run's own unless given), in progress, unless told, while the run is
        open."""
        return assess_declared(
            self._store.evidence(run.run_id) if evidence is None else evidence,
            self.declaration(run) if declaration is None else declaration,
            in_progress=not run.final if in_progress is None else in_progress,
            late=run.late,
            declaration_conflict=run.declaration_conflict,
        )
