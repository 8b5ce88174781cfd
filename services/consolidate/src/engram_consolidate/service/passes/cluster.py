"""Cluster: near-duplicates and themes get a ``MetaPattern`` memory that summarises them,
linked to each member by SUMMARIZES (engram_core.clusters).

Two phases:

* ``pairs`` reads the tenant a page at a time and asks the vector service for each
  memory's ``neighbours`` (``neighbours`` per memory, cosine ≥ ``min_cosine``); the pairs
  (at most n·k) stay in memory, with the MetaPatterns met on the way. It cannot resume
  midway (the pairs are not checkpointed): a resumed run reads again.
* ``write`` groups the pairs (``find_clusters``), keys each cluster with the id of the
  MetaPattern it continues (``assign_keys``, from the previous MetaPatterns' SUMMARIZES
  edges), and, a page of clusters at a time in the order of their smallest member,
  publishes ``MemoryStored`` of the summary (its id is stable, so it is an update; ingest
  embeds it) and its SUMMARIZES ``RelationAdded`` events — only for a cluster whose
  members or summary text changed. MetaPatterns no cluster continues are deleted
  (``MemoryDeleted``) at the end. The cursor is the smallest member of the last cluster
  written; resuming recomputes the clusters (the pairs phase again) and skips those.

When a cluster that continues a MetaPattern is written, the system SUMMARIZES edges of
that MetaPattern to memories no longer among its members are removed
(``RelationRemoved``, origin system); a retired MetaPattern's edges go with its delete.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from engram_consolidate.service.passes.base import Pass, Run, Step, Stores
from engram_consolidate.service.records import PassName, edge_label
from engram_core.clusters import (
    Assignment,
    ClusterSettings,
    KeyedCluster,
    Pair,
    assign_keys,
    find_clusters,
    meta_pattern,
    summarise,
    summary_unchanged,
)
from engram_core.model import META_PATTERN, Memory, Relation
from engram_core.relations import ORIGIN_SYSTEM, RelationType

PAIRS = "pairs"
WRITE = "write"
WRITTEN = "meta_pattern_written"
UNCHANGED = "meta_pattern_unchanged"
RETIRED = "meta_pattern_retired"
LINKED = "summarizes_written"
UNLINKED = "summarizes_removed"


class ClusterPass(Pass):
    name = PassName.CLUSTER
    phases = (PAIRS, WRITE)

    def __init__(self, stores: Stores, settings: ClusterSettings, neighbours: int) -> None:
        super().__init__(stores)
        self.settings = settings
        self.neighbours = neighbours
        self._pairs: list[Pair] | None = None
        self._metas: dict[str, Memory] = {}
        self._summarized: dict[str, list[Relation]] = {}  # system SUMMARIZES by MetaPattern

    def resumable(self, phase: str) -> bool:
        return phase != PAIRS

    async def total(self, run: Run, phase: str) -> int:
        if phase == PAIRS:
            return await self.stores.bounded(self.stores.vector.count(run.tenant), "vector count")
        return 0  # clusters, once they are found

    def steps(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        return self._read(run) if phase == PAIRS else self._write(run, cursor)

    async def _read(self, run: Run, heartbeat: str | None = None) -> AsyncIterator[Step]:
        """Collects pairs and previous MetaPatterns. As the pairs phase its steps count
        memories; when ``write`` rebuilds them, each is a heartbeat at ``heartbeat``."""
        pairs: list[Pair] = []
        metas: dict[str, Memory] = {}
        async for memories, after in self.stores.pages(run.tenant, ""):
            sources = []
            for m in memories:
                if m.type == META_PATTERN:
                    metas[m.id] = m
                else:
                    sources.append(m.id)
            if sources and self.neighbours > 0:
                found = await self.stores.bounded(
                    self.stores.vector.neighbours(
                        run.tenant, sources, self.neighbours, self.settings.min_cosine
                    ),
                    "vector neighbours",
                )
                pairs.extend(Pair(id_, h.id, h.score) for id_, hs in found.items() for h in hs)
            if heartbeat is None:
                yield Step(after, len(memories))
            else:
                yield Step(heartbeat, 0)
        # Hits carry no type: pairs with a MetaPattern (it resembles its members) go here.
        self._pairs = [p for p in pairs if p.a not in metas and p.b not in metas]
        self._metas = metas

    async def _previous(self, run: Run) -> dict[str, list[str]]:
        """Members of each previous MetaPattern, from its SUMMARIZES edges."""
        if not self._metas:
            return {}
        edges = await self.stores.relations(run.tenant, sorted(self._metas))
        members: dict[str, list[str]] = {k: [] for k in self._metas}
        self._summarized = {}
        for e in edges:
            if e.type == RelationType.SUMMARIZES.value and e.source_id in members:
                members[e.source_id].append(e.target_id)
                if e.origin == ORIGIN_SYSTEM:
                    self._summarized.setdefault(e.source_id, []).append(e)
        return members

    async def _write(self, run: Run, cursor: str) -> AsyncIterator[Step]:
        if self._pairs is None:  # resumed in a new process: read again
            async for step in self._read(run, heartbeat=cursor):
                yield step
        clusters = find_clusters(self._pairs or [], self.settings)
        assignment = assign_keys(run.tenant, clusters, await self._previous(run), self.settings)
        todo = [k for k in assignment.clusters if not cursor or k.cluster.members[0] > cursor]
        total = len(assignment.clusters)
        page = self.stores.page_size
        for at in range(0, len(todo), page):
            batch = todo[at : at + page]
            await self._clusters(run, batch)
            yield Step(batch[-1].cluster.members[0], len(batch), total=total)
        await self._retire(run, assignment)
        yield Step(None, 0, total=total)

    async def _clusters(self, run: Run, batch: Sequence[KeyedCluster]) -> None:
        held = await self.stores.get(
            run.tenant, sorted({m for k in batch for m in k.cluster.members})
        )
        writes: list[Callable[[], Awaitable[object]]] = []
        for keyed in batch:
            members = [held[m] for m in keyed.cluster.members if m in held]
            if len(members) < self.settings.min_size:
                continue  # members deleted since the pairs were read
            summary = summarise(members, self.settings)
            old = self._metas.get(keyed.meta_id)
            if not keyed.changed and summary_unchanged(old, summary.text):
                run.tally.add(UNCHANGED, [keyed.meta_id])
                continue
            memory, edges = meta_pattern(run.tenant, keyed, members, summary, run.now)
            kept = {e.target_id for e in edges}
            left = [e for e in self._summarized.get(keyed.meta_id, []) if e.target_id not in kept]
            writes.append(self._writer(run, memory, edges, left))
            run.tally.add(WRITTEN, [keyed.meta_id])
            run.tally.add(LINKED, [edge_label(e.source_id, e.target_id) for e in edges])
            if left:
                run.tally.add(UNLINKED, [edge_label(e.source_id, e.target_id) for e in left])
        if writes and not run.dry_run:
            await self.stores.all(writes, "publish meta pattern")

    def _writer(
        self, run: Run, memory: Memory, edges: Sequence[Relation], left: Sequence[Relation]
    ) -> Callable[[], Awaitable[object]]:
        """The MetaPattern first, then its edges: ingest applies in log order, and an edge
        to a memory it does not hold yet would be skipped. Then the edges to members that
        left."""
        events = self.stores.events

        async def write() -> None:
            await events.stored(run.tenant, memory, run.event_id("meta", memory.id))
            await asyncio.gather(
                *(
                    events.relation_added(
                        run.tenant, e, run.event_id("summarizes", e.source_id, e.target_id)
                    )
                    for e in edges
                ),
                *(
                    events.relation_removed(
                        run.tenant, e, run.event_id("unsummarize", e.source_id, e.target_id)
                    )
                    for e in left
                ),
            )

        return write

    async def _retire(self, run: Run, assignment: Assignment) -> None:
        for meta_id in assignment.retired:
            if not run.dry_run:
                await self.stores.bounded(
                    self.stores.events.deleted(
                        run.tenant, meta_id, run.event_id("retire", meta_id)
                    ),
                    "publish retire",
                )
            run.tally.add(RETIRED, [meta_id])
