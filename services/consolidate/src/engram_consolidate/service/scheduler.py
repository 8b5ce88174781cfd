"""When passes run: on the worker's own schedule, on request, and to finish a run whose
holder died.

Every ``tick_s`` (and at once after a request or a finished run) the scheduler visits
every known tenant — the tenants of the log, plus those with a record — in random order
(so replicas do not all queue on the same leases), and for each pass:

1. a record left RUNNING and not running here → resume it (if its lease is free, i.e.
   its holder died or stopped);
2. a request waiting (``pending_run_id``) → start it;
3. otherwise, if the pass has an interval (0 = off) and its last run finished at least
   that long ago (a failed one: ``failure_retry_s``), or it never ran → start a new run —
   unless the pass reads only memories and relations (associate, cluster) and the tenant
   is where the last successful run found it (the runner checks, under the lease): then
   the record notes the check and the interval counts from it.

Dry runs have records of their own (``Key.dry_run``) and only run on request. At most
``max_concurrent`` runs at a time per replica; what does not fit waits for a later tick.
Requests are visited first and may take one slot more: an operator's run (or dry run)
starts at once rather than queueing behind the background passes a restarted worker
resumes.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engram_consolidate.service.passes.base import Pass
from engram_consolidate.service.ports import Checkpoints, FenceLost, TenantSource
from engram_consolidate.service.records import (
    Key,
    PassName,
    RunRecord,
    RunState,
    Trigger,
    passes_of,
    record_tenant,
)
from engram_consolidate.service.runner import PassRunner, Start
from engram_core.errors import Unavailable

log = logging.getLogger(__name__)

_REQUEST_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Schedule:
    tick_s: float = 60.0
    intervals: Mapping[PassName, float] = field(
        default_factory=lambda: {
            PassName.DECAY: 86_400.0,
            PassName.ASSOCIATE: 3_600.0,
            PassName.CLUSTER: 604_800.0,
            PassName.FORGET: 0.0,
        }
    )
    failure_retry_s: float = 600.0
    max_concurrent: int = 2


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded ConsolidateRequested event."""

    tenant: str
    run_id: str
    passes: tuple[PassName, ...]
    dry_run: bool
    at: datetime
    params: str = ""  # JSON for the passes that take parameters (rebuild: embedding_model)


def due(record: RunRecord | None, interval_s: float, failure_retry_s: float, now: datetime) -> bool:
    """Whether a scheduled run of a pass with ``interval_s`` (0 = off) is due at ``now``."""
    if interval_s <= 0:
        return False
    last = None if record is None or record.state is RunState.NEVER else record.last_active
    if record is None or last is None:
        return True
    wait = failure_retry_s if record.state is RunState.FAILED else interval_s
    return last + timedelta(seconds=wait) <= now


class Scheduler:
    def __init__(
        self,
        runner: PassRunner,
        make: Callable[[Key], Pass],
        checkpoints: Checkpoints,
        tenants: TenantSource,
        schedule: Schedule,
        clock: Callable[[], datetime],
        new_id: Callable[[], str],
    ) -> None:
        self._runner = runner
        self._make = make
        self._checkpoints = checkpoints
        self._tenants = tenants
        self._schedule = schedule
        self._clock = clock
        self._new_id = new_id
        self._tasks: dict[Key, asyncio.Task[RunRecord | None]] = {}
        self._wake = asyncio.Event()
        self.finished: list[RunRecord] = []  # runs that ended here, newest last (bounded)

    @property
    def running(self) -> frozenset[Key]:
        return frozenset(self._tasks)

    def kick(self) -> None:
        """Visit the tenants now rather than at the next tick."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until ``stop``; then let running passes stop at their next step."""
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    await self.tick(stop)
                except Exception:
                    log.exception("consolidation tick failed; trying again next tick")
                waits = [asyncio.ensure_future(e.wait()) for e in (self._wake, stop)]
                try:
                    await asyncio.wait(
                        waits, timeout=self._schedule.tick_s, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    for w in waits:
                        w.cancel()
        finally:
            await self.drain()

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def tick(self, stop: asyncio.Event) -> None:
        if len(self._tasks) > self._schedule.max_concurrent:
            return  # every slot is taken, the request's too: reading the records is waste
        keys = await self._checkpoints.keys()
        tenants = set(await self._tenants.tenants()) | {k.tenant for k in keys}
        order = list(tenants)
        random.shuffle(order)
        records: dict[Key, RunRecord | None] = {}
        for key in self._candidates(order, keys):
            got = await self._checkpoints.get(key)
            records[key] = got[0] if got is not None else None
        requested = [k for k, r in records.items() if r is not None and r.pending_run_id]
        self._start_while(requested, records, self._schedule.max_concurrent + 1, stop)
        self._start_while(list(records), records, self._schedule.max_concurrent, stop)

    def _candidates(self, tenants: Iterable[str], keys: Iterable[Key]) -> Iterable[Key]:
        """Every pass of every tenant, and the dry runs that have a record."""
        known = set(keys)
        for tenant in tenants:
            for name in passes_of(tenant):
                for dry in (False, True):
                    key = Key(tenant, name, dry)
                    if key not in self._tasks and (not dry or key in known):
                        yield key

    def _start_while(
        self,
        keys: list[Key],
        records: Mapping[Key, RunRecord | None],
        cap: int,
        stop: asyncio.Event,
    ) -> None:
        for key in keys:
            if len(self._tasks) >= cap or stop.is_set():
                return
            if key not in self._tasks and self._wanted(key, records[key]):
                self._start(key, stop)

    def _wanted(self, key: Key, record: RunRecord | None) -> bool:
        running = record is not None and record.state is RunState.RUNNING
        return running or self._trigger(key, record) is not None

    def _trigger(self, key: Key, record: RunRecord | None) -> Trigger | None:
        if record is not None and record.pending_run_id:
            return Trigger.REQUEST
        if key.dry_run:
            return None
        interval = self._schedule.intervals.get(key.pass_name, 0.0)
        if due(record, interval, self._schedule.failure_retry_s, self._clock()):
            return Trigger.SCHEDULE
        return None

    def _decide(self, key: Key, record: RunRecord | None) -> Start | None:
        trigger = self._trigger(key, record)
        if trigger is None:
            return None
        if trigger is Trigger.REQUEST and record is not None:
            return Start(record.pending_run_id, trigger)
        return Start(self._new_id(), trigger)

    def _start(self, key: Key, stop: asyncio.Event) -> None:
        task = asyncio.create_task(
            self._runner.run(
                key, lambda: self._make(key), lambda record: self._decide(key, record), stop
            ),
            name=f"consolidate {key}",
        )
        self._tasks[key] = task
        task.add_done_callback(lambda t: self._done(key, t))

    def _done(self, key: Key, task: asyncio.Task[RunRecord | None]) -> None:
        self._tasks.pop(key, None)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("%s: run ended with %s: %s", key, type(exc).__name__, exc)
        elif (record := task.result()) is not None:
            self.finished = [*self.finished[-99:], record]
            self.kick()  # a request may have waited for this run

    async def request(self, request: Request) -> None:
        """Record the request on each pass's record; the next visit starts it. A
        redelivered request (its run id already recorded) changes nothing."""
        for name in request.passes:
            tenant = record_tenant(request.tenant, name)
            await self._pend(Key(tenant, name, request.dry_run), request)
        self.kick()

    async def _pend(self, key: Key, request: Request) -> None:
        for _ in range(_REQUEST_ATTEMPTS):
            got = await self._checkpoints.get(key)
            record, revision = got if got is not None else (RunRecord(key), None)
            if request.run_id in (record.run_id, record.pending_run_id):
                return
            try:
                await self._checkpoints.put(
                    record.with_pending(request.run_id, request.at, request.params), revision
                )
                return
            except FenceLost:
                continue  # a runner wrote in between: read again
        raise Unavailable(f"{key}: could not record request {request.run_id}")


def pass_names(values: Iterable[str]) -> tuple[PassName, ...]:
    """Pass names in run order, without repeats; ValueError names an unknown one."""
    wanted = {PassName(v) for v in values}
    return tuple(p for p in PassName if p in wanted)
