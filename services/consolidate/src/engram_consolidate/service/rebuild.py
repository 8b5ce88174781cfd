"""Rebuild: a store re-created from the log's latest state, across tenants.

Vector and lexical (generations, engram_core.ports.Generations):

1. ``create``: drop the generations a previous rebuild left (the kept previous one, or one
   a crash orphaned), create an EMPTY generation (vector: with ``embedding_model``, "" =
   the live one's), note where ENGRAM_STATE ends now (``replay_to``);
2. ``replay``: every memory record up to ``replay_to`` (all tenants) into it through a
   client bound to it: live memories upserted (embedded by the new model for vector),
   tombstones deleted at their version;
3. ``catchup``: the records newer than ``replay_to`` (written while replaying), up to
   where the stream ends at this phase's start (``catchup_to``);
4. ``derived``: per tenant, the live generation's access statistics and relevance scores
   (not in the log) copied by scan;
5. ``swap``: the new generation made live atomically; the log's end at that moment noted
   (``log_at_swap``): every event ingest could have applied to the old generation;
6. ``final``: once the state keeper has passed ``log_at_swap``, the records after
   ``catchup_to`` replayed again. What ingest wrote to the old generation between the catch-up
   and the swap is in them; the version guard skips what the new generation already has.

Graph (one database, no generations): ``replay`` in place (memories, tombstones), then
``relations`` (every relation record whose edge is live).

The run's params (JSON on its record) carry the request's ``embedding_model`` and what
the phases learn (generation names, positions), so a resumed run continues where it was.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Protocol, Self

from engram_consolidate.service.passes.base import Pass, Run, Step, Stores
from engram_consolidate.service.records import Key, PassName
from engram_consolidate.service.state import RelationRecord
from engram_consolidate.service.state_apply import (
    MEMORIES,
    RELATIONS,
    GraphLike,
    GraphTarget,
    Positioned,
    ScanBacked,
    StateLog,
    Target,
    bounded,
    by_tenant,
    split,
    tombstones,
)
from engram_consolidate.service.sync import SYNC_PASSES, SyncPass, params_of
from engram_core.errors import DeadlineExceeded, NotFound
from engram_core.model import AccessUpdate, Generation, Memory, RelevanceUpdate
from engram_core.ports import Generations

CREATE, REPLAY, CATCHUP, DERIVED, SWAP, FINAL = (
    "create",
    "replay",
    "catchup",
    "derived",
    "swap",
    "final",
)
EDGES = "relations"

REBUILD_PASSES = {
    PassName.REBUILD_VECTOR: "vector",
    PassName.REBUILD_LEXICAL: "lexical",
    PassName.REBUILD_GRAPH: "graph",
}


class GenerationalStore(Generations, Protocol):
    """A vector or lexical client: generations, and itself bound to one of them."""

    def in_generation(self, name: str) -> Self: ...


class TenantList(Protocol):
    async def tenants(self) -> set[str]: ...


@dataclass(frozen=True, slots=True)
class Generational:
    """What a generation rebuild of one store needs."""

    generations: Generations
    live: Target  # reads the live generation (derived state)
    target: Callable[[str, str], Target]  # (generation, embedding_model) → a bound target


@dataclass
class Params:
    embedding_model: str = ""
    generation: str = ""
    previous: str = ""
    dropped: str = ""  # generations dropped at the start, comma-separated
    replay_to: int = 0
    catchup_to: int = 0
    log_at_swap: int = 0

    @classmethod
    def parse(cls, text: str) -> Params:
        raw = params_of(text)
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        return cls(**known)  # type: ignore[arg-type]

    def dump(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True, slots=True)
class RebuildConfig:
    final_wait_s: float = 600.0  # longest wait for the keeper to pass the swap point
    poll_s: float = 0.5


class RebuildPass(Pass):
    """Vector or lexical: into a new generation, then swapped in."""

    phases = (CREATE, REPLAY, CATCHUP, DERIVED, SWAP, FINAL)

    def __init__(
        self,
        name: PassName,
        stores: Stores,
        state: StateLog,
        store: Generational,
        tenants: TenantList,
        config: RebuildConfig,
    ) -> None:
        super().__init__(stores)
        self.name = name
        self.state = state
        self.store = store
        self.tenants = tenants
        self.config = config

    def _target(self, p: Params) -> Target:
        return self.store.target(p.generation, p.embedding_model)

    async def total(self, run: Run, phase: str) -> int:
        if phase in (REPLAY, CATCHUP, FINAL):
            return await self.stores.bounded(self.state.size(None, MEMORIES), "state size")
        return 0

    def steps(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        p = Params.parse(run.params)
        if phase == CREATE:
            return self._create(run, p)
        if phase == REPLAY:
            return self._replay(run, p, int(cursor or 0), p.replay_to)
        if phase == CATCHUP:
            return self._catchup(run, p, cursor)
        if phase == DERIVED:
            return self._derived(run, p, cursor)
        if phase == SWAP:
            return self._swap(run, p)
        return self._final(run, p, cursor)

    async def _create(self, run: Run, p: Params) -> AsyncIterator[Step]:
        gens = self.store.generations
        listed = await self.stores.bounded(gens.list_generations(), "list generations")
        if p.generation and any(g.name == p.generation for g in listed):
            yield Step(None, 0)  # created before a crash: keep filling it
            return
        dropped = []
        for g in listed:
            if not g.live:
                await self.stores.bounded(gens.drop_generation(g.name), "drop generation")
                dropped.append(g.name)
        created: Generation = await self.stores.bounded(
            gens.create_generation(p.embedding_model), "create generation"
        )
        p.generation = created.name
        p.embedding_model = created.embedding_model
        p.dropped = ",".join(dropped)
        p.replay_to = await self.stores.bounded(self.state.last_sequence(), "state position")
        run.tally.add("generation", [created.name], count=0)
        yield Step(None, 0, params=p.dump())

    async def _replay(
        self, run: Run, p: Params, after: int, until: int, params: str | None = None
    ) -> AsyncIterator[Step]:
        target = self._target(p)
        first = params
        async for page in self.state.records(None, MEMORIES, after, until, self.stores.page_size):
            await apply_page(self.stores, target, page, run)
            yield Step(str(page[-1].sequence), len(page), params=first)
            first = None
        yield Step(None, 0, params=first)

    async def _catchup(self, run: Run, p: Params, cursor: str) -> AsyncIterator[Step]:
        if not p.catchup_to:
            p.catchup_to = await self.stores.bounded(self.state.last_sequence(), "state position")
        after = int(cursor or p.replay_to)
        async for step in self._replay(run, p, after, p.catchup_to, p.dump()):
            yield step

    async def _derived(self, run: Run, p: Params, cursor: str) -> AsyncIterator[Step]:
        """Per tenant (sorted), the live generation's derived state a page at a time. The
        cursor is ``<tenant> <scan cursor>``."""
        tenant_at, _, scan_at = cursor.partition(" ")
        target = self._target(p)
        tenants = sorted(await self.stores.bounded(self.tenants.tenants(), "tenants"))
        for tenant in tenants:
            if tenant < tenant_at:
                continue
            at: str | None = (scan_at or None) if tenant == tenant_at else None
            while True:
                page = await self.stores.bounded(
                    self.store.live.store.scan(tenant, at, self.stores.page_size), "live scan"
                )
                await copy_derived(self.stores, target, tenant, page.memories, run)
                more = page.next_cursor is not None and page.next_cursor != at
                yield Step(f"{tenant} {page.next_cursor or ''}", len(page.memories))
                if not more:
                    break
                at = page.next_cursor
            yield Step(f"{tenant}\x7f", 0)  # past this tenant (\x7f sorts after any name)
        yield Step(None, 0)

    async def _swap(self, run: Run, p: Params) -> AsyncIterator[Step]:
        gens = self.store.generations
        listed = await self.stores.bounded(gens.list_generations(), "list generations")
        if not any(g.live and g.name == p.generation for g in listed):
            previous = await self.stores.bounded(
                gens.swap_generation(p.generation), "swap generation"
            )
            p.previous = previous.name
        p.log_at_swap = await self.stores.bounded(self.state.log_sequence(), "log position")
        yield Step(None, 0, params=p.dump())

    async def _final(self, run: Run, p: Params, cursor: str) -> AsyncIterator[Step]:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.config.final_wait_s
        while await self.stores.bounded(self.state.keeper_sequence(), "keeper") < p.log_at_swap:
            if loop.time() > give_up:
                raise DeadlineExceeded(
                    f"the state keeper did not reach log sequence {p.log_at_swap} "
                    f"within {self.config.final_wait_s}s"
                )
            await asyncio.sleep(self.config.poll_s)
            yield Step(cursor, 0)  # a heartbeat: the runner checks the lease between steps
        until = await self.stores.bounded(self.state.last_sequence(), "state position")
        after = int(cursor or p.catchup_to)
        async for step in self._replay(run, p, after, until):
            yield step


class GraphRebuildPass(Pass):
    """Graph: the log replayed in place (the version guard skips what the graph has)."""

    name = PassName.REBUILD_GRAPH
    phases = (REPLAY, EDGES)

    def __init__(self, stores: Stores, state: StateLog, target: Target, graph: GraphLike) -> None:
        super().__init__(stores)
        self.state = state
        self.target = target
        self.graph = graph

    async def total(self, run: Run, phase: str) -> int:
        kind = RELATIONS if phase == EDGES else MEMORIES
        return await self.stores.bounded(self.state.size(None, kind), "state size")

    async def steps(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        until = await self.stores.bounded(self.state.last_sequence(), "state position")
        kind = RELATIONS if phase == EDGES else MEMORIES
        size = self.stores.page_size
        async for page in self.state.records(None, kind, int(cursor or 0), until, size):
            if phase == EDGES:
                await self._edges(page, run)
            else:
                await apply_page(self.stores, self.target, page, run)
            yield Step(str(page[-1].sequence), len(page))
        yield Step(None, 0)

    async def _edges(self, page: list[Positioned], run: Run) -> None:
        for p in page:
            r = p.record
            if not isinstance(r, RelationRecord) or r.removed:
                continue
            try:
                await self.stores.bounded(
                    self.graph.add_relations(r.tenant, [r.relation], r.version),
                    "graph add_relations",
                )
            except NotFound:  # an end was deleted: the edge went with it
                run.tally.add("skipped", count=1)
            else:
                run.tally.add("relations", count=1)


async def apply_page(stores: Stores, target: Target, page: list[Positioned], run: Run) -> None:
    """One page of memory records into ``target``: per tenant, live ones upserted, then
    tombstones deleted at their versions."""
    for tenant, records in by_tenant(page).items():
        live, dead, _ = split(records)
        if live:
            result = await bounded(
                target.apply(tenant, live), target.apply_timeout_s, f"{target.name} upsert"
            )
            run.tally.add("memories", count=result.applied)
            run.tally.add("skipped", count=result.skipped)
        if dead:
            await stores.bounded(tombstones(target.writer, tenant, dead), f"{target.name} delete")
            run.tally.add("tombstones", count=len(dead))


async def copy_derived(
    stores: Stores, target: Target, tenant: str, memories: list[Memory], run: Run
) -> None:
    """Access statistics and relevance scores are not in the log: copied as they are."""
    access = [
        AccessUpdate(m.id, m.last_accessed, m.access_count)
        for m in memories
        if m.last_accessed is not None
    ]
    scores = [RelevanceUpdate(m.id, m.relevance_score) for m in memories if m.relevance_score]
    if access:
        await stores.bounded(target.writer.update_access(tenant, access), "update access")
    if scores:
        await stores.bounded(target.writer.update_relevance(tenant, scores), "update relevance")
    run.tally.add("derived", count=len({u.id for u in access} | {u.id for u in scores}))


@dataclass(frozen=True, slots=True)
class Maintenance:
    """What Sync and Rebuild work with."""

    state: StateLog
    targets: Mapping[str, Target]  # the live stores: vector, lexical, graph
    graph: GraphLike
    generational: Mapping[str, Generational]  # vector, lexical
    tenants: TenantList
    config: RebuildConfig = RebuildConfig()


def maintenance_factory(stores: Stores, m: Maintenance) -> Callable[[Key], Pass | None]:
    """The pass a sync or rebuild key names (None for the consolidation passes)."""

    def make(key: Key) -> Pass | None:
        name = key.pass_name
        if name in SYNC_PASSES:
            store = SYNC_PASSES[name]
            if store == "graph":  # a reader of its own per run (ScanBacked keeps a map)
                target = GraphTarget(m.graph, reader=ScanBacked(m.graph, stores.page_size))
                return SyncPass(name, stores, m.state, target, m.graph)
            return SyncPass(name, stores, m.state, m.targets[store])
        if name is PassName.REBUILD_GRAPH:
            return GraphRebuildPass(stores, m.state, m.targets["graph"], m.graph)
        if name in REBUILD_PASSES:
            store = REBUILD_PASSES[name]
            return RebuildPass(name, stores, m.state, m.generational[store], m.tenants, m.config)
        return None

    return make
