"""The warnings a write's framework spans call for: spans that came after their trial settled
(once a run), and spans let go to stay within the held-span caps (once)."""

from __future__ import annotations

from ..run_faults import logger
from ..store import Written

LATE_RUNS_KEPT = 10_000
"""Runs whose late spans were logged, remembered at most (a log line a run, not a set for
ever)."""


class SpanWarnings:
    """Warns of what writes did with framework spans, each thing once; `max_held_spans` is
    the cap the warning names."""

    def __init__(self, max_held_spans: int) -> None:
        self._max_held_spans = max_held_spans
        self._late_logged: set[str] = set()
        """Runs whose late framework spans were logged (once a run)."""
        self._let_go_logged = False

    def note(self, written: Written) -> None:
        """Warn of framework spans that came after their trial settled (once a run) and of
        framework spans let go to stay within the held-span caps (once)."""
        for run_id, late in written.late_spans.items():
            if run_id not in self._late_logged:
                if len(self._late_logged) >= LATE_RUNS_KEPT:
                    self._late_logged.clear()
                self._late_logged.add(run_id)
                logger.warning(
                    "run %.80s: %d framework spans came after their trial was settled (counted "
                    "late; raise --settle if the agent's spans take longer to arrive)",
                    run_id,
                    late,
                )
        if written.let_go and not self._let_go_logged:
            self._let_go_logged = True
            logger.warning(
                "framework spans are being let go to stay within --max-held-spans (%d) or a "
                "trace's 50,000: traces without a trial span, quiet the longest, go first "
                "(logged once; Store.traces.spans_let_go counts them)",
                self._max_held_spans,
            )
