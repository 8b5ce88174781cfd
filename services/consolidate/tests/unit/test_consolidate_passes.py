"""The passes over the engram_testing store fakes, run by the real runner: what each writes,
dry runs, checkpoints and resume, the lease and the fence."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from engram_consolidate.service import (
    FenceLost,
    Key,
    PassName,
    PassRunner,
    PassSettings,
    RunnerConfig,
    RunState,
    Stores,
    Trigger,
    pass_factory,
)
from engram_consolidate.service.passes.base import Run
from engram_consolidate.service.records import Tally
from engram_consolidate.service.runner import Start
from engram_core import relevance
from engram_core.associations import AssociationSettings, edge_key
from engram_core.forgetting import ForgetSettings
from engram_core.model import Memory, Relation
from engram_core.relevance import DecaySettings
from engram_platform.coordination import MemoryLease

if TYPE_CHECKING:
    from conftest import World

TENANT = "t1"  # the world's
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def mid(n: int) -> str:
    """Memory ids that sort like UUIDv7 by n."""
    return f"00000000-0000-7000-8000-{n:012d}"


def memory(n: int, days_old: float, **kw: Any) -> Memory:
    at = NOW - timedelta(days=days_old)
    return Memory(
        id=mid(n), tenant=TENANT, content=f"memory {n}", timestamp=at, updated_at=at, **kw
    )


def runner(world: World, lease: MemoryLease | None = None, holder: str = "h1") -> PassRunner:
    return world.checkpoints.runner(NOW, lease, holder)


async def run_pass(
    world: World,
    name: PassName,
    *,
    dry: bool = False,
    run_id: str = "run-1",
    page_size: int = 2,
    settings: PassSettings | None = None,
    using: PassRunner | None = None,
) -> Any:
    stores = Stores(world.vector, world.lexical, world.graph, world.log, 5.0, page_size)
    make = pass_factory(stores, settings or PassSettings())
    key = Key(TENANT, name, dry)
    return await (using or runner(world)).run(
        key, lambda: make(key), lambda _: Start(run_id, Trigger.REQUEST), asyncio.Event()
    )


async def ages(world: World) -> list[Memory]:
    """Five memories 1, 30, 100, 365 and 1000 days old, and a steady one whose stored
    score is already the fresh one."""
    out = [memory(n, d) for n, d in enumerate((1, 30, 100, 365, 1000), start=1)]
    steady = memory(6, 50)
    steady = replace(steady, relevance_score=relevance.relevance_score(steady, 0, NOW))
    for m in [*out, steady]:
        await world.put(m)
    return [*out, steady]


# --- decay ---------------------------------------------------------------------------------


async def test_a_phase_that_outgrows_its_count_reports_what_it_did(world: World) -> None:
    await ages(world)  # six memories, counted when the phase begins ...
    real_count = world.vector.count

    async def counted_early(tenant: str) -> int:
        return int(await real_count(tenant)) - 2  # ... before ingest applied the last two

    world.vector.count = counted_early
    record = await run_pass(world, PassName.DECAY)
    assert (record.done, record.total) == (6, 6)  # not 6 of 4


async def test_decay_writes_only_changed_scores_to_all_three_stores(world: World) -> None:
    memories = await ages(world)
    await world.relate(Relation(mid(1), mid(2), "RELATES_TO"))

    record = await run_pass(world, PassName.DECAY)

    assert record.state is RunState.SUCCEEDED
    expected = {
        m.id: relevance.relevance_score(m, 1 if m.id in (mid(1), mid(2)) else 0, NOW)
        for m in memories[:5]
    }
    for store in world.stores():
        assert store.written == pytest.approx(expected), store
    stored = [(await world.memory(mid(n))).relevance_score for n in range(1, 6)]
    assert stored == sorted(stored, reverse=True)  # older → lower
    assert stored[0] > stored[-1]
    assert mid(6) not in world.vector.written  # unchanged: not rewritten
    assert {c.kind: c.count for c in record.changes} == {"relevance": 5}
    assert record.done == 6
    assert record.total == 6
    assert not world.log.events  # derived data does not go through the log


async def test_decay_dry_run_writes_nothing_and_reports(world: World) -> None:
    await ages(world)

    record = await run_pass(world, PassName.DECAY, dry=True)

    assert record.state is RunState.SUCCEEDED
    assert record.key.dry_run
    assert all(not store.relevance for store in world.stores())
    [change] = record.changes
    assert (change.kind, change.count) == ("relevance", 5)
    assert change.sample == tuple(mid(n) for n in range(1, 6))
    assert (await world.memory(mid(1))).relevance_score == 0.0
    # The real run's record is untouched by a dry run.
    assert Key(TENANT, PassName.DECAY) not in world.checkpoints.records


async def test_decay_resumes_from_its_checkpoint_after_a_crash(world: World) -> None:
    await ages(world)  # 6 memories, pages of 2
    # Puts: start, total, page 1, page 2 — then the process dies writing page 3's.
    world.checkpoints.crash_after = 4
    with pytest.raises(BaseException, match="the process died"):
        await run_pass(world, PassName.DECAY, run_id="r-crash")
    key = Key(TENANT, PassName.DECAY)
    left = world.checkpoints.record(key)
    assert left.state is RunState.RUNNING
    assert (left.done, left.cursor) == (4, mid(4))
    written_before = [u.id for batch in world.vector.relevance for u in batch]
    assert written_before == [mid(1), mid(2), mid(3), mid(4), mid(5)]  # page 3 got through

    world.checkpoints.crash_after = None
    scans_before = len(world.vector.scans)
    # Another replica (its own lease table: the dead holder's lease is gone).
    record = await run_pass(world, PassName.DECAY, using=runner(world, holder="h2"))

    assert record.state is RunState.SUCCEEDED
    assert record.run_id == "r-crash"  # the same run, resumed
    assert record.resumes == 1
    assert record.now == NOW
    assert world.vector.scans[scans_before:] == [mid(4)]  # pages 1-2 were not read again
    # Page 3 was redone: its scores were already written, so nothing was written again.
    assert [u.id for batch in world.vector.relevance for u in batch] == written_before
    assert record.done == 6


async def test_a_store_down_redoes_the_page_from_the_checkpoint(world: World) -> None:
    await ages(world)
    world.vector.fail_scan_at = 1  # the second page's scan

    record = await run_pass(world, PassName.DECAY)

    assert record.state is RunState.SUCCEEDED
    assert world.vector.scans == [None, mid(2), mid(2), mid(4)]
    assert {c.kind: c.count for c in record.changes} == {"relevance": 5}


async def test_a_failing_run_is_marked_failed(world: World) -> None:
    await ages(world)
    world.graph._store.failure = RuntimeError("bug")

    record = await run_pass(world, PassName.DECAY)

    assert record.state is RunState.FAILED
    assert "bug" in record.error
    assert record.finished_at == NOW


# --- lease and fence -----------------------------------------------------------------------


async def test_the_lease_stops_a_second_runner(world: World) -> None:
    await ages(world)
    lease = MemoryLease()
    key = Key(TENANT, PassName.DECAY)
    assert await lease.try_acquire(key.lease, "other-replica", 30.0)

    record = await run_pass(world, PassName.DECAY, using=runner(world, lease, holder="me"))

    assert record is None
    assert not world.checkpoints.records
    assert all(not store.relevance for store in world.stores())
    assert await lease.holder(key.lease) == "other-replica"


async def test_a_lost_lease_stops_the_run_before_its_next_page(world: World) -> None:
    await ages(world)

    class Losing(MemoryLease):
        async def renew(self, name: str, holder: str, ttl_s: float) -> bool:
            return False

    lease = Losing()
    slow = runner(world, lease)
    slow._config = RunnerConfig(lease_ttl_s=0.03, step_pause_s=0.05, samples=10)

    record = await run_pass(world, PassName.DECAY, using=slow)

    assert record is None  # stopped: another holder will resume it
    left = world.checkpoints.record(Key(TENANT, PassName.DECAY))
    assert left.state is RunState.RUNNING
    assert 0 < left.done < 6


async def test_a_pass_pauses_by_its_duty_after_each_page(world: World) -> None:
    await ages(world)  # six memories: three pages of two
    now = 0.0
    pauses: list[float] = []

    def monotonic() -> float:
        nonlocal now
        now += 0.5  # every reading of the clock is half a second of work
        return now

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    config = RunnerConfig(lease_ttl_s=30.0, retry_base_s=0.001, duty=0.25)
    paced = PassRunner(
        world.checkpoints, MemoryLease(), "h1", config, lambda: NOW, sleep, monotonic
    )

    record = await run_pass(world, PassName.DECAY, using=paced)

    assert record.state is RunState.SUCCEEDED
    # Each page between two readings took 0.5 s: at a duty of 1/4 it rests three times that;
    # no pause after the last page.
    assert pauses == [pytest.approx(1.5)] * 2


async def test_a_stop_cuts_a_pause_short(world: World) -> None:
    await ages(world)
    stop = asyncio.Event()

    async def sleep(seconds: float) -> None:
        stop.set()  # the worker is asked to stop while the pass rests after its first page
        await asyncio.sleep(3600)

    config = RunnerConfig(lease_ttl_s=30.0, duty=0.001)
    paced = PassRunner(world.checkpoints, MemoryLease(), "h1", config, lambda: NOW, sleep)
    stores = Stores(world.vector, world.lexical, world.graph, world.log, 5.0, 2)
    make = pass_factory(stores, PassSettings())
    key = Key(TENANT, PassName.DECAY)
    decide = lambda _: Start("run-1", Trigger.REQUEST)  # noqa: E731

    record = await asyncio.wait_for(paced.run(key, lambda: make(key), decide, stop), 5)

    assert record is None  # stopped: the run resumes from its checkpoint
    assert world.checkpoints.record(key).done == 2


async def test_a_checkpoint_written_by_another_holder_fences_this_one(world: World) -> None:
    await ages(world)
    key = Key(TENANT, PassName.DECAY)
    real_put = world.checkpoints.put
    puts = 0

    async def stolen(record: Any, revision: int | None) -> int:
        nonlocal puts
        puts += 1
        if puts == 3:  # someone else took over the run meanwhile
            await real_put(replace(record, holder="thief"), revision)
            raise FenceLost("moved")
        return await real_put(record, revision)

    world.checkpoints.put = stolen  # type: ignore[method-assign]

    assert await run_pass(world, PassName.DECAY) is None
    assert world.checkpoints.record(key).holder == "thief"


# --- associate -----------------------------------------------------------------------------


async def associations_world(world: World) -> None:
    """1 and 2 near-identical, 3 near 1 but 1–3 is a user's edge; 4, 5 a session."""
    await world.put(memory(1, 10), (1.0, 0.0, 0.0, 0.0))
    await world.put(memory(2, 10), (0.99, 0.05, 0.0, 0.0))
    await world.put(memory(3, 10), (0.98, 0.0, 0.1, 0.0))
    await world.put(memory(4, 10, tags=("session:s1",)), (0.0, 1.0, 0.0, 0.0))
    at = NOW - timedelta(days=10) + timedelta(hours=1)
    await world.put(
        replace(memory(5, 10, tags=("session:s1",)), timestamp=at), (0.0, 0.0, 1.0, 0.0)
    )
    await world.relate(
        Relation(mid(1), mid(3), "SIMILAR_TO", strength=0.2, origin="user"),
    )


async def test_associate_links_similar_and_sequential_memories_never_over_a_user_edge(
    world: World,
) -> None:
    await associations_world(world)

    record = await run_pass(world, PassName.ASSOCIATE)

    assert record.state is RunState.SUCCEEDED
    edges = {
        (r.source_id, r.target_id, r.type): r
        for r in (e.payload for e in world.log.of("relation_added"))
    }
    assert set(edges) == {
        (mid(1), mid(2), "SIMILAR_TO"),
        (mid(2), mid(3), "SIMILAR_TO"),
        (mid(5), mid(4), "PRECEDED_BY"),
    }
    assert all(r.origin == "system" for r in edges.values())
    counts = {c.kind: c.count for c in record.changes}
    assert counts["similar_to_created"] == 2
    assert counts["preceded_by_created"] == 1
    assert counts["user_edge_kept"] == 1  # 1–3: proposed from 1 and from 3, counted once
    kept = next(c for c in record.changes if c.kind == "user_edge_kept")
    assert kept.sample == (f"{mid(1)}>{mid(3)}",)


async def test_associate_again_writes_nothing_once_its_edges_are_in(world: World) -> None:
    await associations_world(world)
    await run_pass(world, PassName.ASSOCIATE, run_id="first")
    await world.apply_log()

    record = await run_pass(world, PassName.ASSOCIATE, run_id="second")

    assert not world.log.events
    assert not any(c.kind.endswith(("_created", "_updated")) for c in record.changes)
    edges = await world.graph.relations(TENANT, [mid(1)])
    user = [r for r in edges if r.target_id == mid(3)]
    assert [(r.origin, r.strength) for r in user] == [("user", 0.2)]


async def test_associate_removes_system_edges_its_rules_no_longer_propose(world: World) -> None:
    await associations_world(world)
    await run_pass(world, PassName.ASSOCIATE, run_id="first")
    await world.apply_log()
    # 2 moves away from 1 and 3; 5 leaves the session it shared with 4.
    await world.put(memory(2, 10), (0.0, 0.0, 0.0, 1.0))
    five = replace(
        memory(5, 10, tags=("session:s2",)), timestamp=NOW - timedelta(days=10, hours=-1)
    )
    await world.put(five, (0.0, 0.0, 1.0, 0.0))

    record = await run_pass(world, PassName.ASSOCIATE, run_id="second")

    removed = {
        (r.source_id, r.target_id, r.type)
        for r in (e.payload for e in world.log.of("relation_removed"))
    }
    assert removed == {
        (mid(1), mid(2), "SIMILAR_TO"),
        (mid(2), mid(3), "SIMILAR_TO"),
        (mid(5), mid(4), "PRECEDED_BY"),
    }
    assert all(e.payload.origin == "system" for e in world.log.of("relation_removed"))
    counts = {c.kind: c.count for c in record.changes}
    assert (counts["similar_to_removed"], counts["preceded_by_removed"]) == (2, 1)
    await world.apply_log()
    left = await world.graph.relations(TENANT, [mid(n) for n in range(1, 6)])
    # The user's 1–3 stays, though 1 and 3 are still similar enough to be proposed.
    assert [(r.source_id, r.target_id, r.origin) for r in left] == [(mid(1), mid(3), "user")]

    third = await run_pass(world, PassName.ASSOCIATE, run_id="third")
    assert not world.log.events
    assert not any(c.kind.endswith("_removed") for c in third.changes)


class Written:
    """ChangeMarks whose log range holds ``ids`` (what ingest wrote since the last run)."""

    def __init__(self, *ids: str) -> None:
        self.ids = list(ids)

    async def applied_mark(self, tenant: str) -> int:
        return 0

    async def written_ids(self, tenant: str, after: int, upto: int, limit: int) -> list[str] | None:
        return None if len(self.ids) > limit else self.ids


async def run_incremental(
    world: World, written: Written, settings: PassSettings | None = None
) -> Run:
    """Every phase of an associate run with an incremental run's params."""
    stores = Stores(world.vector, world.lexical, world.graph, world.log, 5.0, 2, marks=written)
    pass_ = pass_factory(stores, settings or PassSettings())(Key(TENANT, PassName.ASSOCIATE))
    run = Run(Key(TENANT, PassName.ASSOCIATE), "incr", NOW, Tally(10), '{"after":1,"upto":9}')
    for phase in pass_.phases:
        await pass_.total(run, phase)
        async for _ in pass_.steps(run, phase, ""):
            pass
    return run


async def test_an_incremental_associate_links_what_was_written_and_its_successors(
    world: World,
) -> None:
    await associations_world(world)
    await run_pass(world, PassName.ASSOCIATE, run_id="first")
    await world.apply_log()
    # 6 is new, near 1, and slots into session s1 between 4 and 5.
    six = replace(
        memory(6, 10, tags=("session:s1",)), timestamp=NOW - timedelta(days=10, minutes=-30)
    )
    await world.put(six, (1.0, 0.01, 0.0, 0.0))
    world.vector.neighbour_queries.clear()

    run = await run_incremental(world, Written(mid(6)))

    assert world.vector.neighbour_queries == [[mid(6)]]
    added = {
        (e.payload.source_id, e.payload.target_id, e.payload.type)
        for e in world.log.of("relation_added")
    }
    assert (mid(6), mid(4), "PRECEDED_BY") in added
    assert (mid(5), mid(6), "PRECEDED_BY") in added  # 5's predecessor is now 6
    assert any(mid(6) in (a, b) and t == "SIMILAR_TO" for a, b, t in added)
    removed = {(e.payload.source_id, e.payload.target_id) for e in world.log.of("relation_removed")}
    assert removed == {(mid(5), mid(4))}  # 5 was reread for its new predecessor
    assert run.tally.count("similar_to_removed") == 0


async def test_an_incremental_associate_removes_what_neither_end_proposes(world: World) -> None:
    # One neighbour per memory: 7's nearest is 8, but 9's nearest is 7, so 7–9 stands on
    # 9's side alone. 2 then moves away from 1 and 3.
    nearest = PassSettings(associate=AssociationSettings(similar_max_per_memory=1))
    await associations_world(world)
    await world.put(memory(7, 10), (0.0, 0.0, 0.0, 1.0))
    await world.put(memory(8, 10), (0.0, 0.0, -0.1, 0.995))
    await world.put(memory(9, 10), (0.0, 0.2, 0.0, 0.98))
    await run_pass(world, PassName.ASSOCIATE, run_id="first", settings=nearest)
    await world.apply_log()
    before = {edge_key(r) for r in await world.graph.relations(TENANT, [mid(2), mid(7)])}
    assert {(mid(1), mid(2), "SIMILAR_TO"), (mid(7), mid(9), "SIMILAR_TO")} <= before
    await world.put(memory(2, 10), (0.0, 0.0, 1.0, 0.0))

    await run_incremental(world, Written(mid(2), mid(7)), nearest)

    removed = {edge_key(e.payload) for e in world.log.of("relation_removed")}
    assert (mid(1), mid(2), "SIMILAR_TO") in removed  # neither 1 nor 2 proposes it now
    assert (mid(7), mid(9), "SIMILAR_TO") not in removed  # 9 still does
    assert all(mid(2) in k[:2] for k in removed if k[2] == "SIMILAR_TO")


async def test_an_incremental_associate_over_its_limit_reads_everything(world: World) -> None:
    await associations_world(world)
    world.vector.neighbour_queries.clear()

    run = await run_incremental(world, Written(*(mid(n) for n in range(1, 5000 + 2))))

    assert run.params == ""
    assert sorted(i for q in world.vector.neighbour_queries for i in q) == [
        mid(n) for n in range(1, 6)
    ]


async def test_associate_dry_run_publishes_nothing(world: World) -> None:
    await associations_world(world)

    record = await run_pass(world, PassName.ASSOCIATE, dry=True)

    assert not world.log.events
    assert {c.kind: c.count for c in record.changes}["similar_to_created"] == 2


async def test_associate_resumed_mid_phase_republishes_under_the_same_ids(world: World) -> None:
    await associations_world(world)
    world.checkpoints.crash_after = 3  # start, total, page 1 … dies on page 2's
    with pytest.raises(BaseException, match="the process died"):
        await run_pass(world, PassName.ASSOCIATE, run_id="r")
    published = len(world.log.events)
    world.checkpoints.crash_after = None

    record = await run_pass(world, PassName.ASSOCIATE, run_id="r", using=runner(world, None, "h2"))

    assert record.state is RunState.SUCCEEDED
    assert world.log.duplicates >= 1  # page 2's edges again: dropped by the log
    assert len(world.log.events) == published + 1  # only PRECEDED_BY is new
    similar = [e for e in world.log.of("relation_added") if e.payload.type == "SIMILAR_TO"]
    assert len(similar) == 2  # no double effects
    # The count may not be exact after a crash: 2–3 was counted on page 1 and, proposed
    # again from 3 in the redone page 2, once more (the run forgot it wrote it).
    assert {c.kind: c.count for c in record.changes}["similar_to_created"] in (2, 3)


# --- forget --------------------------------------------------------------------------------


async def test_forget_is_off_by_default(world: World) -> None:
    await ages(world)
    record = await run_pass(world, PassName.FORGET)
    assert record.state is RunState.SUCCEEDED
    assert not world.log.events
    assert [(c.kind, c.count) for c in record.changes] == [("thresholds_off", 0)]


async def test_forget_archives_then_deletes_unprotected_faded_memories(world: World) -> None:
    await world.put(memory(1, 1000, importance=0.1))  # faded
    await world.put(memory(2, 1000, importance=0.9))  # important: protected
    await world.put(memory(3, 5, importance=0.1))  # young: protected
    gone = replace(memory(4, 1000, importance=0.1), archived=True)
    await world.put(gone)  # archived long ago: deleted
    settings = PassSettings(
        decay=DecaySettings(), forget=ForgetSettings(archive_below=0.2, delete_below=0.1)
    )

    record = await run_pass(world, PassName.FORGET, settings=settings)

    [archive] = world.log.of("updated")
    assert archive.payload.id == mid(1)
    assert archive.payload.archived
    assert archive.payload.updated_at == NOW
    assert archive.mask == ("archived",)
    assert [e.payload for e in world.log.of("deleted")] == [mid(4)]
    assert {c.kind: c.count for c in record.changes} == {"archived": 1, "deleted": 1}

    # Applied by ingest, then run again: the archived memory is now recently updated.
    await world.apply_log()
    again = await run_pass(world, PassName.FORGET, settings=settings, run_id="r2")
    assert not world.log.events
    assert not again.changes


# --- cluster -------------------------------------------------------------------------------


async def test_cluster_writes_one_meta_pattern_and_updates_it_in_place(world: World) -> None:
    texts = [
        "The deploy pipeline failed on the staging cluster. Rollback fixed it.",
        "Staging deploy pipeline failed again after the config change.",
        "Deploy pipeline on staging failed: the rollback worked.",
    ]
    for n, (text, v) in enumerate(
        zip(texts, [(1, 0, 0, 0), (0.99, 0.1, 0, 0), (0.98, 0, 0.1, 0)], strict=True), start=1
    ):
        await world.put(replace(memory(n, 3), content=text), v)
    await world.put(memory(4, 3), (0, 0, 0, 1))

    record = await run_pass(world, PassName.CLUSTER)

    [stored] = world.log.of("stored")
    meta = stored.payload
    assert meta.type == "MetaPattern"
    assert "deploy" in meta.content.lower()
    links = [e.payload for e in world.log.of("relation_added")]
    assert sorted((r.source_id, r.target_id, r.type) for r in links) == [
        (meta.id, mid(n), "SUMMARIZES") for n in (1, 2, 3)
    ]
    assert {c.kind: c.count for c in record.changes}["meta_pattern_written"] == 1

    await world.apply_log()
    again = await run_pass(world, PassName.CLUSTER, run_id="r2")
    assert not world.log.events  # same members, same text: nothing rewritten
    assert {c.kind: c.count for c in again.changes} == {"meta_pattern_unchanged": 1}


async def test_cluster_unlinks_a_member_that_left(world: World) -> None:
    vectors = [(1, 0, 0, 0), (0.99, 0.1, 0, 0), (0.98, 0, 0.1, 0), (0.99, 0, 0, 0.1)]
    for n, v in enumerate(vectors, start=1):
        await world.put(replace(memory(n, 3), content=f"deploy pipeline failed {n}"), v)
    await run_pass(world, PassName.CLUSTER)
    [meta] = [e.payload for e in world.log.of("stored")]
    await world.apply_log()
    await world.put(replace(memory(3, 3), content="something else"), (0, 0, 1, 0))

    record = await run_pass(world, PassName.CLUSTER, run_id="r2")

    [gone] = [e.payload for e in world.log.of("relation_removed")]
    assert (gone.source_id, gone.target_id, gone.type, gone.origin) == (
        meta.id,
        mid(3),
        "SUMMARIZES",
        "system",
    )
    assert {c.kind: c.count for c in record.changes}["summarizes_removed"] == 1
    await world.apply_log()
    edges = await world.graph.relations(TENANT, [meta.id])
    assert sorted(e.target_id for e in edges) == [mid(1), mid(2), mid(4)]


async def test_cluster_dry_run_publishes_nothing(world: World) -> None:
    for n in (1, 2, 3):
        await world.put(memory(n, 3), (1, 0.01 * n, 0, 0))
    record = await run_pass(world, PassName.CLUSTER, dry=True)
    assert not world.log.events
    assert {c.kind: c.count for c in record.changes}["meta_pattern_written"] == 1


def test_pass_settings_default_to_the_core_rules() -> None:
    assert PassSettings().associate == AssociationSettings()
