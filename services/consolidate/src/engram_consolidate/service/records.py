"""What the worker keeps about each pass of each tenant: the latest run, its checkpoint, and
a request waiting to start. One record per (tenant, pass, dry), stored by a `Checkpoints`
port with compare-and-set on its revision.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from engram_core.ids import EVERY_TENANT


class PassName(StrEnum):
    DECAY = "decay"
    ASSOCIATE = "associate"
    CLUSTER = "cluster"
    FORGET = "forget"
    # Drift repair of one store of a tenant, and rebuilds of a store across tenants (their
    # records live under the tenant token GLOBAL).
    SYNC_VECTOR = "sync_vector"
    SYNC_LEXICAL = "sync_lexical"
    SYNC_GRAPH = "sync_graph"
    REBUILD_VECTOR = "rebuild_vector"
    REBUILD_LEXICAL = "rebuild_lexical"
    REBUILD_GRAPH = "rebuild_graph"


PASS_ORDER: tuple[PassName, ...] = (
    PassName.DECAY,
    PassName.ASSOCIATE,
    PassName.CLUSTER,
    PassName.FORGET,
    PassName.SYNC_VECTOR,
    PassName.SYNC_LEXICAL,
    PassName.SYNC_GRAPH,
)
REBUILDS: tuple[PassName, ...] = (
    PassName.REBUILD_VECTOR,
    PassName.REBUILD_LEXICAL,
    PassName.REBUILD_GRAPH,
)
# Passes whose result depends only on the tenant's memories and relations, not on the
# clock (decay and forget age with it): a scheduled run of one over a tenant that has not
# changed since its last successful run began would write nothing, so it is skipped.
UNCHANGED_SKIPS: frozenset[PassName] = frozenset({PassName.ASSOCIATE, PassName.CLUSTER})
# Passes whose scheduled runs may read only the memories written since the last run.
INCREMENTAL: frozenset[PassName] = frozenset({PassName.ASSOCIATE})
# The tenant token of the records of runs over every tenant (rebuilds): valid in KV keys
# and lease names, never a tenant (tenants match [A-Za-z0-9_-]).
GLOBAL = EVERY_TENANT


def passes_of(tenant: str) -> tuple[PassName, ...]:
    """The passes a tenant's records may hold: rebuilds for GLOBAL, the others for tenants."""
    return REBUILDS if tenant == GLOBAL else PASS_ORDER


def record_tenant(tenant: str, name: PassName) -> str:
    """Where a request of ``tenant`` for ``name`` is recorded: rebuilds under GLOBAL."""
    return GLOBAL if name in REBUILDS else tenant


class RunState(StrEnum):
    NEVER = "never"  # no run yet (a request may be pending)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Trigger(StrEnum):
    SCHEDULE = "schedule"
    REQUEST = "request"


@dataclass(frozen=True, slots=True)
class Key:
    tenant: str
    pass_name: PassName
    dry_run: bool = False

    @property
    def lease(self) -> str:
        """The lease that elects one runner of this key among the replicas."""
        dry = ":dry" if self.dry_run else ""
        return f"consolidate:{self.tenant}:{self.pass_name.value}{dry}"

    def __str__(self) -> str:
        return f"{self.tenant}/{self.pass_name.value}{' (dry run)' if self.dry_run else ''}"


@dataclass(frozen=True, slots=True)
class Change:
    """How many changes of one kind, and the first few ids."""

    kind: str
    count: int
    sample: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RunRecord:
    key: Key
    run_id: str = ""
    state: RunState = RunState.NEVER
    trigger: Trigger = Trigger.SCHEDULE
    now: datetime | None = None  # the run's clock; a resumed run keeps it
    started_at: datetime | None = None
    finished_at: datetime | None = None
    phase: str = ""
    cursor: str = ""  # where the phase resumes; "" = at its start
    done: int = 0  # items of the phase finished
    total: int = 0  # items of the phase (0: not known)
    changes: tuple[Change, ...] = ()
    error: str = ""
    holder: str = ""
    heartbeat_at: datetime | None = None
    resumes: int = 0
    pending_run_id: str = ""
    requested_at: datetime | None = None
    params: str = ""  # the run's parameters and what it learnt so far (JSON, the pass's own)
    pending_params: str = ""  # those of the pending request
    # The tenant's applied log position when the run began (ChangeMarks; 0: not known).
    input_mark: int = 0
    checked_at: datetime | None = None  # a scheduled run was last skipped then (unchanged)
    # INCREMENTAL passes: when the last full run began (an incremental run carries it on).
    full_at: datetime | None = None

    @property
    def last_active(self) -> datetime | None:
        """When the run finished, or a later skipped one was due: what intervals count from."""
        if self.finished_at is None or self.checked_at is None:
            return self.finished_at
        return max(self.finished_at, self.checked_at)

    def with_pending(self, run_id: str, at: datetime, params: str = "") -> RunRecord:
        return replace(self, pending_run_id=run_id, requested_at=at, pending_params=params)


class Tally:
    """Counts of changes by kind with the first ``samples`` ids of each, across the pages
    of a run (a resumed run starts from its checkpoint's)."""

    def __init__(self, samples: int, start: Sequence[Change] = ()) -> None:
        self._samples = samples
        self._counts: dict[str, int] = {c.kind: c.count for c in start}
        self._ids: dict[str, list[str]] = {c.kind: list(c.sample) for c in start}

    def add(self, kind: str, ids: Sequence[str] = (), count: int | None = None) -> None:
        """Count ``count`` (default: len(ids)) changes of ``kind``; ids feed the sample."""
        n = len(ids) if count is None else count
        if n <= 0 and (count is None or kind in self._counts):
            return  # only an explicit count=0 names a kind with nothing in it
        self._counts[kind] = self._counts.get(kind, 0) + max(n, 0)
        held = self._ids.setdefault(kind, [])
        for id_ in ids:
            if len(held) >= self._samples:
                break
            if id_ not in held:
                held.append(id_)

    def count(self, kind: str) -> int:
        return self._counts.get(kind, 0)

    def snapshot(self) -> tuple[Change, ...]:
        return tuple(
            Change(kind, self._counts[kind], tuple(self._ids.get(kind, ())))
            for kind in sorted(self._counts)
        )

    def as_dict(self) -> Mapping[str, int]:
        return dict(self._counts)


def edge_label(source: str, target: str) -> str:
    """How an edge appears in a sample: ``<source>><target>``."""
    return f"{source}>{target}"


def incremental_params(after: int, upto: int) -> str:
    """The params of an incremental run: the memories written in (after, upto]."""
    return json.dumps({"after": after, "upto": upto})


def incremental_window(params: str) -> tuple[int, int] | None:
    """(after, upto) of an incremental run's params, else None."""
    if not params:
        return None
    try:
        raw = json.loads(params)
        after, upto = int(raw["after"]), int(raw["upto"])
    except (ValueError, TypeError, KeyError):
        return None
    return (after, upto) if 0 < after <= upto else None
