"""The latest-state log, Sync and Rebuild over in-memory fakes: the keeper (log order,
backfill, tombstones, a crash mid-batch), Sync (repairs and dry run), Rebuild (the whole
sequence with catch-up and the final replay, resume after a crash)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from engram_consolidate.service import (
    GLOBAL,
    Key,
    PassName,
    PassSettings,
    RunState,
    Stores,
    Trigger,
    pass_factory,
)
from engram_consolidate.service.ports import FenceLost
from engram_consolidate.service.rebuild import (
    Generational,
    Maintenance,
    Params,
    maintenance_factory,
)
from engram_consolidate.service.runner import Start
from engram_consolidate.service.state import (
    Ignored,
    KeeperConfig,
    KeeperPosition,
    LogEvent,
    MemoryRecord,
    RelationRecord,
    StateKeeper,
    StateKey,
    StateRecord,
    fold,
    key_of,
)
from engram_consolidate.service.state_apply import (
    MEMORIES,
    GraphTarget,
    LexicalTarget,
    Positioned,
    VectorTarget,
)
from engram_core.entities import EntityRules
from engram_core.lexicon import builtin_lexicon
from engram_core.log_events import (
    MemoryRemoved,
    MemoryWritten,
    RelationLinked,
    RelationUnlinked,
    TenantErased,
)
from engram_core.model import Memory, Relation
from engram_platform.coordination import MemoryLease
from engram_testing.fakes.generations import fake_text_generations, fake_vector_generations
from engram_testing.fakes.graph import FakeGraphStore
from engram_testing.fakes.lexical import FakeTextIndex
from engram_testing.fakes.vector import FakeVectorIndex

if TYPE_CHECKING:
    from conftest import MemoryCheckpoints, World

T = "t1"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def mid(n: int) -> str:
    return f"00000000-0000-7000-8000-{n:012d}"


def mem(n: int, text: str = "", **kw: Any) -> Memory:
    kw.setdefault("timestamp", NOW)
    kw.setdefault("updated_at", NOW)
    return Memory(id=mid(n), tenant=T, content=text or f"note {n} about Sarah", **kw)


# --- fakes ------------------------------------------------------------------------------------


class FakeStateStream:
    """ENGRAM_STATE in memory (one message per key, sequences rising), the keeper's
    checkpoint, and the positions Sync and Rebuild read."""

    def __init__(self) -> None:
        self.messages: dict[int, StateRecord] = {}
        self.by_key: dict[tuple[str, ...], int] = {}
        self.seq = 0
        self.published: list[StateRecord] = []  # every publish, in order
        self.position = KeeperPosition()
        self.revision: int | None = None
        self.log_end = 0
        self.applied = 10**9  # ingest's watermark: everything applied
        self.fail_publish: list[BaseException] = []
        self.after_page: list[Any] = []  # callbacks run after a page is handed out
        self.purged: list[str] = []

    # StateSink
    async def publish(self, records: Sequence[StateRecord]) -> None:
        if self.fail_publish:
            raise self.fail_publish.pop(0)
        for r in records:
            self.put(r)

    def put(self, r: StateRecord) -> None:
        self.seq += 1
        old = self.by_key.pop(key_of(r), None)
        if old is not None:
            del self.messages[old]
        self.by_key[key_of(r)] = self.seq
        self.messages[self.seq] = r
        self.published.append(r)

    async def purge_tenant(self, tenant: str) -> None:
        for key in [k for k in self.by_key if k[0] == tenant]:
            del self.messages[self.by_key.pop(key)]
        self.purged.append(tenant)

    async def relations(self, keys: Sequence[StateKey]) -> dict[StateKey, RelationRecord]:
        found = {k: self.messages[self.by_key[k]] for k in keys if k in self.by_key}
        return {k: r for k, r in found.items() if isinstance(r, RelationRecord)}

    def state(self, tenant: str, id_: str) -> MemoryRecord:
        r = self.messages[self.by_key[(tenant, "memory", id_)]]
        assert isinstance(r, MemoryRecord)
        return r

    # KeeperCheckpoints
    async def load(self) -> tuple[KeeperPosition, int | None]:
        return self.position, self.revision

    async def save(self, position: KeeperPosition, revision: int | None) -> int:
        if revision != self.revision:
            raise FenceLost("moved")
        self.position = position
        self.revision = (self.revision or 0) + 1
        return self.revision

    # StateLog
    async def last_sequence(self) -> int:
        return self.seq

    async def size(self, tenant: str | None, kind: str) -> int:
        return sum(1 for r in self.messages.values() if self._wanted(r, tenant, kind))

    @staticmethod
    def _wanted(r: StateRecord, tenant: str | None, kind: str) -> bool:
        is_memory = isinstance(r, MemoryRecord)
        return (tenant is None or r.tenant == tenant) and is_memory == (kind == MEMORIES)

    async def records(
        self, tenant: str | None, kind: str, after: int, until: int, batch: int
    ) -> AsyncIterator[list[Positioned]]:
        page: list[Positioned] = []
        at = after
        while True:
            nxt = [s for s in sorted(self.messages) if at < s <= until]
            nxt = [s for s in nxt if self._wanted(self.messages[s], tenant, kind)]
            if not nxt:
                break
            s = nxt[0]
            at = s
            page.append(Positioned(s, self.messages[s]))
            if len(page) == batch:
                yield page
                page = []
                for callback in self.after_page:
                    await callback()
        if page:
            yield page

    async def memory_states(self, tenant: str, ids: Sequence[str]) -> dict[str, MemoryRecord]:
        out = {}
        for i in ids:
            s = self.by_key.get((tenant, "memory", i))
            if s is not None:
                r = self.messages[s]
                assert isinstance(r, MemoryRecord)
                out[i] = r
        return out

    async def keeper_sequence(self) -> int:
        return self.position.sequence

    async def log_sequence(self) -> int:
        return self.log_end

    async def applied_sequence(self) -> int:
        return self.applied


@dataclass
class FakeSource:
    """ENGRAM_MEMORY for the keeper: events by sequence, opened at a position."""

    events: list[LogEvent] = field(default_factory=list)
    at: int = 0
    opened: list[int] = field(default_factory=list)

    async def open(self, after: int) -> None:
        self.at = after
        self.opened.append(after)

    async def close(self) -> None:
        return None

    async def fetch(self, limit: int, wait_s: float) -> Any:
        batch = [e for e in self.events if e.sequence > self.at][:limit]
        if batch:
            self.at = batch[-1].sequence
        else:
            await asyncio.sleep(0)
        return _Batch(batch)


@dataclass
class _Batch:
    events: list[LogEvent]
    acked: bool = False

    async def ack(self) -> None:
        self.acked = True


def keeper(stream: FakeStateStream, source: FakeSource, batch: int = 3) -> StateKeeper:
    config = KeeperConfig(batch_size=batch, fetch_wait_s=0.01, retry_s=0.0)
    return StateKeeper(source, stream, stream, MemoryLease(), "k1", config, lambda: NOW)


async def keep_until(k: StateKeeper, stream: FakeStateStream, sequence: int) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(k.run(stop))
    for _ in range(500):
        if stream.position.sequence >= sequence:
            break
        await asyncio.sleep(0.001)
    stop.set()
    await asyncio.wait_for(task, 5)


# --- the keeper --------------------------------------------------------------------------------


def test_fold_keeps_the_newest_state_per_key_in_log_order() -> None:
    rel = Relation(mid(1), mid(2), "relates_to")
    events: list[LogEvent] = [
        MemoryWritten(mem(1, "first"), 1),
        MemoryWritten(mem(2), 2),
        RelationLinked(T, rel, 3),
        MemoryWritten(mem(1, "second"), 4),
        MemoryRemoved(T, mid(2), 5),
        MemoryWritten(Memory(id=mid(3), tenant=T, content="  "), 6),  # ingest refuses it
        Ignored(7, "undecodable"),
        RelationLinked(T, Relation(mid(1), mid(2), "NOT_A_TYPE"), 8),
        RelationLinked(T, Relation(mid(1), mid(1), "relates_to"), 9),  # ingest refuses a self-edge
        RelationLinked(T, Relation(mid(1), mid(2), "MENTIONS"), 10),  # not a memory-to-memory type
    ]
    records = fold(events)
    assert [key_of(r) for r in records] == [
        (T, "relation", mid(1), "RELATES_TO", mid(2)),
        (T, "memory", mid(1)),
        (T, "memory", mid(2)),
    ]
    first = records[1]
    assert isinstance(first, MemoryRecord)
    assert first.memory is not None
    assert (first.memory.content, first.version, first.memory.version) == ("second", 4, 4)
    tomb = records[2]
    assert isinstance(tomb, MemoryRecord)
    assert tomb.deleted
    assert tomb.version == 5
    edge = records[0]
    assert isinstance(edge, RelationRecord)
    assert edge.relation.type == "RELATES_TO"


async def test_system_edges_and_system_removals_leave_a_user_edge_as_the_graph_does() -> None:
    user = Relation(mid(1), mid(2), "RELATES_TO", origin="user")
    system = replace(user, origin="system", strength=0.9)
    key = (T, "relation", mid(1), "RELATES_TO", mid(2))
    other = (T, "relation", mid(3), "RELATES_TO", mid(4))
    stream, source = FakeStateStream(), FakeSource()
    source.events = [
        RelationLinked(T, user, 1),
        RelationLinked(T, Relation(mid(3), mid(4), "relates_to", origin="system"), 2),
        # next batches: the keeper reads the kept user edge
        RelationLinked(T, system, 3),
        RelationUnlinked(T, Relation(mid(1), mid(2), "RELATES_TO", origin="system"), 4),
        RelationUnlinked(
            T, Relation(mid(3), mid(4), "relates_to", origin="system"), 5
        ),  # a system edge: gone
    ]
    await keep_until(keeper(stream, source, batch=2), stream, 5)
    kept = stream.messages[stream.by_key[key]]
    assert isinstance(kept, RelationRecord)
    assert (kept.relation.origin, kept.version, kept.removed) == ("user", 1, False)
    gone = stream.messages[stream.by_key[other]]
    assert isinstance(gone, RelationRecord)
    assert (gone.removed, gone.version) == (True, 5)

    # Within one batch the same rules hold; a user removal removes whatever is there.
    records = fold(
        [
            RelationLinked(T, user, 6),
            RelationUnlinked(T, Relation(mid(1), mid(2), "RELATES_TO", origin="system"), 7),
            RelationLinked(T, system, 8),
        ]
    )
    assert [(r.version, r.removed) for r in records if isinstance(r, RelationRecord)] == [
        (6, False)
    ]
    [removed] = fold([RelationUnlinked(T, Relation(mid(1), mid(2), "RELATES_TO"), 9)], {key: kept})
    assert isinstance(removed, RelationRecord)
    assert (removed.removed, removed.version) == (True, 9)


async def test_keeper_backfills_from_the_first_event_in_log_order() -> None:
    stream, source = FakeStateStream(), FakeSource()
    source.events = [MemoryWritten(mem(n % 3, f"v{n}"), n) for n in range(1, 11)]
    source.events.append(MemoryRemoved(T, mid(1), 11))
    k = keeper(stream, source, batch=4)
    await keep_until(k, stream, 11)

    assert source.opened == [0]
    assert stream.position.sequence == 11
    assert stream.position.events == 11
    # The kept state of each memory is its last event's, whatever the batching.
    assert stream.state(T, mid(0)).memory == replace(mem(0, "v9"), version=9)
    assert stream.state(T, mid(2)).version == 8
    assert stream.state(T, mid(1)).deleted
    assert stream.state(T, mid(1)).version == 11
    assert len(stream.messages) == 3
    # Every publish moved forward: no state ever replaced a newer one of its key.
    last: dict[tuple[str, ...], int] = {}
    for r in stream.published:
        assert r.version > last.get(key_of(r), 0)
        last[key_of(r)] = r.version


@pytest.mark.parametrize("batch", [1, 3, 10])
async def test_a_tenant_deletion_purges_its_states_and_keeps_what_came_after(batch: int) -> None:
    stream, source = FakeStateStream(), FakeSource()
    other = replace(mem(1, "other tenant"), tenant="t2")
    source.events = [
        MemoryWritten(mem(1), 1),
        MemoryWritten(other, 2),
        RelationLinked(T, Relation(mid(1), mid(2), "relates_to"), 3),
        MemoryWritten(mem(2), 4),
        TenantErased(T, 5),
        MemoryWritten(mem(3, "after"), 6),
    ]
    await keep_until(keeper(stream, source, batch=batch), stream, 6)

    assert stream.purged == [T]
    assert {k for k in stream.by_key if k[0] == T} == {(T, "memory", mid(3))}
    assert stream.state("t2", mid(1)).memory is not None
    assert stream.position.sequence == 6


async def test_keeper_resumes_at_its_checkpoint_after_a_failed_publish() -> None:
    stream, source = FakeStateStream(), FakeSource()
    source.events = [MemoryWritten(mem(n, f"v{n}"), n) for n in range(1, 8)]
    stream.fail_publish = [ConnectionError("log down")]
    k = keeper(stream, source, batch=3)
    await keep_until(k, stream, 7)

    assert source.opened == [0, 0]  # reopened at the checkpoint (nothing was kept yet)
    assert k.stats.restarts == 1
    assert stream.position.sequence == 7
    assert {stream.state(T, mid(n)).version for n in range(1, 8)} == set(range(1, 8))


async def test_keeper_continues_a_log_from_its_checkpoint() -> None:
    stream, source = FakeStateStream(), FakeSource()
    source.events = [MemoryWritten(mem(n), n) for n in range(1, 6)]
    await keep_until(keeper(stream, source), stream, 5)
    source.events.append(MemoryWritten(mem(1, "changed"), 6))
    await keep_until(keeper(stream, source), stream, 6)

    assert source.opened == [0, 5]
    assert len(stream.published) == 6  # the first five were not published again
    assert stream.state(T, mid(1)).memory == replace(mem(1, "changed"), version=6)


async def test_a_second_keeper_waits_for_the_lease() -> None:
    stream, source = FakeStateStream(), FakeSource()
    lease = MemoryLease()
    assert await lease.try_acquire("consolidate:state-keeper", "other", 30.0)
    config = KeeperConfig(fetch_wait_s=0.01, lease_ttl_s=0.03)
    k = StateKeeper(source, stream, stream, lease, "k1", config, lambda: NOW)
    source.events = [MemoryWritten(mem(1), 1)]
    stop = asyncio.Event()
    task = asyncio.create_task(k.run(stop))
    await asyncio.sleep(0.05)
    stop.set()
    await task
    assert stream.published == []
    assert source.opened == []


# --- Sync ----------------------------------------------------------------------------------------


@dataclass
class Fixture:
    stream: FakeStateStream
    vector: FakeVectorIndex
    lexical: FakeTextIndex
    graph: FakeGraphStore
    checkpoints: MemoryCheckpoints
    maintenance: Maintenance


class OneEmbedder:
    model_name = "hash-4"
    dimension = 4
    query_instruction = ""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[1.0, 0.0, 0.0, 0.0] for _ in texts]


@pytest.fixture
def embedder() -> OneEmbedder:
    return OneEmbedder()


async def _embedder_of(e: OneEmbedder) -> OneEmbedder:
    return e


def sync_fixture(world: World, embedder: OneEmbedder) -> Fixture:
    stream = FakeStateStream()
    vector, lexical, graph = FakeVectorIndex(dimension=4), FakeTextIndex(), FakeGraphStore()
    m = Maintenance(
        state=stream,
        targets={
            "vector": VectorTarget(vector, lambda: _embedder_of(embedder)),
            "lexical": LexicalTarget(lexical),
            "graph": GraphTarget(graph),
        },
        graph=graph,
        generational={},
        tenants=world.tenants(),
    )
    return Fixture(stream, vector, lexical, graph, world.checkpoints, m)


async def run_key(
    fx: Fixture, key: Key, run_id: str = "run-1", holder: str = "h1", params: str = ""
) -> Any:
    stores = Stores(fx.vector, fx.lexical, fx.graph, _NoEvents(), 5.0, 2)
    make = pass_factory(stores, PassSettings(), maintenance_factory(stores, fx.maintenance))
    runner = fx.checkpoints.runner(NOW, holder=holder)
    if params and key not in fx.checkpoints.records:
        from engram_consolidate.service import RunRecord

        fx.checkpoints.records[key] = (RunRecord(key).with_pending(run_id, NOW, params), 0)
    return await runner.run(
        key, lambda: make(key), lambda _: Start(run_id, Trigger.REQUEST), asyncio.Event()
    )


class _NoEvents:
    async def stored(self, *a: Any) -> bool:
        raise AssertionError("sync and rebuild publish no events")

    updated = deleted = relation_added = stored


async def logged(fx: Fixture, *records: StateRecord) -> None:
    for r in records:
        fx.stream.put(r)
    fx.stream.position = replace(fx.stream.position, sequence=max(r.version for r in records))


def live(n: int, version: int, text: str = "") -> MemoryRecord:
    return MemoryRecord(T, mid(n), version, replace(mem(n, text), version=version))


async def test_sync_repairs_missing_stale_deleted_and_orphaned(
    world: World, embedder: OneEmbedder
) -> None:
    fx = sync_fixture(world, embedder)
    await logged(
        fx, live(1, 1), live(2, 5, "new text"), live(3, 3), MemoryRecord(T, mid(4), 6, None)
    )
    vec = [1.0, 0.0, 0.0, 0.0]
    # Vector: 1 missing (deleted behind the system's back), 2 stale, 3 fine, 4 deleted in
    # the log but still here, 9 never in the log.
    await fx.vector.upsert(T, [(replace(mem(2, "old"), version=2), vec)])
    await fx.vector.upsert(T, [(replace(mem(3), version=3), vec)])
    await fx.vector.upsert(T, [(replace(mem(4), version=4), vec)])
    await fx.vector.upsert(T, [(replace(mem(9), version=2), vec)])

    record = await run_key(fx, Key(T, PassName.SYNC_VECTOR))

    assert record.state is RunState.SUCCEEDED, record.error
    counts = {c.kind: c.count for c in record.changes}
    assert counts == {"checked": 4, "missing": 1, "stale": 1, "deleted": 1, "orphaned": 1}
    held = {m.id: m for m in await fx.vector.get(T, [mid(n) for n in (1, 2, 3, 4, 9)])}
    assert set(held) == {mid(1), mid(2), mid(3)}
    assert (held[mid(2)].content, held[mid(2)].version) == ("new text", 5)
    assert held[mid(1)].version == 6  # restored as the log's state at the keeper's position
    # Re-applied as ingest applies: entities extracted, tags agreeing, the model named.
    assert held[mid(1)].embedding_model == "hash-4"
    assert "entity:people:sarah" in held[mid(1)].tags
    assert embedder.calls == [["note 1 about Sarah", "new text"]]
    # A second sync finds nothing to do.
    again = await run_key(fx, Key(T, PassName.SYNC_VECTOR), run_id="run-2")
    assert {c.kind: c.count for c in again.changes} == {"checked": 4}


async def test_sync_dry_run_counts_and_changes_nothing(world: World, embedder: OneEmbedder) -> None:
    fx = sync_fixture(world, embedder)
    await logged(fx, live(1, 1), live(2, 2))
    await fx.lexical.upsert(T, [replace(mem(7), version=1)])

    record = await run_key(fx, Key(T, PassName.SYNC_LEXICAL, dry_run=True))

    assert {c.kind: c.count for c in record.changes} == {"checked": 2, "missing": 2, "orphaned": 1}
    assert {c.kind: c.sample for c in record.changes}["missing"] == (mid(1), mid(2))
    assert [m.id for m in (await fx.lexical.scan(T, None, 10)).memories] == [mid(7)]


async def test_sync_leaves_to_ingest_what_it_has_not_applied_and_young_writes_alone(
    world: World, embedder: OneEmbedder
) -> None:
    fx = sync_fixture(world, embedder)
    await logged(fx, live(1, 1), live(2, 8))
    fx.stream.applied = 5  # ingest has not applied sequence 8 yet
    fx.stream.position = replace(fx.stream.position, sequence=8)
    # Written by an event (9) the keeper has not recorded yet: not an orphan.
    await fx.lexical.upsert(T, [replace(mem(3), version=9)])

    record = await run_key(fx, Key(T, PassName.SYNC_LEXICAL))

    assert {c.kind: c.count for c in record.changes} == {"checked": 1, "missing": 1, "pending": 1}
    assert {m.id for m in (await fx.lexical.scan(T, None, 10)).memories} == {mid(1), mid(3)}


async def test_sync_graph_readds_missing_edges_and_memories(
    world: World, embedder: OneEmbedder
) -> None:
    fx = sync_fixture(world, embedder)
    rel = Relation(mid(1), mid(2), "RELATES_TO", strength=0.7)
    gone = Relation(mid(1), mid(3), "RELATES_TO")
    await logged(
        fx,
        live(1, 1),
        live(2, 2),
        MemoryRecord(T, mid(3), 4, None),
        RelationRecord(T, rel, 3),
        RelationRecord(T, gone, 5),
    )
    await fx.graph.upsert(T, [(replace(mem(1), version=1), [])])

    record = await run_key(fx, Key(T, PassName.SYNC_GRAPH))

    counts = {c.kind: c.count for c in record.changes}
    assert counts["missing"] == 1
    assert counts["relation_missing"] == 1
    assert counts["relation_skipped"] == 1  # its target is deleted
    edges = await fx.graph.relations(T, [mid(1)])
    assert [(e.source_id, e.target_id, e.strength) for e in edges] == [(mid(1), mid(2), 0.7)]


# --- Rebuild -------------------------------------------------------------------------------------


class Bound:
    """A client bound to one generation of a FakeGenerations ("" = whichever is live)."""

    def __init__(self, gens: Any, name: str) -> None:
        self._gens = gens
        self._name = name

    def __getattr__(self, method: str) -> Any:
        async def call(*args: Any) -> Any:
            index = await self._gens.index(self._name)
            return await getattr(index, method)(*args)

        return call


@dataclass
class RebuildWorld:
    fx: Fixture
    gens: Any
    embedder: OneEmbedder


def rebuild_world(world: World, embedder: OneEmbedder) -> RebuildWorld:
    fx = sync_fixture(world, embedder)
    text, vector = fake_text_generations(), fake_vector_generations({"hash-4": 4}, "hash-4")

    def lex(name: str, model: str) -> LexicalTarget:
        return LexicalTarget(Bound(text, name))

    def vec(name: str, model: str) -> VectorTarget:
        return VectorTarget(Bound(vector, name), lambda: _embedder_of(embedder))

    live_text = LexicalTarget(Bound(text, ""))
    live_vector = VectorTarget(Bound(vector, ""), lambda: _embedder_of(embedder))
    fx.maintenance = replace(
        fx.maintenance,
        generational={
            "lexical": Generational(text, live_text, lex),
            "vector": Generational(vector, live_vector, vec),
        },
        tenants=world.tenants("t2"),
    )
    return RebuildWorld(fx, text, embedder)


async def test_rebuild_lexical_replays_catches_up_copies_swaps_and_replays_again(
    world: World, embedder: OneEmbedder
) -> None:
    w = rebuild_world(world, embedder)
    fx = w.fx
    old = await w.gens.index("")
    # The live generation, as ingest left it (with access stats and a score).
    for n in range(1, 6):
        await old.upsert(T, [replace(mem(n), version=n)])
    await old.delete(T, [mid(5)], 6)
    await old.upsert("t2", [replace(mem(7), tenant="t2", version=7)])
    accessed = replace(mem(1), version=1, access_count=4, last_accessed=NOW, relevance_score=0.8)
    old._stored[(T, mid(1))] = (accessed, None)
    await logged(fx, *(live(n, n) for n in range(1, 5)), MemoryRecord(T, mid(5), 6, None))
    await logged(fx, MemoryRecord("t2", mid(7), 7, replace(mem(7), tenant="t2", version=7)))
    fx.stream.log_end = 7

    # While the replay runs, memory 2 is updated (its state moves to the end of the stream)
    # and memory 8 is stored: the catch-up must bring both.
    async def write_during_replay() -> None:
        if fx.stream.after_page:
            fx.stream.after_page.clear()
            fx.stream.put(live(2, 8, "updated during the rebuild"))
            fx.stream.put(live(8, 9))
            fx.stream.position = replace(fx.stream.position, sequence=9)
            fx.stream.log_end = 9

    fx.stream.after_page.append(write_during_replay)
    key = Key(GLOBAL, PassName.REBUILD_LEXICAL)
    record = await run_key(fx, key)

    assert record.state is RunState.SUCCEEDED, record.error
    params = Params.parse(record.params)
    assert (params.generation, params.previous) == ("v2", "v1")
    assert params.replay_to == 6
    assert params.catchup_to == 8
    new = await w.gens.index("")
    assert new is not old  # swapped
    got = {m.id: m for m in await new.get(T, [mid(n) for n in range(1, 9)])}
    assert set(got) == {mid(1), mid(2), mid(3), mid(4), mid(8)}
    assert got[mid(2)].content == "updated during the rebuild"
    assert (got[mid(1)].access_count, got[mid(1)].relevance_score) == (4, 0.8)
    assert [m.id for m in await new.get("t2", [mid(7)])] == [mid(7)]
    assert "entity:people:sarah" in got[mid(3)].tags
    counts = {c.kind: c.count for c in record.changes}
    assert counts["tombstones"] == 1
    assert counts["derived"] == 1
    assert [g.name for g in await w.gens.list_generations()] == ["v1", "v2"]  # old one kept


async def test_rebuild_final_replay_brings_what_ingest_wrote_to_the_old_generation(
    world: World, embedder: OneEmbedder
) -> None:
    w = rebuild_world(world, embedder)
    fx = w.fx
    await logged(fx, live(1, 1))
    fx.stream.log_end = 1
    key = Key(GLOBAL, PassName.REBUILD_LEXICAL)
    stores = Stores(fx.vector, fx.lexical, fx.graph, _NoEvents(), 5.0, 2)
    make = maintenance_factory(stores, fx.maintenance)
    rebuild = make(key)
    assert rebuild is not None
    original = rebuild.steps

    # Between the catch-up and the swap, an event (sequence 2) reaches the log; ingest
    # writes it to the old generation; the keeper records it only after the swap.
    def steps(run: Any, phase: str, cursor: str) -> Any:
        if phase == "swap":
            fx.stream.log_end = 2

            async def late_keeper() -> None:
                await asyncio.sleep(0.02)
                fx.stream.put(live(2, 2))
                fx.stream.position = replace(fx.stream.position, sequence=2)

            asyncio.get_running_loop().create_task(late_keeper())
        return original(run, phase, cursor)

    rebuild.steps = steps  # type: ignore[method-assign]
    rebuild.config = replace(rebuild.config, poll_s=0.005)  # type: ignore[attr-defined]
    record = await fx.checkpoints.runner(NOW).run(
        key, lambda: rebuild, lambda _: Start("r1", Trigger.REQUEST), asyncio.Event()
    )

    assert record is not None
    assert record.state is RunState.SUCCEEDED, record
    new = await w.gens.index("")
    assert {m.id for m in await new.get(T, [mid(1), mid(2)])} == {mid(1), mid(2)}


async def test_rebuild_resumes_after_a_crash_without_a_second_generation(
    world: World, embedder: OneEmbedder
) -> None:
    w = rebuild_world(world, embedder)
    fx = w.fx
    await logged(fx, *(live(n, n) for n in range(1, 8)))
    fx.stream.log_end = 7
    key = Key(GLOBAL, PassName.REBUILD_VECTOR)
    # Puts: start, create (total, step), replay total, replay page 1 — then the process dies.
    world.checkpoints.crash_after = 5
    with pytest.raises(BaseException, match="the process died"):
        await run_key(fx, key, params='{"embedding_model": "hash-4"}')
    left = world.checkpoints.record(key)
    assert left.state is RunState.RUNNING
    assert left.phase == "replay"
    assert left.cursor == "2"

    world.checkpoints.crash_after = None
    record = await run_key(fx, key, holder="h2")

    assert record.state is RunState.SUCCEEDED, record.error
    assert record.resumes == 1
    vector = w.fx.maintenance.generational["vector"].generations
    names = [(g.name, g.live, g.embedding_model) for g in await vector.list_generations()]
    assert names == [("v1", False, "hash-4"), ("v2", True, "hash-4")]
    new = await vector.index("")
    assert len(await new.get(T, [mid(n) for n in range(1, 8)])) == 7
    # Pages 1 and 2 were embedded before the crash (2 in flight); the resumed run found
    # page 2 in the new generation and did not embed it again.
    assert sum(len(c) for c in embedder.calls) == 7


async def test_replays_extract_entities_with_the_rules_they_are_given() -> None:
    # Sync and Rebuild must give a memory the entities ingest gave it, so they take
    # ingest's rules: here the default profile's (no speaker prefix, no chat topics).
    rules = EntityRules(builtin_lexicon("concepts"), speaker_names=False)
    memory = replace(mem(1, "Caroline: we use Docker for the adoption forms"), version=3)
    text, graph = FakeTextIndex(), FakeGraphStore()
    await LexicalTarget(text, rules=rules).apply(T, [memory])
    await GraphTarget(graph, rules=rules).apply(T, [memory])
    (held,) = await text.get(T, [mid(1)])
    assert held.entities == ("tools:docker",)
    (in_graph,) = await graph.get(T, [mid(1)])
    assert in_graph.entities == ("tools:docker",)
    await LexicalTarget(text).apply(T, [replace(memory, version=4)])
    (held,) = await text.get(T, [mid(1)])
    assert held.entities == ("concepts:adoption", "people:caroline", "tools:docker")
