"""AdminService's logic: requests for consolidation passes, and their status.
Pure: the log and the worker's KV records are behind ``ConsolidationControl``.

A request is an event on the log; the consolidate worker records it and runs the passes
under their leases. A dry run's reports come back through the same records, so the call
waits for them (bounded by its deadline) by reading the records again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from engram_core.ids import EVERY_TENANT
from engram_gateway.service.deadline import Deadline
from engram_gateway.service.deadline import bounded as _within

PASSES: tuple[str, ...] = ("decay", "associate", "cluster", "forget")
STORES: tuple[str, ...] = ("vector", "lexical", "graph")
# Sync of one store of a tenant, and rebuild of a store across tenants, are runs of the
# consolidate worker like the passes, named so; rebuild records live under the tenant
# token GLOBAL (the worker's engram_consolidate.service.records.GLOBAL).
SYNC_PREFIX, REBUILD_PREFIX = "sync_", "rebuild_"
GLOBAL = EVERY_TENANT


class RunState(StrEnum):
    NEVER = "never"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


FINAL = frozenset({RunState.SUCCEEDED, RunState.FAILED})


@dataclass(frozen=True, slots=True)
class Change:
    kind: str
    count: int
    sample: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PassRun:
    pass_name: str
    run_id: str
    state: RunState
    dry_run: bool = False
    trigger: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float = 0.0
    phase: str = ""
    done: int = 0
    total: int = 0
    changes: tuple[Change, ...] = ()
    error: str = ""
    resumes: int = 0
    params: str = ""  # JSON: a rebuild's generation, previous generation, embedding_model
    # associate, cluster: a scheduled run was last skipped then, the tenant unchanged
    unchanged_checked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PassStatus:
    pass_name: str
    last_run: PassRun | None = None
    pending_run_id: str = ""
    last_dry_run: PassRun | None = None


@dataclass(frozen=True, slots=True)
class Consolidation:
    run_id: str
    passes: tuple[str, ...]
    reports: tuple[PassRun, ...] = ()  # dry runs only


class ConsolidationControl(Protocol):
    async def request(
        self,
        tenant: str,
        run_id: str,
        passes: Sequence[str],
        dry_run: bool,
        at: datetime,
        params: str = "",
    ) -> None:
        """Publish the request (durable in the log on return)."""
        ...

    async def status(self, tenant: str, passes: Sequence[str] = PASSES) -> list[PassStatus]:
        """One status per pass of ``passes``, in that order."""
        ...


@dataclass(frozen=True, slots=True)
class Maintenance:
    """RebuildStatus: the rebuild of each store, the tenant's sync of each store."""

    rebuilds: list[PassStatus]
    syncs: list[PassStatus]


@dataclass(frozen=True, slots=True)
class AdminConfig:
    dry_run_poll_s: float = 0.2  # how often a dry run's reports are read while waiting
    backend_timeout_s: float = 5.0


class Admin:
    def __init__(
        self,
        control: ConsolidationControl,
        config: AdminConfig,
        clock: Callable[[], datetime],
        new_id: Callable[[], str],
    ) -> None:
        self._control = control
        self._config = config
        self._clock = clock
        self._new_id = new_id

    async def consolidate(
        self, tenant: str, passes: Sequence[str], dry_run: bool, deadline: Deadline
    ) -> Consolidation:
        wanted = tuple(p for p in PASSES if p in passes)
        return await self._run(tenant, wanted, dry_run, deadline)

    async def sync(
        self, tenant: str, stores: Sequence[str], dry_run: bool, deadline: Deadline
    ) -> Consolidation:
        """A sync run of each store (all three when none is named)."""
        wanted = tuple(f"{SYNC_PREFIX}{s}" for s in STORES if s in stores or not stores)
        return await self._run(tenant, wanted, dry_run, deadline)

    async def _run(
        self, tenant: str, wanted: tuple[str, ...], dry_run: bool, deadline: Deadline
    ) -> Consolidation:
        """Request one run of ``wanted``; a dry run waits for its reports."""
        run_id = self._new_id()
        timeout = deadline.cap(self._config.backend_timeout_s)
        request = self._control.request(tenant, run_id, wanted, dry_run, self._clock())
        await _within(request, timeout, "the request")
        if not dry_run:
            return Consolidation(run_id, wanted)
        return Consolidation(run_id, wanted, await self._reports(tenant, run_id, wanted, deadline))

    async def rebuild(
        self, tenant: str, store: str, embedding_model: str, deadline: Deadline
    ) -> str:
        """Ask for a rebuild of ``store`` (recorded across tenants); its run id."""
        run_id = self._new_id()
        params = json.dumps({"embedding_model": embedding_model}) if embedding_model else ""
        request = self._control.request(
            tenant, run_id, (f"{REBUILD_PREFIX}{store}",), False, self._clock(), params
        )
        await _within(request, deadline.cap(self._config.backend_timeout_s), "the request")
        return run_id

    async def maintenance(self, tenant: str, deadline: Deadline) -> Maintenance:
        """The rebuilds, and ``tenant``'s syncs ("": none)."""
        rebuilds = await self._statuses(GLOBAL, [f"{REBUILD_PREFIX}{s}" for s in STORES], deadline)
        return Maintenance(rebuilds, await self.syncs(tenant, deadline) if tenant else [])

    async def syncs(self, tenant: str, deadline: Deadline) -> list[PassStatus]:
        return await self._statuses(tenant, [f"{SYNC_PREFIX}{s}" for s in STORES], deadline)

    async def _reports(
        self, tenant: str, run_id: str, passes: tuple[str, ...], deadline: Deadline
    ) -> tuple[PassRun, ...]:
        """The dry runs' reports once all are final, or as far as they got when the
        deadline is near (the worker goes on; ConsolidationStatus shows the rest)."""
        poll = self._config.dry_run_poll_s
        while True:
            got = await self._statuses(tenant, passes, deadline)
            statuses = {s.pass_name: s for s in got}
            reports = tuple(_dry_report(statuses.get(p), p, run_id) for p in passes)
            # Keep a poll's worth of time for answering with what there is.
            if all(r.state in FINAL for r in reports) or deadline.remaining() < 2 * poll:
                return reports
            await asyncio.sleep(poll)

    async def status(self, tenant: str, deadline: Deadline) -> list[PassStatus]:
        return await self._statuses(tenant, PASSES, deadline)

    async def _statuses(
        self, tenant: str, passes: Sequence[str], deadline: Deadline
    ) -> list[PassStatus]:
        timeout = deadline.cap(self._config.backend_timeout_s)
        got = await _within(self._control.status(tenant, passes), timeout, "the status read")
        now = self._clock()
        return [
            replace(
                s,
                last_run=_with_duration(s.last_run, now),
                last_dry_run=_with_duration(s.last_dry_run, now),
            )
            for s in got
        ]


def _dry_report(status: PassStatus | None, pass_name: str, run_id: str) -> PassRun:
    last = status.last_dry_run if status is not None else None
    if last is not None and last.run_id == run_id:
        return last
    # Not started yet (the worker has not taken the request, or runs another dry run).
    return PassRun(pass_name, run_id, RunState.PENDING, dry_run=True)


def _with_duration(run: PassRun | None, now: datetime) -> PassRun | None:
    """A running pass's duration so far (a finished one keeps its own)."""
    if run is None or run.started_at is None or run.finished_at is not None:
        return run
    return replace(run, duration_s=max(0.0, (now - run.started_at).total_seconds()))
