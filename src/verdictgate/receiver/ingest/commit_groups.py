"""Requests committed in groups: those that arrive while a group commits are committed together
by the next one, and each is answered once that commit is done."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

_In = TypeVar("_In")
_Out = TypeVar("_Out")


class CommitGroups(Generic[_In, _Out]):
    """Requests committed in groups under `lock`: while one group commits, the requests that
    arrive wait, and the first of them then commits every request waiting, in the order they
    came, in one call of `commit` (holding `lock`), which returns for each its outcome or the
    error it is refused with. So each request is answered only after the commit that holds
    it, a request refused in a group is refused alone (the others get their own outcomes), and
    an error `commit` raises is every request's of its group."""

    def __init__(
        self,
        lock: AbstractContextManager[object],
        commit: Callable[[list[_In]], list[_Out | Exception]],
    ) -> None:
        self._lock = lock
        self._commit = commit
        self._queue: list[Queued[_In, _Out]] = []
        self._changed = threading.Condition()
        self._committing = False
        """A group is being committed: the requests queued meanwhile wait for the next one."""

    def submit(self, request: _In) -> _Out:
        """Commit `request` in the next group; its outcome, once committed (its error raised)."""
        return self.queue(request).outcome()

    def queue(self, request: _In) -> Queued[_In, _Out]:
        """Queue `request` for the next group (`Queued.outcome` waits for its commit)."""
        queued: Queued[_In, _Out] = Queued(self, request)
        with self._changed:
            self._queue.append(queued)
        return queued

    def _await(self, queued: Queued[_In, _Out]) -> None:
        """Wait until `queued` is committed, committing its group when no other one is being
        committed."""
        with self._changed:
            while not queued.outcomes and self._committing:
                self._changed.wait()
            if queued.outcomes:
                return
            self._committing = True
        try:
            with self._lock:
                with self._changed:
                    group, self._queue = self._queue, []
                self._settle(group)
        finally:
            with self._changed:
                self._committing = False
                self._changed.notify_all()

    def _settle(self, group: list[Queued[_In, _Out]]) -> None:
        """Commit a group (the lock is held) and give each request its outcome."""
        outcomes: list[_Out | BaseException]
        try:
            outcomes = [*self._commit([queued.request for queued in group])]
        except BaseException as error:
            outcomes = [error] * len(group)
        for queued, outcome in zip(group, outcomes, strict=True):
            queued.outcomes.append(outcome)


@dataclass
class Queued(Generic[_In, _Out]):
    """A request queued for the next group."""

    groups: CommitGroups[_In, _Out]
    request: _In
    outcomes: list[_Out | BaseException] = field(default_factory=list)
    """Empty until its group is committed, then its one outcome."""

    def outcome(self) -> _Out:
        """What the request came to, once its group is committed (committed by this thread when
        no other one is committing); the error it was refused with is raised."""
        self.groups._await(self)
        (outcome,) = self.outcomes
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
