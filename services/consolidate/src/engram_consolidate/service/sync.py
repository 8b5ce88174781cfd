"""Sync: one store of one tenant checked against the log's latest state, and repaired.

Phases (each resumable from its cursor):

- ``log``: the tenant's memory states (ENGRAM_STATE, stream order) a page at a time, each
  page's ids read from the store: a live state the store lacks (``missing``) or holds at
  an older version (``stale``) is applied again from the state (a missing one with the
  keeper's position as its version: see ``_memories``); a tombstone the store
  still holds older is deleted at its version (``deleted``). States newer than ingest's
  watermark are left to ingest (``pending``): it is about to apply them.
- ``relations`` (graph only): the tenant's relation states whose edge the graph lacks are
  added again (``relation_missing``; an edge whose end is gone is ``relation_skipped``).
- ``store``: the store's own pages (scan): a memory the log never had (``orphaned``) or
  deleted (``deleted``) is deleted there. Only versions the state keeper has passed are
  judged, so a write the keeper has not recorded yet is never taken for an orphan.

A dry run counts and changes nothing. Repairs are idempotent (the version guard), so a
page redone after a crash changes nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from engram_consolidate.service.passes.base import Pass, Run, Step, Stores
from engram_consolidate.service.records import PassName
from engram_consolidate.service.state import MemoryRecord, RelationRecord
from engram_consolidate.service.state_apply import (
    MEMORIES,
    RELATIONS,
    GraphLike,
    StateLog,
    Target,
    bounded,
    tombstones,
)
from engram_core.errors import NotFound
from engram_core.model import Memory

LOG, EDGES, STORE = "log", "relations", "store"

SYNC_PASSES = {
    PassName.SYNC_VECTOR: "vector",
    PassName.SYNC_LEXICAL: "lexical",
    PassName.SYNC_GRAPH: "graph",
}


class SyncPass(Pass):
    def __init__(
        self,
        name: PassName,
        stores: Stores,
        state: StateLog,
        target: Target,
        graph: GraphLike | None = None,  # sync_graph: the edges are checked too
    ) -> None:
        super().__init__(stores)
        self.name = name
        self.state = state
        self.target = target
        self.graph = graph
        self.phases = (LOG, EDGES, STORE) if graph is not None else (LOG, STORE)

    async def total(self, run: Run, phase: str) -> int:
        if phase == STORE:
            return await self.stores.bounded(self.target.store.count(run.tenant), "count")
        kind = RELATIONS if phase == EDGES else MEMORIES
        return await self.stores.bounded(self.state.size(run.tenant, kind), "state size")

    def steps(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        if phase == STORE:
            return self._store(run, cursor)
        return self._log(run, phase, cursor)

    async def _log(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        after = int(cursor or 0)
        until = await self.stores.bounded(self.state.last_sequence(), "state position")
        applied = await self.stores.bounded(self.state.applied_sequence(), "watermark")
        kept = await self.stores.bounded(self.state.keeper_sequence(), "keeper position")
        kind = RELATIONS if phase == EDGES else MEMORIES
        size = self.stores.page_size
        async for page in self.state.records(run.tenant, kind, after, until, size):
            records = [p.record for p in page]
            if phase == EDGES:
                await self._edges(run, [r for r in records if isinstance(r, RelationRecord)])
            else:
                await self._memories(
                    run, [r for r in records if isinstance(r, MemoryRecord)], applied, kept
                )
            yield Step(str(page[-1].sequence), len(page))
        yield Step(None, 0)

    async def _memories(
        self, run: Run, records: list[MemoryRecord], applied: int, kept: int
    ) -> None:
        tally = run.tally
        ready = [r for r in records if r.version <= applied]
        tally.add("pending", [r.id for r in records if r.version > applied])
        tally.add("checked", count=len(ready))
        held = await self._get(run.tenant, [r.id for r in ready])
        missing: list[Memory] = []
        stale: list[Memory] = []
        dead: list[MemoryRecord] = []
        for r in ready:
            stored = held.get(r.id)
            if r.memory is None:
                if stored is not None and stored.version < r.version:
                    dead.append(r)
            elif stored is None:
                # Stamped with the keeper's position: no event touched it between its
                # state and there, so this IS its state as of `kept` — and outranks a
                # tombstone a store made behind the log's back. Later events still win.
                missing.append(replace(r.memory, version=max(r.version, kept)))
            elif stored.version < r.version:
                stale.append(r.memory)
        tally.add("missing", [m.id for m in missing])
        tally.add("stale", [m.id for m in stale])
        tally.add("deleted", [r.id for r in dead])
        if run.dry_run:
            return
        if missing or stale:
            await bounded(
                self.target.apply(run.tenant, missing + stale),
                self.target.apply_timeout_s,
                f"{self.target.name} upsert",
            )
        if dead:
            await self.stores.bounded(
                tombstones(self.target.writer, run.tenant, dead), f"{self.target.name} delete"
            )

    async def _edges(self, run: Run, records: list[RelationRecord]) -> None:
        assert self.graph is not None
        wanted = [r for r in records if not r.removed]
        if not wanted:
            return
        sources = list(dict.fromkeys(r.relation.source_id for r in wanted))
        have: set[tuple[str, str, str]] = set()
        for i in range(0, len(sources), self.stores.read_chunk):
            chunk = sources[i : i + self.stores.read_chunk]
            edges = await self.stores.bounded(
                self.graph.relations(run.tenant, chunk), "graph relations"
            )
            have.update((e.source_id, e.type, e.target_id) for e in edges)
        absent = [
            r
            for r in wanted
            if (r.relation.source_id, r.relation.type, r.relation.target_id) not in have
        ]
        run.tally.add("relations_checked", count=len(wanted))
        label = [f"{r.relation.source_id}>{r.relation.target_id}" for r in absent]
        if run.dry_run:
            run.tally.add("relation_missing", label)
            return
        for r, name in zip(absent, label, strict=True):
            try:
                await self.stores.bounded(
                    self.graph.add_relations(run.tenant, [r.relation], r.version),
                    "graph add_relations",
                )
            except NotFound:  # an end is gone (deleted since): the edge is moot
                run.tally.add("relation_skipped", [name])
            else:
                run.tally.add("relation_missing", [name])

    async def _store(self, run: Run, cursor: str) -> AsyncIterator[Step]:
        kept = await self.stores.bounded(self.state.keeper_sequence(), "keeper position")
        at: str | None = cursor or None
        while True:
            page = await self.stores.bounded(
                self.target.store.scan(run.tenant, at, self.stores.page_size),
                f"{self.target.name} scan",
            )
            await self._orphans(run, page.memories, kept)
            yield Step(page.next_cursor, len(page.memories))
            if page.next_cursor is None or (not page.memories and page.next_cursor == at):
                return
            at = page.next_cursor

    async def _orphans(self, run: Run, memories: Sequence[Memory], kept: int) -> None:
        judged = [m for m in memories if m.version <= kept]
        if not judged:
            return
        states = await self.stores.bounded(
            self.state.memory_states(run.tenant, [m.id for m in judged]), "state read"
        )
        orphans: dict[int, list[str]] = {}
        dead: list[MemoryRecord] = []
        for m in judged:
            state = states.get(m.id)
            if state is None:
                # Never in the log up to `kept`: a delete must outrank the stored version,
                # and any later event for the id (> kept) must outrank the delete.
                orphans.setdefault(max(kept, m.version + 1), []).append(m.id)
            elif state.deleted and state.version > m.version:
                dead.append(state)
        run.tally.add("orphaned", [i for ids in orphans.values() for i in ids])
        run.tally.add("deleted", [r.id for r in dead])
        if run.dry_run:
            return
        writer = self.target.writer
        for version, ids in orphans.items():
            await self.stores.bounded(writer.delete(run.tenant, ids, version), "delete")
        if dead:
            await self.stores.bounded(tombstones(writer, run.tenant, dead), "delete")

    async def _get(self, tenant: str, ids: Sequence[str]) -> dict[str, Memory]:
        out: dict[str, Memory] = {}
        chunk = self.stores.read_chunk
        for i in range(0, len(ids), chunk):
            got = await self.stores.bounded(
                self.target.store.get(tenant, ids[i : i + chunk]), f"{self.target.name} get"
            )
            out.update((m.id, m) for m in got)
        return out


def params_of(text: str) -> dict[str, object]:
    """A run's params (JSON object; "" = none)."""
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
