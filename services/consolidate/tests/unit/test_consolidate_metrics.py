"""Consolidation's instruments: pass durations, changes, leases held, skipped runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from engram_consolidate.service import (
    Key,
    PassName,
    PassRunner,
    PassSettings,
    RunnerConfig,
    RunRecord,
    Stores,
    Trigger,
    pass_factory,
)
from engram_consolidate.service.passes.base import Pass
from engram_consolidate.service.runner import Start
from engram_core.model import Memory
from engram_platform.coordination import MemoryLease
from engram_testing.metrics import ServiceMetrics

if TYPE_CHECKING:
    from conftest import World

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DURATION = "engram.consolidate.pass.duration"
CHANGES = "engram.consolidate.changes"
HELD = "engram.consolidate.leases.held"
SKIPPED = "engram.consolidate.runs.skipped"


async def _stocked(world: World) -> None:
    for n in range(3):
        await world.put(
            Memory(
                id=f"00000000-0000-7000-8000-{n:012d}",
                tenant=world.tenant,
                content=f"m{n}",
                timestamp=NOW - timedelta(days=10 * n + 10),
            )
        )


def _runner(world: World, lease: MemoryLease) -> tuple[PassRunner, Callable[[Key], Pass]]:
    stores = Stores(world.vector, world.lexical, world.graph, world.log, 5.0, 2)
    runner = PassRunner(world.checkpoints, lease, "h1", RunnerConfig(), lambda: NOW)
    return runner, pass_factory(stores, PassSettings())


async def _run(world: World, key: Key, lease: MemoryLease) -> RunRecord | None:
    runner, make = _runner(world, lease)
    start = Start(f"run-{key.dry_run}", Trigger.REQUEST)
    return await runner.run(key, lambda: make(key), lambda _: start, asyncio.Event())


async def test_a_run_records_its_time_and_changes_but_a_dry_run_no_changes(
    world: World, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    await _stocked(world)
    runs = m.value(DURATION, **{"pass": "decay", "outcome": "succeeded"})
    changed = m.value(CHANGES, **{"pass": "decay", "kind": "relevance"})
    dry = await _run(world, Key(world.tenant, PassName.DECAY, dry_run=True), MemoryLease())
    assert dry is not None
    assert any(c.kind == "relevance" and c.count for c in dry.changes)  # it would change...
    assert m.value(CHANGES, **{"pass": "decay", "kind": "relevance"}) == changed  # ...not did
    done = await _run(world, Key(world.tenant, PassName.DECAY), MemoryLease())
    assert done is not None
    (made,) = [c.count for c in done.changes if c.kind == "relevance"]
    assert m.value(CHANGES, **{"pass": "decay", "kind": "relevance"}) == changed + made
    assert m.value(DURATION, **{"pass": "decay", "outcome": "succeeded"}) == runs + 2


async def test_the_lease_counts_as_held_only_while_the_run_has_it(
    world: World, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    runner, make = _runner(world, MemoryLease())
    key = Key(world.tenant, PassName.FORGET)
    before = m.value(HELD, lease="forget")
    not_due = m.value(SKIPPED, **{"pass": "forget", "reason": "not_due"})
    seen: list[float] = []

    def decide(_: RunRecord | None) -> Start | None:
        seen.append(m.value(HELD, lease="forget"))  # asked under the lease
        return None

    await runner.run(key, lambda: make(key), decide, asyncio.Event())
    assert seen == [before + 1]
    assert m.value(HELD, lease="forget") == before
    assert m.value(SKIPPED, **{"pass": "forget", "reason": "not_due"}) == not_due + 1


async def test_a_run_whose_lease_another_replica_holds_is_skipped(
    world: World, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    lease = MemoryLease()
    key = Key(world.tenant, PassName.DECAY)
    assert await lease.try_acquire(key.lease, "h2", 30.0)
    busy = m.value(SKIPPED, **{"pass": "decay", "reason": "lease_busy"})
    assert await _run(world, key, lease) is None
    assert m.value(SKIPPED, **{"pass": "decay", "reason": "lease_busy"}) == busy + 1


class _Unmoved:
    """A tenant whose applied log position never moves."""

    async def applied_mark(self, tenant: str) -> int:
        return 7

    async def written_ids(self, tenant: str, after: int, upto: int, limit: int) -> list[str]:
        return []


async def test_a_scheduled_run_over_an_unchanged_tenant_counts_as_skipped(
    world: World, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    await _stocked(world)
    stores = Stores(world.vector, world.lexical, world.graph, world.log, 5.0, 2)
    make = pass_factory(stores, PassSettings())
    runner = PassRunner(
        world.checkpoints, MemoryLease(), "h1", RunnerConfig(), lambda: NOW, marks=_Unmoved()
    )
    key = Key(world.tenant, PassName.ASSOCIATE)
    unchanged = m.value(SKIPPED, **{"pass": "associate", "reason": "unchanged"})
    for n in (1, 2):
        start = Start(f"sched-{n}", Trigger.SCHEDULE)
        await runner.run(key, lambda: make(key), lambda _, s=start: s, asyncio.Event())
    assert world.checkpoints.record(key).run_id == "sched-1"  # the second did not run
    assert m.value(SKIPPED, **{"pass": "associate", "reason": "unchanged"}) == unchanged + 1
