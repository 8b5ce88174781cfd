"""Runs one pass of one tenant under its lease, checkpointing after every step.

- **Lease** (``Key.lease``): taken before anything is read, renewed every ``ttl/3`` by a
  task beside the pass. A failed renew stops the pass before its next step (its next
  writes); a replica that dies stops renewing, and another takes the lease once the TTL
  has passed.
- **Checkpoint**: after each step the record (phase, cursor, progress, changes) is written
  with compare-and-set on its revision. That is the fence the lease lacks: a holder that
  lost the lease while paused finds another revision, stops, and the two overlapped by at
  most one step — of the same writes, as both use the run's ``now``.
- **Resume**: a record left RUNNING (its holder died or stopped) is continued by whoever
  takes the lease next: same run id, same ``now``, from the checkpointed cursor.
- **Unchanged tenants**: a pass of ``UNCHANGED_SKIPS`` records the tenant's applied log
  position (``ChangeMarks``) when it starts; a scheduled run that finds the position where
  the last successful run found it, and no sync or rebuild of vector or graph finished
  since that run began, does not run (it would write nothing) and only notes the check
  (``checked_at``). Requested and dry runs always run, and so does the first run of each
  pass after the worker starts (its settings or code may have changed).
- **Incremental runs**: where the tenant has changed, a scheduled run of an
  ``INCREMENTAL`` pass on those same conditions gets params ``{"after", "upto"}`` (the last
  run's position and its own) and reads only the memories written in between, as long as
  the last full run began less than ``full_every_s`` ago (``full_at``); otherwise it is a
  full run.
- **Failures**: a retriable error (a store or the log down) redoes the step from the last
  checkpoint after a backoff, ``step_retries`` times; then the run is FAILED, and the
  scheduler starts a new one later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from engram_consolidate.service import metrics
from engram_consolidate.service.passes.base import Pass, Run
from engram_consolidate.service.ports import ChangeMarks, Checkpoints, FenceLost
from engram_consolidate.service.records import (
    GLOBAL,
    INCREMENTAL,
    UNCHANGED_SKIPS,
    Key,
    PassName,
    RunRecord,
    RunState,
    Tally,
    Trigger,
    incremental_params,
)
from engram_core.errors import RETRIABLE
from engram_core.ports import Lease

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    lease_ttl_s: float = 30.0
    step_pause_s: float = 0.0  # between steps, to spare the stores
    # The share of a run's wall time spent in steps: after a step that took t seconds the
    # run pauses t * (1 - duty) / duty (at least step_pause_s), so a pass leaves the stores
    # the rest of their time for recall whatever the machine's speed.
    duty: float = 1.0
    step_retries: int = 3
    retry_base_s: float = 1.0
    samples: int = 10
    # INCREMENTAL passes: a full run at least this often; scheduled runs in between read
    # only what was written since the run before (0: every run is full).
    full_every_s: float = 0.0

    def pause_after(self, worked_s: float) -> float:
        return max(self.step_pause_s, worked_s * (1 - self.duty) / self.duty)


@dataclass(frozen=True, slots=True)
class Start:
    """Start a new run (unless the fresh record under the lease says otherwise)."""

    run_id: str
    trigger: Trigger


Decide = Callable[[RunRecord | None], Start | None]
"""Given the record read under the lease: the run to start, or None. A RUNNING record is
always resumed and never reaches it."""


class Stopped(Exception):
    """The worker is stopping, or the lease was lost: leave the run for another holder."""


class PassRunner:
    def __init__(
        self,
        checkpoints: Checkpoints,
        lease: Lease,
        holder: str,
        config: RunnerConfig,
        clock: Callable[[], datetime],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        marks: ChangeMarks | None = None,
    ) -> None:
        self._checkpoints = checkpoints
        self._marks = marks
        # Keys this process has run: the first scheduled run of each after a start (new
        # settings, new code) always runs, whatever the tenant's log position.
        self._ran: set[Key] = set()
        self._monotonic = monotonic
        self._lease = lease
        self._holder = holder
        self._config = config
        self._clock = clock
        self._sleep = sleep

    @property
    def holder(self) -> str:
        return self._holder

    async def run(
        self, key: Key, make: Callable[[], Pass], decide: Decide, stop: asyncio.Event
    ) -> RunRecord | None:
        """Run (or resume) the pass of ``key`` if its lease is free; the final record, or
        None when nothing ran here (lease held elsewhere, nothing to do, fence lost, or
        stopped midway)."""
        ttl = self._config.lease_ttl_s
        if not await self._lease.try_acquire(key.lease, self._holder, ttl):
            metrics.skipped.add(1, {"pass": key.pass_name.value, "reason": "lease_busy"})
            return None
        held = {"lease": key.pass_name.value}
        metrics.leases_held.add(1, held)
        lost = asyncio.Event()
        renewer = asyncio.create_task(self._renew(key, lost))
        try:
            return await self._run(key, make, decide, stop, lost)
        except FenceLost:
            log.warning("%s: another runner wrote its checkpoint; leaving it the run", key)
            return None
        except Stopped as why:
            log.info("%s: stopped (%s); the run resumes from its checkpoint", key, why)
            return None
        finally:
            metrics.leases_held.add(-1, held)
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            try:
                await self._lease.release(key.lease, self._holder)
            except Exception as exc:  # it expires by itself
                log.warning("%s: lease release failed: %s", key, exc)

    async def _renew(self, key: Key, lost: asyncio.Event) -> None:
        ttl = self._config.lease_ttl_s
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                held = await self._lease.renew(key.lease, self._holder, ttl)
            except Exception as exc:
                log.warning("%s: lease renew failed: %s", key, exc)
                held = False
            if not held:
                lost.set()
                return

    async def _run(
        self,
        key: Key,
        make: Callable[[], Pass],
        decide: Decide,
        stop: asyncio.Event,
        lost: asyncio.Event,
    ) -> RunRecord | None:
        got = await self._checkpoints.get(key)
        record, revision = got if got is not None else (None, None)
        now = self._clock()
        if record is not None and record.state is RunState.RUNNING:
            record = replace(
                record, holder=self._holder, heartbeat_at=now, resumes=record.resumes + 1
            )
            log.info(
                "%s: resuming run %s at %s %r", key, record.run_id, record.phase, record.cursor
            )
        else:
            start = decide(record)
            if start is None:
                metrics.skipped.add(1, {"pass": key.pass_name.value, "reason": "not_due"})
                return None
            started = await self._started(key, record, revision, start, now)
            if started is None:
                return None
            record = started
        revision = await self._checkpoints.put(record, revision)
        self._ran.add(key)
        job = _Job(self, key, make(), record, revision, stop, lost)
        return await job.run()

    async def _started(
        self,
        key: Key,
        record: RunRecord | None,
        revision: int | None,
        start: Start,
        now: datetime,
    ) -> RunRecord | None:
        """The record of a new run of ``key``; None when the tenant is unchanged since the
        run before, which is then recorded as checked."""
        mark = await self._mark(key)
        carried = (
            record is not None
            and key in self._ran
            and _carried_on(record, start, mark)
            and not await self._repaired_since(key.tenant, record.started_at)
        )
        if carried and record is not None and record.input_mark == mark:
            await self._checked(key, record, revision, now)
            return None
        base = record or RunRecord(key)
        pending = "" if base.pending_run_id == start.run_id else base.pending_run_id
        requested = base.pending_params if base.pending_run_id == start.run_id else ""
        after = base.input_mark if carried and self._incremental(key, base, now) else 0
        if after:
            requested = incremental_params(after, mark)
        log.info(
            "%s: run %s starts (%s%s)",
            key,
            start.run_id,
            start.trigger.value,
            f", what was written after log position {after}" if after else "",
        )
        return replace(
            base,
            run_id=start.run_id,
            state=RunState.RUNNING,
            trigger=start.trigger,
            now=now,
            started_at=now,
            finished_at=None,
            phase="",
            cursor="",
            done=0,
            total=0,
            changes=(),
            error="",
            holder=self._holder,
            heartbeat_at=now,
            resumes=0,
            pending_run_id=pending,
            requested_at=base.requested_at if pending else None,
            params=requested,
            pending_params=base.pending_params if pending else "",
            input_mark=mark,
            checked_at=None,
            full_at=base.full_at if after else now,
        )

    async def _checked(
        self, key: Key, record: RunRecord, revision: int | None, now: datetime
    ) -> None:
        """Nothing written since ``record``'s run: the run stands, checked ``now``."""
        await self._checkpoints.put(replace(record, checked_at=now), revision)
        metrics.skipped.add(1, {"pass": key.pass_name.value, "reason": "unchanged"})
        log.info(
            "%s: tenant unchanged since run %s (log position %d); skipped",
            key,
            record.run_id,
            record.input_mark,
        )

    def _incremental(self, key: Key, record: RunRecord, now: datetime) -> bool:
        """Whether a run of ``key`` carrying on from ``record`` may read only what was
        written since: a pass that can, with a full run recent enough."""
        every = self._config.full_every_s
        return (
            key.pass_name in INCREMENTAL
            and every > 0
            and record.full_at is not None
            and (now - record.full_at).total_seconds() < every
        )

    async def _mark(self, key: Key) -> int:
        """The tenant's applied log position for a pass that may skip (0: not known)."""
        if self._marks is None or key.dry_run or key.pass_name not in UNCHANGED_SKIPS:
            return 0
        try:
            return await self._marks.applied_mark(key.tenant)
        except Exception as exc:  # the run goes ahead: skipping is only a saving
            log.warning("%s: cannot read the tenant's log position: %s", key, exc)
            return 0

    async def _repaired_since(self, tenant: str, since: datetime | None) -> bool:
        """Whether a sync or rebuild of the stores these passes read (vector, graph) has
        finished since ``since``: it writes no event, yet a rebuild onto another model
        changes every neighbour, so the tenant's log position alone cannot tell."""
        for key in _repairs(tenant):
            got = await self._checkpoints.get(key)
            done = got[0].finished_at if got is not None else None
            if done is not None and (since is None or done >= since):
                return True
        return False


def _repairs(tenant: str) -> tuple[Key, ...]:
    return (
        Key(GLOBAL, PassName.REBUILD_VECTOR),
        Key(GLOBAL, PassName.REBUILD_GRAPH),
        Key(tenant, PassName.SYNC_VECTOR),
        Key(tenant, PassName.SYNC_GRAPH),
    )


def _carried_on(record: RunRecord, start: Start, mark: int) -> bool:
    """Whether a scheduled run reads the stores as the last successful run left them plus
    the log's events after its position: both positions are known and in order."""
    return (
        start.trigger is Trigger.SCHEDULE
        and record.state is RunState.SUCCEEDED
        and record.input_mark > 0
        and mark >= record.input_mark
    )


class _Job:
    """One run in progress: its record, revision and tally."""

    def __init__(
        self,
        runner: PassRunner,
        key: Key,
        pass_: Pass,
        record: RunRecord,
        revision: int,
        stop: asyncio.Event,
        lost: asyncio.Event,
    ) -> None:
        self.checkpoints = runner._checkpoints
        self.config = runner._config
        self.clock = runner._clock
        self.sleep = runner._sleep
        self.monotonic = runner._monotonic
        self.key = key
        self.pass_ = pass_
        self.record = record
        self.revision = revision
        self.stop = stop
        self.lost = lost
        assert record.now is not None
        self.run_state = Run(
            key, record.run_id, record.now, Tally(self.config.samples), record.params
        )
        self.started = self.monotonic()

    async def save(self, **changes: Any) -> None:
        self.record = replace(self.record, heartbeat_at=self.clock(), **changes)
        self.revision = await self.checkpoints.put(self.record, self.revision)

    async def rest(self, seconds: float) -> None:
        """Sleep between two steps, cut short when the worker stops or the lease is lost (a
        pause as long as a slow page must not hold up a pod's shutdown)."""
        sleeper = asyncio.ensure_future(self.sleep(seconds))
        woken = [asyncio.ensure_future(e.wait()) for e in (self.stop, self.lost)]
        try:
            await asyncio.wait([sleeper, *woken], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, *woken):
                task.cancel()

    def guard(self) -> None:
        if self.stop.is_set():
            raise Stopped("worker stopping")
        if self.lost.is_set():
            raise Stopped("lease lost")

    async def run(self) -> RunRecord | None:
        phases = self.pass_.phases
        first = phases.index(self.record.phase) if self.record.phase in phases else 0
        try:
            for phase in phases[first:]:
                await self._phase(phase)
        except (Stopped, FenceLost):
            raise
        except Exception as exc:
            log.exception("%s: run %s failed", self.key, self.record.run_id)
            await self._finish(RunState.FAILED, f"{type(exc).__name__}: {exc}")
            return self.record
        await self._finish(RunState.SUCCEEDED, "")
        return self.record

    async def _phase(self, phase: str) -> None:
        fields: dict[str, Any] = {}
        if phase != self.record.phase:
            fields = {"phase": phase, "cursor": "", "done": 0, "total": 0}
        elif not self.pass_.resumable(phase):
            fields = {"cursor": "", "done": 0}
        if not fields.get("total", self.record.total):
            total = await self.pass_.total(self.run_state, phase)
            if total:
                fields["total"] = total
        if fields:
            await self.save(**fields)
        attempts = 0
        while True:
            # The tally restarts from the checkpoint: a step redone counts its changes once.
            self.run_state.tally = Tally(self.config.samples, self.record.changes)
            try:
                await self._steps(phase)
                return
            except Exception as exc:
                if not isinstance(exc, RETRIABLE) or attempts >= self.config.step_retries:
                    raise
                attempts += 1
                delay = self.config.retry_base_s * 2 ** (attempts - 1)
                log.warning(
                    "%s: %s step failed (%s); retry %d in %.1fs from the checkpoint",
                    self.key,
                    phase,
                    exc,
                    attempts,
                    delay,
                )
                await self.sleep(delay)
                self.guard()

    async def _steps(self, phase: str) -> None:
        self.guard()
        steps = self.pass_.steps(self.run_state, phase, self.record.cursor)
        began = self.monotonic()
        try:
            async for step in steps:
                if step.params is not None:
                    self.run_state.params = step.params
                done = self.record.done + step.items
                total = self.record.total if step.total is None else step.total
                await self.save(
                    params=self.run_state.params,
                    cursor="" if step.cursor is None else step.cursor,
                    done=done,
                    # Counted when the phase began: memories written since may pass it.
                    total=max(total, done) if total else 0,
                    changes=self.run_state.tally.snapshot(),
                )
                self.guard()
                if step.cursor is None:
                    break
                pause = self.config.pause_after(self.monotonic() - began)
                if pause > 0 and step.items:
                    await self.rest(pause)
                    self.guard()
                began = self.monotonic()
        finally:
            if isinstance(steps, AsyncGenerator):  # stopped early: run its cleanup now
                await steps.aclose()

    async def _finish(self, state: RunState, error: str) -> None:
        took = self.monotonic() - self.started
        await self.save(
            state=state,
            finished_at=self.clock(),
            error=error,
            changes=self.run_state.tally.snapshot(),
        )
        made = () if self.key.dry_run else self.record.changes
        metrics.finished(self.key.pass_name.value, state.value.lower(), took, made)
        counts = ", ".join(f"{c.kind}={c.count}" for c in self.record.changes) or "no changes"
        log.info(
            "%s: run %s %s in %.1fs: %s",
            self.key,
            self.record.run_id,
            state.value,
            took,
            counts,
        )
