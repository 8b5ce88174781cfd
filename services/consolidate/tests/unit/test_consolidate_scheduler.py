"""The scheduler: due passes on their intervals, requests, dry runs, orphaned runs."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from engram_consolidate.service import (
    Key,
    PassName,
    PassRunner,
    PassSettings,
    Request,
    RunnerConfig,
    RunRecord,
    RunState,
    Schedule,
    Scheduler,
    Stores,
    Trigger,
    pass_factory,
    pass_names,
)
from engram_consolidate.service.records import GLOBAL, incremental_params, incremental_window
from engram_consolidate.service.scheduler import due
from engram_core.errors import Unavailable
from engram_core.model import Memory
from engram_platform.coordination import MemoryLease

if TYPE_CHECKING:
    from conftest import World

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DECAY_ONLY = {
    PassName.DECAY: 86_400.0,
    PassName.ASSOCIATE: 0.0,
    PassName.CLUSTER: 0.0,
    PassName.FORGET: 0.0,
}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


class Marks:
    """The tenant's applied log position: every write to the fake stores moves it (the
    world applies at once; events the passes publish count once ``apply_log`` runs)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.down = False
        self.reads: list[tuple[int, int]] = []  # the (after, upto) of each written_ids

    async def applied_mark(self, tenant: str) -> int:
        if self.down:
            raise Unavailable("log down")
        return self.world.version

    async def written_ids(self, tenant: str, after: int, upto: int, limit: int) -> list[str] | None:
        if self.down:
            raise Unavailable("log down")
        writes = [id_ for v, id_ in self.world.writes if after < v <= upto]
        self.reads.append((after, upto))
        return None if len(writes) > limit else list(dict.fromkeys(writes))


def scheduler(
    world: World,
    clock: Clock,
    *,
    max_concurrent: int = 4,
    lease: MemoryLease | None = None,
    intervals: Mapping[PassName, float] = DECAY_ONLY,
    marks: Marks | None = None,
    full_every_s: float = 0.0,
    incremental_max: int = 5_000,
) -> Scheduler:
    stores = Stores(world.vector, world.lexical, world.graph, world.log, 5.0, 2, marks=marks)
    runner = PassRunner(
        world.checkpoints,
        lease or MemoryLease(),
        "h1",
        RunnerConfig(retry_base_s=0.001, full_every_s=full_every_s),
        clock,
        marks=marks,
    )
    ids = (f"sched-{n}" for n in itertools.count(1))
    return Scheduler(
        runner,
        pass_factory(stores, PassSettings(associate_incremental_max=incremental_max)),
        world.checkpoints,
        world.tenants(),
        Schedule(tick_s=60, intervals=intervals, max_concurrent=max_concurrent),
        clock,
        lambda: next(ids),
    )


async def tick(s: Scheduler) -> None:
    await s.tick(asyncio.Event())
    await s.drain()


async def stocked(world: World) -> None:
    for n in range(3):
        await world.put(
            Memory(
                id=f"00000000-0000-7000-8000-{n:012d}",
                tenant=world.tenant,
                content=f"m{n}",
                timestamp=NOW - timedelta(days=10 * n),
            )
        )


def test_due() -> None:
    key = Key("t", PassName.DECAY)
    done = RunRecord(key, "r", RunState.SUCCEEDED, finished_at=NOW)
    failed = replace(done, state=RunState.FAILED)
    assert due(None, 3600, 600, NOW)
    assert not due(None, 0, 600, NOW)  # off
    assert not due(done, 3600, 600, NOW + timedelta(seconds=3599))
    assert due(done, 3600, 600, NOW + timedelta(seconds=3600))
    assert due(failed, 3600, 600, NOW + timedelta(seconds=600))
    # A run skipped half an hour later (the tenant unchanged): the interval counts from it.
    checked = replace(done, checked_at=NOW + timedelta(seconds=1800))
    assert not due(checked, 3600, 600, NOW + timedelta(seconds=5399))
    assert due(checked, 3600, 600, NOW + timedelta(seconds=5400))


async def test_a_tick_runs_due_passes_once_per_interval(world: World) -> None:
    await stocked(world)
    clock = Clock()
    s = scheduler(world, clock)

    await tick(s)
    key = Key(world.tenant, PassName.DECAY)
    first = world.checkpoints.record(key)
    assert (first.state, first.trigger, first.run_id) == (
        RunState.SUCCEEDED,
        Trigger.SCHEDULE,
        "sched-1",
    )
    assert {k.pass_name for k in world.checkpoints.records} == {PassName.DECAY}  # others off

    clock.now = NOW + timedelta(hours=23)
    await tick(s)
    assert world.checkpoints.record(key).run_id == "sched-1"  # not due yet

    clock.now = NOW + timedelta(days=1, minutes=1)
    await tick(s)
    assert world.checkpoints.record(key).run_id != "sched-1"


HOURLY_ASSOCIATE = {**DECAY_ONLY, PassName.DECAY: 0.0, PassName.ASSOCIATE: 3600.0}


async def test_a_scheduled_associate_run_over_an_unchanged_tenant_is_skipped(
    world: World,
) -> None:
    await stocked(world)  # three memories with one vector: SIMILAR_TO edges to propose
    clock = Clock()
    s = scheduler(world, clock, intervals=HOURLY_ASSOCIATE, marks=Marks(world))
    key = Key(world.tenant, PassName.ASSOCIATE)

    await tick(s)
    first = world.checkpoints.record(key)
    assert (first.run_id, first.state, first.input_mark) == ("sched-1", RunState.SUCCEEDED, 3)
    assert world.log.of("relation_added")
    await world.apply_log()  # ingest applies the edges: the tenant moved

    clock.now = NOW + timedelta(hours=1)
    await tick(s)  # changed since sched-1 began: it runs, and finds nothing to write
    second = world.checkpoints.record(key)
    assert (second.run_id, second.input_mark) == ("sched-2", world.version)
    assert not {c.kind for c in second.changes} & {"similar_to_created", "preceded_by_created"}

    scans = len(world.vector.scans)
    clock.now = NOW + timedelta(hours=2)
    await tick(s)  # unchanged since sched-2 began: skipped, nothing read
    skipped = world.checkpoints.record(key)
    assert len(world.vector.scans) == scans
    assert skipped == replace(second, checked_at=clock.now)
    assert s.finished[-1].run_id == "sched-2"

    clock.now = NOW + timedelta(hours=2, minutes=59)
    await tick(s)  # the interval counts from the check
    assert world.checkpoints.record(key).checked_at == NOW + timedelta(hours=2)

    await world.put(
        Memory(id="00000000-0000-7000-8000-000000000009", tenant=world.tenant, content="new")
    )
    clock.now = NOW + timedelta(hours=3)
    await tick(s)  # a new memory: the run is due and runs
    third = world.checkpoints.record(key)
    assert (third.state, third.checked_at) == (RunState.SUCCEEDED, None)
    assert third.run_id not in {"sched-1", "sched-2"}
    assert len(world.vector.scans) > scans


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "{}",
        '{"after": 0, "upto": 3}',
        '{"after": 5, "upto": 4}',
        '{"after": "x", "upto": 4}',
        "[1, 2]",
        "not json",
    ],
)
def test_params_that_are_not_an_incremental_window(bad: str) -> None:
    assert incremental_window(bad) is None


def test_an_incremental_window_round_trips() -> None:
    assert incremental_window(incremental_params(41, 97)) == (41, 97)


def _memory(n: int) -> Memory:
    return Memory(id=f"00000000-0000-7000-8000-{n:012d}", tenant="t1", content=f"m{n}")


async def test_between_full_runs_a_scheduled_associate_reads_only_what_was_written(
    world: World,
) -> None:
    await stocked(world)
    clock = Clock()
    marks = Marks(world)
    s = scheduler(world, clock, intervals=HOURLY_ASSOCIATE, marks=marks, full_every_s=86_400.0)
    key = Key(world.tenant, PassName.ASSOCIATE)
    await tick(s)
    await world.apply_log()
    full = world.checkpoints.record(key)
    assert (full.params, full.full_at) == ("", NOW)  # the first run after a start is full
    assert sorted(q for qs in world.vector.neighbour_queries for q in qs) == [
        _memory(n).id for n in range(3)
    ]

    await world.put(_memory(7))
    world.vector.neighbour_queries.clear()
    scans = len(world.vector.scans)
    clock.now = NOW + timedelta(hours=1)
    await tick(s)
    step = world.checkpoints.record(key)
    assert len(world.vector.scans) == scans  # 7 is in no session: no sequence index read
    assert step.state is RunState.SUCCEEDED
    # From where the last run began: the edges it wrote are after that too.
    assert json.loads(step.params) == {"after": full.input_mark, "upto": world.version}
    assert step.full_at == NOW  # carried on from the full run
    assert world.vector.neighbour_queries == [[_memory(7).id]]  # the new memory alone
    assert marks.reads == [(full.input_mark, world.version)]
    created = {c.kind: c.sample for c in step.changes}["similar_to_created"]
    assert all(_memory(7).id in edge for edge in created)

    await world.apply_log()
    await world.put(_memory(8))
    clock.now = NOW + timedelta(days=1, minutes=1)  # the last full run is a day old
    await tick(s)
    again = world.checkpoints.record(key)
    assert (again.params, again.full_at) == ("", clock.now)
    assert len(world.vector.neighbour_queries) > 1


async def test_more_writes_than_incremental_max_make_a_full_run(world: World) -> None:
    await stocked(world)
    clock = Clock()
    s = scheduler(
        world,
        clock,
        intervals=HOURLY_ASSOCIATE,
        marks=Marks(world),
        full_every_s=86_400.0,
        incremental_max=1,
    )
    key = Key(world.tenant, PassName.ASSOCIATE)
    await tick(s)
    await world.apply_log()
    await world.put(_memory(7))
    await world.put(_memory(8))
    world.vector.neighbour_queries.clear()
    clock.now = NOW + timedelta(hours=1)
    await tick(s)
    ran = world.checkpoints.record(key)
    assert (ran.state, ran.params) == (RunState.SUCCEEDED, "")  # it said it went full
    asked = sorted(q for qs in world.vector.neighbour_queries for q in qs)
    assert asked == sorted([*(_memory(n).id for n in range(3)), _memory(7).id, _memory(8).id])


async def test_the_first_run_after_the_worker_starts_is_never_skipped(world: World) -> None:
    await stocked(world)
    clock = Clock()
    marks = Marks(world)
    s = scheduler(world, clock, intervals=HOURLY_ASSOCIATE, marks=marks)
    key = Key(world.tenant, PassName.ASSOCIATE)
    await tick(s)
    await world.apply_log()
    clock.now = NOW + timedelta(hours=1)
    await tick(s)
    clock.now = NOW + timedelta(hours=2)
    await tick(s)
    skipped = world.checkpoints.record(key)
    assert skipped.checked_at == clock.now

    # A new worker process (other settings, say) on the same records: it runs once, ...
    restarted = scheduler(world, clock, intervals=HOURLY_ASSOCIATE, marks=marks)
    clock.now = NOW + timedelta(hours=3)
    await tick(restarted)
    ran = world.checkpoints.record(key)
    assert (ran.checked_at, ran.input_mark) == (None, world.version)
    assert ran.run_id != skipped.run_id
    clock.now = NOW + timedelta(hours=4)
    await tick(restarted)  # ... then skips like the one before it
    assert world.checkpoints.record(key) == replace(ran, checked_at=clock.now)


async def test_a_vector_rebuild_or_a_sync_since_the_last_run_is_a_change(world: World) -> None:
    await stocked(world)
    clock = Clock()
    s = scheduler(world, clock, intervals=HOURLY_ASSOCIATE, marks=Marks(world))
    key = Key(world.tenant, PassName.ASSOCIATE)
    await tick(s)
    await world.apply_log()
    clock.now = NOW + timedelta(hours=1)
    await tick(s)  # reads the tenant as it now is
    last = world.checkpoints.record(key)
    assert last.started_at == clock.now

    # A rebuild onto another model writes no event, but every neighbour may have moved.
    rebuilt = RunRecord(
        Key(GLOBAL, PassName.REBUILD_VECTOR),
        "rb",
        RunState.SUCCEEDED,
        finished_at=clock.now + timedelta(minutes=30),
    )
    await world.checkpoints.put(rebuilt, None)
    clock.now = NOW + timedelta(hours=2)
    await tick(s)
    after_rebuild = world.checkpoints.record(key)
    assert after_rebuild.run_id != last.run_id
    assert after_rebuild.checked_at is None

    clock.now = NOW + timedelta(hours=3)
    await tick(s)  # nothing since that run began: skipped
    assert world.checkpoints.record(key).checked_at == clock.now

    synced = RunRecord(
        Key(world.tenant, PassName.SYNC_GRAPH),
        "sy",
        RunState.SUCCEEDED,
        finished_at=clock.now + timedelta(minutes=1),
    )
    await world.checkpoints.put(synced, None)
    clock.now = NOW + timedelta(hours=4)
    await tick(s)  # a repair of the graph's edges since: it runs
    assert world.checkpoints.record(key).run_id != after_rebuild.run_id


async def test_requested_runs_decay_and_an_unknown_position_are_never_skipped(
    world: World,
) -> None:
    await stocked(world)
    clock = Clock()
    marks = Marks(world)
    hourly = {**HOURLY_ASSOCIATE, PassName.DECAY: 3600.0}
    s = scheduler(world, clock, intervals=hourly, marks=marks)
    associate, decay = Key(world.tenant, PassName.ASSOCIATE), Key(world.tenant, PassName.DECAY)
    await tick(s)
    await world.apply_log()
    clock.now = NOW + timedelta(hours=1)
    await tick(s)  # both run again and read the tenant as it now is
    assert world.checkpoints.record(associate).input_mark == world.version
    assert world.checkpoints.record(decay).input_mark == 0  # decay ages with the clock
    decayed = world.checkpoints.record(decay).run_id

    await s.request(Request(world.tenant, "asked", (PassName.ASSOCIATE,), False, clock.now))
    await tick(s)  # an operator asked: it runs though nothing changed
    assert world.checkpoints.record(associate).run_id == "asked"

    clock.now = NOW + timedelta(hours=2, minutes=1)
    marks.down = True  # the position cannot be read: run rather than guess
    await tick(s)
    ran = world.checkpoints.record(associate)
    assert (ran.trigger, ran.input_mark, ran.checked_at) == (Trigger.SCHEDULE, 0, None)
    assert world.checkpoints.record(decay).run_id != decayed  # decay is never skipped
    marks.down = False
    clock.now = NOW + timedelta(hours=3, minutes=2)
    await tick(s)  # the last run's position was unknown: this one runs too
    last = world.checkpoints.record(associate)
    assert last.run_id != ran.run_id
    decayed = world.checkpoints.record(decay).run_id
    clock.now = NOW + timedelta(hours=4, minutes=3)
    await tick(s)  # nothing changed: associate is skipped, decay runs all the same
    assert world.checkpoints.record(associate) == replace(last, checked_at=clock.now)
    assert world.checkpoints.record(decay).run_id != decayed


async def test_a_request_runs_its_passes_with_its_run_id_once(world: World) -> None:
    await stocked(world)
    s = scheduler(world, Clock())
    request = Request(world.tenant, "req-1", (PassName.ASSOCIATE, PassName.FORGET), False, NOW)

    await s.request(request)
    pending = world.checkpoints.record(Key(world.tenant, PassName.ASSOCIATE))
    assert pending.pending_run_id == "req-1"
    assert pending.state is RunState.NEVER

    await tick(s)
    for name in (PassName.ASSOCIATE, PassName.FORGET):
        done = world.checkpoints.record(Key(world.tenant, name))
        assert (done.run_id, done.state, done.trigger, done.pending_run_id) == (
            "req-1",
            RunState.SUCCEEDED,
            Trigger.REQUEST,
            "",
        )
    # The log redelivers the request: it is recognised and nothing runs again.
    await s.request(request)
    assert not world.checkpoints.record(Key(world.tenant, PassName.ASSOCIATE)).pending_run_id


async def test_a_dry_run_request_leaves_the_real_records_alone(world: World) -> None:
    await stocked(world)
    s = scheduler(world, Clock())

    await s.request(Request(world.tenant, "dry-1", (PassName.DECAY,), True, NOW))
    await tick(s)

    dry = world.checkpoints.record(Key(world.tenant, PassName.DECAY, dry_run=True))
    assert (dry.run_id, dry.state) == ("dry-1", RunState.SUCCEEDED)
    assert {c.kind: c.count for c in dry.changes} == {"relevance": 3}
    real = world.checkpoints.record(Key(world.tenant, PassName.DECAY))
    assert real.run_id == "sched-1"  # decay's own schedule, not the dry run


async def test_a_request_during_a_run_waits_for_it(world: World) -> None:
    await stocked(world)
    key = Key(world.tenant, PassName.DECAY)
    lease = MemoryLease()
    await lease.try_acquire(key.lease, "another-replica", 30)
    running = RunRecord(key, "theirs", RunState.RUNNING, now=NOW, started_at=NOW, holder="x")
    await world.checkpoints.put(running, None)
    s = scheduler(world, Clock(), lease=lease)

    await s.request(Request(world.tenant, "mine", (PassName.DECAY,), False, NOW))
    await tick(s)  # the lease is held elsewhere: nothing runs here
    record = world.checkpoints.record(key)
    assert (record.run_id, record.state, record.pending_run_id) == (
        "theirs",
        RunState.RUNNING,
        "mine",
    )

    await lease.release(key.lease, "another-replica")  # its holder died
    await tick(s)  # first the orphaned run is resumed and finished ...
    record = world.checkpoints.record(key)
    assert (record.run_id, record.state, record.resumes) == ("theirs", RunState.SUCCEEDED, 1)
    assert record.pending_run_id == "mine"
    await tick(s)  # ... then the request runs
    assert world.checkpoints.record(key).run_id == "mine"


async def test_at_most_max_concurrent_runs_start_per_replica(world: World) -> None:
    await stocked(world)
    s = scheduler(world, Clock(), max_concurrent=1, intervals=dict.fromkeys(PassName, 1.0))
    stop = asyncio.Event()
    await s.tick(stop)
    assert len(s.running) == 1  # every pass is due; one runs
    await s.request(Request(world.tenant, "r", tuple(PassName), False, NOW))
    await s.tick(stop)
    assert len(s.running) == 2  # requests take one slot more, and no more than that
    await s.drain()


async def test_a_request_starts_beside_the_runs_a_restarted_worker_resumes(
    world: World,
) -> None:
    await stocked(world)
    for tenant in ("t2", "t3"):  # runs a stopped worker left RUNNING (their leases are free)
        key = Key(tenant, PassName.DECAY)
        orphan = RunRecord(key, f"old-{tenant}", RunState.RUNNING, now=NOW, started_at=NOW)
        await world.checkpoints.put(orphan, None)
    s = scheduler(world, Clock(), max_concurrent=1)
    stop = asyncio.Event()
    await s.tick(stop)
    [resumed] = s.running  # the one slot is taken
    await s.request(Request(world.tenant, "dry", (PassName.DECAY,), True, NOW))

    await s.tick(stop)
    # The request does not queue behind the resumed run, nor behind the other orphan.
    assert s.running == {resumed, Key(world.tenant, PassName.DECAY, dry_run=True)}
    await s.drain()


async def test_the_run_loop_wakes_up_for_a_request(world: World) -> None:
    await stocked(world)
    s = scheduler(world, Clock())
    stop = asyncio.Event()
    loop = asyncio.create_task(s.run(stop))
    try:
        await asyncio.sleep(0.05)
        await s.request(Request(world.tenant, "now", (PassName.CLUSTER,), False, NOW))
        for _ in range(100):
            got = await world.checkpoints.get(Key(world.tenant, PassName.CLUSTER))
            if got and got[0].state is RunState.SUCCEEDED:
                break
            await asyncio.sleep(0.02)
        assert got is not None
        assert got[0].run_id == "now"
    finally:
        stop.set()
        await asyncio.wait_for(loop, 5)


def test_pass_names_keep_run_order_and_refuse_unknown_ones() -> None:
    assert pass_names(["forget", "decay", "decay"]) == (PassName.DECAY, PassName.FORGET)
    with pytest.raises(ValueError, match="sleep"):
        pass_names(["sleep"])
