"""Decay: every memory's ``relevance_score`` from age, access, relations, importance and
confidence (engram_core.relevance), written to vector, lexical and graph.

Per page: the graph's edges of the page's memories give the relation counts; a fresh score
is written only where ``needs_write`` says it moved (so a daily pass rewrites few); the
score is written through ``update_relevance``, which never bumps a memory's version nor
its ``updated_at`` (forgetting reads that as "edited lately"). Not through the log: the
score is derived data, recomputed from logged fields.

Resume: the page in flight at a crash is read again; the vector store, written last,
then holds the new score where the write got through, so nothing is written twice (the
change count of such a page is then lost, not doubled).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from engram_consolidate.service.passes.base import Pass, Run, Step, Stores
from engram_consolidate.service.records import PassName
from engram_core.model import Memory, RelevanceUpdate
from engram_core.relevance import DecaySettings, compute, needs_write, relation_counts

SCAN = "scan"
CHANGED = "relevance"


class DecayPass(Pass):
    name = PassName.DECAY
    phases = (SCAN,)

    def __init__(self, stores: Stores, settings: DecaySettings) -> None:
        super().__init__(stores)
        self.settings = settings

    async def total(self, run: Run, phase: str) -> int:
        return await self.stores.bounded(self.stores.vector.count(run.tenant), "vector count")

    async def steps(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        async for memories, after in self.stores.pages(run.tenant, cursor):
            await self.page(run, memories)
            yield Step(after, len(memories))

    async def fresh_scores(self, run: Run, memories: list[Memory]) -> dict[str, float]:
        """Each memory's score at the run's ``now`` (forget uses it too)."""
        if not memories:
            return {}
        ids = [m.id for m in memories]
        edges = await self.stores.relations(run.tenant, ids)
        counts = relation_counts(ids, edges)
        return {m.id: compute(m, counts[m.id], run.now, self.settings).score for m in memories}

    async def page(self, run: Run, memories: list[Memory]) -> None:
        scores = await self.fresh_scores(run, memories)
        updates = [
            RelevanceUpdate(m.id, scores[m.id])
            for m in memories
            if needs_write(m.relevance_score, scores[m.id], self.settings)
        ]
        if updates and not run.dry_run:
            await self.stores.write_relevance(run.tenant, updates)
        run.tally.add(CHANGED, [u.id for u in updates])
