"""What replication adds to the receiver: the runs this replica holds and owns, its heartbeat,
takeovers of lapsed replicas' runs, and catching up with what other replicas wrote."""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from ...lifecycle import Final, FinalReason, Lifecycle
from ..config import ReceiverConfig
from ..publishing.finisher import Finisher
from ..publishing.judging import Judge
from ..run_faults import isolated, log_set_aside, logger
from ..store import RunVersion, Store, StoredRun, Written, is_store_error

_T = TypeVar("_T")

CLAIM_BATCH = 1000
"""Runs one claim takes at most (a takeover of more claims again)."""
RECOUNT_EVERY = 30.0
"""Seconds between two counts of what a shared store holds for its caps (framework spans held,
admissions staged): between them, each replica keeps its own estimate, counted again whenever
it says a cap is passed."""


class Ownership:
    """The runs `replica` decides, and how it comes to own them and keeps them.

    A replica owns its runs while its heartbeat holds (one row, renewed every third of
    `config.lease`); the runs of a replica whose heartbeat lapsed are taken over. The open runs
    it holds are fed to `lifecycle` through narrow calls (restored, caught up with, released,
    set aside), and runs made final before a restart handed to `finisher`. Its methods are
    called with the receiver's lock held, but `renew` (its own lock), `release` (at close) and
    the finisher's asks (`made_final_at`, `amended`, `give_up`)."""

    def __init__(
        self,
        replica: str,
        store: Store,
        config: ReceiverConfig,
        clock: Callable[[], float],
        lifecycle: Lifecycle,
        finisher: Finisher,
        judge: Judge,
    ) -> None:
        self.replica = replica
        self._store, self._config, self._clock = store, config, clock
        self._lifecycle, self._finisher, self._judge = lifecycle, finisher, judge
        self._known: dict[str, RunVersion] = {}
        """The open runs this replica decides, each with the version of it the lifecycle holds."""
        self._finals: dict[str, RunVersion] = {}
        """Runs this replica made final, each with the version its final evidence holds: a run
        the store holds at that version is admitted on that evidence, never read back."""
        self._set_aside: set[str] = set()
        self._amended: set[str] = set()
        """Runs this replica decides whose trials were amended (derived again) since the tick
        last read them."""
        self._next_claim = 0.0
        self._next_recount = 0.0
        self._heartbeat = threading.Lock()
        self._renewed_at = -math.inf
        """When this replica's heartbeat was last renewed (by the tick or its own thread)."""
        self._store_was_away = False
        """The last tick's store failed it: the next one renews its heartbeat, and takes over a
        lease later."""

    def held(self) -> int:
        """The open runs this replica decides (each holds its evidence in memory here)."""
        return len(self._known)

    def holds(self, run_id: str) -> bool:
        """Whether this replica decides `run_id`, open."""
        return run_id in self._known

    def recover(self, now: float) -> None:
        """Take up the store's open runs again (their evidence read once), and hand the runs
        that were final but not yet admitted when the process stopped to the finisher; in a
        shared store, those whose owner's heartbeat lapsed."""
        self.renew(now)  # alive before it claims anything
        # a store no other process writes: whoever owned its runs is gone
        self._take_over(now, mine=True, lapsed_before=None if self._store.shared else math.inf)

    def _take_over(
        self, now: float, mine: bool = False, lapsed_before: float | None = None
    ) -> None:
        """Claim the runs whose owner's heartbeat lapsed before `lapsed_before` (by default
        `now`), and with `mine` this replica's own (a store reopened): an open one into the
        lifecycle, a final one still to admit to the finisher. Claims run out in batches, so
        that a takeover of many runs is taken in full."""
        lapsed = now if lapsed_before is None else lapsed_before
        while claimed := self._store.claims.claim_runs(
            self.replica, lapsed, CLAIM_BATCH, mine=mine
        ):
            for run in claimed:
                self._take_up(run)
            mine = False  # the runs claimed are this replica's now: claim what is left
            if len(claimed) < CLAIM_BATCH:
                return

    def _take_up(self, run: StoredRun) -> None:
        """A run this replica owns and does not hold (claimed, or left behind by a fault): an
        open one into the lifecycle, a final one still to admit to the finisher. A run whose
        stored declaration cannot be read is set aside; a store fault leaves it for the next
        tick to take up."""
        work = self._admit_recovered if run.final else self._restore
        if isolated(run.run_id, functools.partial(work, run)) is False:
            self._lifecycle.set_aside(run.run_id)
            self._set_aside.add(run.run_id)

    def _restore(self, run: StoredRun) -> None:
        """An open run into the lifecycle, as the store holds it at `run.version` (in a shared
        store what later writes stored is caught up with at the next tick), with a full idle
        period from now: exports its last owner refused (dead, stalled, or restarting) are
        still being retried."""
        upto = run.version if self._store.shared else None
        evidence = self._store.evidence(run.run_id, upto=upto)
        self._known[run.run_id] = run.version
        if run.framework:
            self._lifecycle.amendable(run.run_id)
        self._lifecycle.restore(
            run.run_id,
            evidence,
            self._judge.declaration(run),
            declared=run.declared is not None,
            opened=run.first_seen,
            last_news=max(run.last_seen, run.declared_at or 0.0, self._clock()),
        )

    def _admit_recovered(self, run: StoredRun) -> None:
        """A run made final before a restart (or by a replica that died since), to the
        finisher."""
        evidence, declaration = self._store.evidence(run.run_id), self._judge.declaration(run)
        self._finisher.put(
            Final(
                run.run_id, FinalReason.RECOVERED, evidence, declaration, run.declared is not None
            )
        )

    def renew(self, now: float) -> None:
        """The one place the heartbeat is written: once a quarter of a lease has passed since it
        last was, by the tick (every third of a lease) or the renewal thread (every sixth),
        whichever asks first (an ask while the other is renewing leaves it to that one); so it
        is written about every third of a lease, and never more than half a lease apart."""
        if not self._store.shared or not self._heartbeat.acquire(blocking=False):
            return  # the other caller is renewing it now
        try:
            if now >= self._renewed_at + self._config.lease / 4:
                self._store.claims.renew(self.replica, now + self._config.lease)
                self._renewed_at = now
        finally:
            self._heartbeat.release()

    def store_away(self) -> None:
        """A tick failed for the store being away: every heartbeat lapsed meanwhile, so the
        next tick renews this one's and takes over nothing until a lease later."""
        self._store_was_away = True

    def follow(self, now: float) -> None:
        """At each tick, the store is what the lifecycle follows: the runs this replica decides
        catch up with what other replicas wrote to them, a run another replica took over is let
        go, and a run it owns but does not hold (a fault between a commit and the lifecycle, or
        a finish that failed) is taken up again. In a shared store, every third of a lease its
        heartbeat is renewed and the runs of replicas whose heartbeat lapsed are taken over.
        Reads the runs this replica owns (open work), never the history."""
        if self._store.shared and now >= self._next_claim:
            self.renew(now)
            self._next_claim = now + self._config.lease / 3
            if self._store_was_away:  # every heartbeat lapsed meanwhile: the replicas that come
                self._store_was_away = False  # back renew theirs before any is taken over
                self._next_claim = now + self._config.lease
            else:
                self._take_over(now)
            if now >= self._next_recount:
                self._next_recount = now + RECOUNT_EVERY
                self._store.recount()
        owned = self._store.claims.owned_runs(self.replica)
        for run_id in [run_id for run_id in self._known if run_id not in owned]:
            del self._known[run_id]  # taken over by another replica
            self._lifecycle.release(run_id)
        for run_id, (version, final) in owned.items():
            known = self._known.get(run_id)
            if known is not None:
                if version > known.writes and (run := self._store.run(run_id)):
                    self.or_set_aside(run_id, functools.partial(self._catch_up, run, known))
            elif (
                run_id not in self._set_aside
                and not self._finisher.holds(run_id)
                and (run := self._store.run(run_id)) is not None
                and run.status is None
                and (final or not run.final)
            ):
                self._take_up(run)

    def _catch_up(self, run: StoredRun, known: RunVersion) -> None:
        """Tell the lifecycle what other replicas wrote to a run this one decides since it held
        version `known`: its run span, its trials, that it had news."""
        lifecycle, seen = self._lifecycle, run.last_seen
        if run.framework:
            lifecycle.amendable(run.run_id)
        if run.declared is not None:
            lifecycle.ended(run.declared, seen)
        trials = self._store.claims.written_since(run.run_id, known, run.version)
        if lifecycle.holds(run.run_id, trials):  # trials derived again: read again, once,
            self._amended.add(run.run_id)  # by the tick
        else:
            lifecycle.record_all(run.run_id, trials, seen, run.suite, run.point)
        lifecycle.heard(run.run_id, seen)
        self._known[run.run_id] = run.version

    def place(self, written: Written) -> tuple[set[str], set[str]]:
        """Which runs a committed write brings news of that this replica decides: those whose
        news the lifecycle is told directly, and those that first caught up with what other
        replicas relayed to them (its own writes are never read back); one it claimed in this
        write is taken up whole, one another replica decides, or over, is neither."""
        direct, caught_up = set[str](), set[str]()
        for run in written.runs:
            if run.owner != self.replica or run.final or run.run_id in self._set_aside:
                continue  # another replica decides it, or it is over (the store counted it late)
            known = self._known.get(run.run_id)
            if run.run_id in written.claimed or (known is None and run.version.writes > 1):
                if known is not None:  # held since before another replica owned it meanwhile
                    del self._known[run.run_id]
                    self._lifecycle.release(run.run_id)
                self._take_up(run)  # an existing run, claimed by this write
                continue
            if known is not None and known.writes != run.version.writes - 1:
                self._catch_up(run, known)
                caught_up.add(run.run_id)
            else:
                direct.add(run.run_id)
                self._known[run.run_id] = run.version
                if run.framework:  # its plan complete ends it only once idle: spans may come
                    self._lifecycle.amendable(run.run_id)
        self._amended |= written.amended.keys() & (direct | caught_up)  # read again, by the tick
        return direct, caught_up

    def let_go_of(self, outcomes: Sequence[Written | Exception]) -> None:
        """The runs of a committed group whose following failed, no longer held here, so that
        the next tick takes each up whole from the store (what this replica wrote as a run's
        owner is never caught up with piece by piece)."""
        for outcome in outcomes:
            if isinstance(outcome, Written):
                self.let_go_of_runs(run.run_id for run in outcome.runs)

    def let_go_of_runs(self, run_ids: Iterable[str]) -> None:
        """Runs no longer held here, for the next tick to take up whole from the store: those
        of a group whose following failed, and those of a write the store failed, which may have
        committed all the same (its connection lost at the commit) as this replica's own."""
        for run_id in run_ids:
            if self._known.pop(run_id, None) is not None:
                self._lifecycle.release(run_id)

    def read_amended(self) -> None:
        """Read again, once, the runs this replica decides whose trials were amended since the
        last look: each as the store holds it now."""
        for run_id in sorted(self._amended):
            if run_id in self._known:
                self.or_set_aside(run_id, functools.partial(self._read_again, run_id))
            self._amended.discard(run_id)

    def _read_again(self, run_id: str) -> None:
        """Give the lifecycle a run's trials as the store holds them."""
        upto = self._known[run_id] if self._store.shared else None
        self._lifecycle.amend(run_id, self._store.evidence(run_id, upto=upto))

    def close(self, finals: list[str]) -> set[str]:
        """Make final in the store the runs the lifecycle says are over; those closed (a run
        another replica took over is its to admit). A close that fails leaves them open in the
        store: the next tick takes them up (`follow`)."""
        versions = {run_id: self._known.pop(run_id, None) for run_id in finals}
        closed = self._close(finals) if finals else set()
        for run_id in closed:
            if (version := versions[run_id]) is not None:
                self._finals[run_id] = version
        return closed

    def _close(self, finals: list[str]) -> set[str]:
        """Make runs final in the store; the runs closed. When the store refuses one for what
        it holds (not for being away), they are closed one by one and that one is set aside
        alone."""
        try:
            return set(self._store.close_runs(finals, self.replica))
        except Exception as error:
            if is_store_error(error):
                raise
        closed: set[str] = set()
        for run_id in finals:
            close = functools.partial(self._store.close_runs, [run_id], self.replica)
            closed.update(self.or_set_aside(run_id, close) or ())
        return closed

    def or_set_aside(self, run_id: str, work: Callable[[], _T]) -> _T | None:
        """Do one run's part of a tick. A run the store refuses for what it holds, or whose
        work fails for a bug, is set aside alone (`log_set_aside`), so that one never stops the
        others; None then. The store being away is raised: the tick is tried again."""
        try:
            return work()
        except Exception as error:
            if is_store_error(error):
                raise
            log_set_aside("run", run_id, error)
        self._known.pop(run_id, None)
        self._lifecycle.set_aside(run_id)
        self._set_aside.add(run_id)
        return None

    def made_final_at(self, run_id: str) -> RunVersion | None:
        """The version of a run this replica made final that its final evidence holds (None
        for a run it did not make final), forgotten as it is asked for: the run is admitted."""
        return self._finals.pop(run_id, None)

    def amended(self, run_id: str) -> bool:
        """Whether a run's trials were amended since the lifecycle last read them."""
        return run_id in self._amended

    def give_up(self, run_ids: Iterable[str]) -> None:
        """Runs not to be tried again at every tick (their admission failed for a bug)."""
        self._set_aside.update(run_ids)

    def release(self) -> None:
        """Let this replica's claims lapse at once (it stops), so that the other replicas take
        its runs and its outbox entries over at their next look."""
        try:
            self._store.claims.release(self.replica)
        except Exception as error:
            if not is_store_error(error):
                raise
            logger.warning(
                "verdictgate: could not hand this replica's runs over (%s); the other "
                "replicas take them over once its heartbeat lapses",
                error,
            )
