"""Settling held traces: the trials whose framework spans went quiet (or waited too long)
derived and stored, and the traces with nothing left to settle forgotten."""

from __future__ import annotations

from collections.abc import Callable

from ...lifecycle import Lifecycle
from ...otel.framework_traces import settled_trials
from ...trial_model import Trial
from ..config import ReceiverConfig
from ..run_faults import log_set_aside
from ..store import Store, Written, is_store_error
from ..store.batch import Batch, DueTrace
from ..store.held_spans import DueTrials

TRACE_TTL = 600.0
"""Seconds a trace without a trial span is held (then dropped), and a settled trace remembered
(so that a late copy of its spans decides nothing again)."""
FORGET_BATCHES = 20
"""Transactions of forgetting a tick makes at most: 20,000 traces a tick, ahead of any flood of
trial-less traces a receiver takes, and a bounded slice of the tick."""


def settled_batch(due: DueTrials) -> Batch:
    """The write that stores a due trace's trials, each derived from its trial span and all the
    spans below it (those settled before and amended since stored again), and marks them
    settled, keeping which spans were below each."""
    derived, below = settled_trials(due.marks, due.facts)
    trials: list[Trial] = []
    again: list[Trial] = []
    for mark, trial in zip(due.marks, derived, strict=True):
        (again if mark.span_id in due.amended else trials).append(trial)
    return Batch(
        trials,
        labels={mark.run: (mark.suite, mark.point) for mark in due.marks},
        again=again,
        settled=((due.trace_id, [(mark.span_id, below[mark.span_id]) for mark in due.marks]),),
    )


class TraceSettling:
    """Settles the traces `store` holds, each due trace through `write` (the receiver's
    commits, so that the lifecycle hears of what it stored), timed by `config` from the last
    time `lifecycle` resumed."""

    def __init__(
        self,
        store: Store,
        config: ReceiverConfig,
        lifecycle: Lifecycle,
        write: Callable[[DueTrace], Written],
    ) -> None:
        self._store, self._config, self._lifecycle, self._write = store, config, lifecycle, write

    def settle(self, now: float) -> frozenset[str]:
        """Derive and store the trials whose own spans (the trial span and those below it) have
        been quiet for the settle time, whatever else shares their trace, or whose trial span
        has waited `max_hold` (settled from what has arrived; later spans are late): a trace's
        due trials in one transaction with marking them settled. Neither wait counts time
        before exports could be taken again (`resume`). Forget traces with no trial left to
        settle, once quiet for TRACE_TTL (FORGET_BATCHES batches at most). The runs whose due
        trials are still to settle (more than `settle_batch` traces were due, or another
        transaction held a due trace: another replica settling it, never waited for): they are
        not idle until a later tick settled them, and no other run waits for them."""
        config, store = self._config, self._store
        quiet_since = self._since(now - config.settle)
        held_since = self._since(now - config.max_hold)
        waiting: frozenset[str] = frozenset()
        if quiet_since or held_since:
            due = store.traces.quiet_traces(quiet_since, held_since, config.settle_batch)
            busy = False
            for trace_id in due:
                try:
                    busy |= self._write((trace_id, quiet_since, held_since)).busy
                except Exception as error:
                    if is_store_error(error):
                        raise
                    log_set_aside("trace", trace_id, error)
                    store.traces.set_aside_trace(trace_id)
            if busy or len(due) >= config.settle_batch:
                waiting = store.traces.runs_waiting(quiet_since, held_since)
        batch = config.settle_batch  # a settled trial's spans are let go once its trace was
        for before, forget in (  # quiet for the idle period (later spans are late), its trace
            (now - config.idle, store.traces.release_settled),  # once quiet for TRACE_TTL
            (now - TRACE_TTL, store.traces.forget_traces),
        ):
            for _ in range(FORGET_BATCHES):
                if forget(before, batch) < batch:
                    break
        return waiting

    def _since(self, cutoff: float) -> float:
        """A settling cutoff (spans quiet, or held, since before it are due), or 0.0 (nothing is
        due) while exports have been taken again for less than that wait."""
        return cutoff if self._lifecycle.resumed_at <= cutoff else 0.0
