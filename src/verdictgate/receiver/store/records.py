"""What the store hands back: a run as it stands (`StoredRun`) and what one write did
(`Written`)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

from ...declaration import RunDeclaration
from ...otel.span_decoding import run_declaration
from ...trial_model import Trial
from ...wire_types import JsonObject

BATCHES_PER_PART = 1 << 32
"""The writes one part of a run numbers (a part's writes to one run: far more than a run takes)."""


def batch_number(part: int, writes: int) -> int:
    """The batch a write stores a run's trials under: the writer's part of the run (numbered
    store-wide), then the part's count of writes; part 0 counts the writes made before parts
    (the run's own count), so their batches are those counts."""
    return part * BATCHES_PER_PART + writes


@dataclass(frozen=True)
class RunVersion:
    """How far a run's writes went, each writer's counted in its own part of the run (so that
    writers of one run never wait for each other): per part, the writes it committed. Each
    part's writes are numbered in the order they commit, so a version is a snapshot of the
    run: the trials stored by each part's writes up to its count."""

    parts: tuple[tuple[int, int], ...] = ()

    @property
    def writes(self) -> int:
        """Writes that touched the run so far, by every writer (it grows with each)."""
        return sum(writes for _, writes in self.parts)

    def of(self, part: int) -> int:
        """The writes of one part in this version (0 for a part it does not know)."""
        return next((writes for number, writes in self.parts if number == part), 0)

    def holds(self, batch: int) -> bool:
        """Whether the trials stored under `batch` are in this snapshot."""
        part, writes = divmod(batch, BATCHES_PER_PART)
        return 0 < writes <= self.of(part)


@dataclass(frozen=True)
class StoredRun:
    """A run as the store knows it."""

    run_id: str
    suite: str | None
    point: str | None
    declaration_json: str | None
    """The run span's declaration attributes as stored; read on demand (`declaration`)."""
    planned_trials: int | None
    declared_at: float | None
    first_seen: float
    last_seen: float
    status: str | None
    final: bool
    received: int
    late: int = 0
    """Records that arrived after the run was final: counted, never stored."""
    declaration_conflict: bool = False
    """A second run span declared the run differently; the first declaration was kept."""
    owner: str | None = None
    """The replica that decides it (while its heartbeat holds)."""
    version: RunVersion = RunVersion()
    """How far its writes went: a snapshot of it that its trials are read up to."""
    framework: bool = False
    """Some of its trials come from framework spans (a span that comes after its trial settled
    amends that trial while the run is open)."""

    @functools.cached_property
    def declaration(self) -> JsonObject | None:
        """The run span's declaration attributes (parsed once, when asked for)."""
        return None if self.declaration_json is None else json.loads(self.declaration_json)

    @functools.cached_property
    def declared(self) -> RunDeclaration | None:
        """The declaration read (once) from the stored run-span attributes, if any."""
        return None if self.declaration is None else run_declaration(self.declaration)


@dataclass(frozen=True)
class Written:
    """What one write did: the runs it touched (or heard of) as they stand after it, per run
    the trials it took (stored, or repeats of stored ones; in the order given), and per run the
    trials refused for want of room."""

    runs: list[StoredRun]
    refused: dict[str, int]
    accepted: dict[str, list[Trial]]
    late_spans: dict[str, int] = field(default_factory=dict)
    """Per run, framework spans that came below a trial already settled (counted late)."""
    let_go: int = 0
    """Framework spans let go by this write to stay within the held-span cap or a trace's."""
    heard: frozenset[str] = frozenset()
    """Runs one of whose framework trials, not settled yet, got a span (its trial span or one
    below it): news that keeps the run from going idle while the trial settles."""
    labels: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """Per run, the (suite, point) its trials came under (those given, and a due trace's)."""
    amended: dict[str, list[Trial]] = field(default_factory=dict)
    """Per run, the framework trials this write derived again from all their spans (a span came
    after they settled): their stored records were replaced."""
    claimed: frozenset[str] = frozenset()
    """Runs this write claimed for its replica (their owner was not alive): taken up whole."""
    busy: bool = False
    """The due trace to settle was held by another transaction (another replica settling it,
    or spans of it arriving): nothing of it was settled, and it is due again at the next tick."""
