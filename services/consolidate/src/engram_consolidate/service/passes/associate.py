"""Associate: SIMILAR_TO and PRECEDED_BY edges with origin ``system`` (engram_core.associations).

Two phases:

* ``similar`` pages through the tenant; per page the vector service's ``neighbours`` of
  its memories (no O(n²) loop) → ``similar_to`` proposals.
* ``sequence`` first reads the tenant once more, keeping only (sequence key, timestamp,
  id) of the memories that have a key (``AssociationSettings.sequence_key``), sorted per
  key; then, a page at a time along that order, it fetches each memory and its nearest
  predecessors → ``preceded_by`` proposals. The index is rebuilt when the phase resumes
  (reads only); the cursor is the last (key, timestamp, id) done.

Both then ``reconcile`` proposals with the edges the graph holds for those memories: an
edge of another origin (a user's) is never written over, an unchanged system edge is not
rewritten. Writes are ``RelationAdded`` events on the log, as the gateway's Associate
publishes them, so ingest applies them with versions and a rebuild replays them. The
event id is derived from the run and the edge, so a page redone after a crash republishes
the same ids and the log drops the copies.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from engram_consolidate.service.passes.base import Pass, Run, Step, Stores
from engram_consolidate.service.records import PassName, edge_label
from engram_core.associations import (
    AssociationSettings,
    Change,
    Neighbour,
    edge_key,
    preceded_by,
    reconcile,
    similar_to,
)
from engram_core.model import META_PATTERN, Hit, Memory, Relation

SIMILAR = "similar"
SEQUENCE = "sequence"
USER_EDGE_KEPT = "user_edge_kept"


@dataclass(frozen=True, slots=True, order=True)
class _Entry:
    key: str
    timestamp: datetime
    id: str

    def cursor(self) -> str:
        return json.dumps([self.key, self.timestamp.isoformat(), self.id])

    @classmethod
    def parse(cls, cursor: str) -> _Entry:
        key, ts, id_ = json.loads(cursor)
        return cls(str(key), datetime.fromisoformat(ts), str(id_))


class AssociatePass(Pass):
    name = PassName.ASSOCIATE
    phases = (SIMILAR, SEQUENCE)

    def __init__(self, stores: Stores, settings: AssociationSettings) -> None:
        super().__init__(stores)
        self.settings = settings
        # Edges this run wrote: a similar pair is proposed from both ends, on two pages,
        # before ingest has applied the first write (after a crash this is lost, and such
        # a pair may be counted twice; the log still drops the second event).
        self._written: set[tuple[str, str, str]] = set()
        self._user_edges: set[tuple[str, str, str]] = set()  # user edges met, likewise

    async def total(self, run: Run, phase: str) -> int:
        if phase == SIMILAR:
            return await self.stores.bounded(self.stores.vector.count(run.tenant), "vector count")
        return 0  # the sequence index's size, once it is built

    def steps(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        return self._similar(run, cursor) if phase == SIMILAR else self._sequence(run, cursor)

    # --- SIMILAR_TO --------------------------------------------------------------------

    async def _similar(self, run: Run, cursor: str) -> AsyncIterator[Step]:
        async for memories, after in self.stores.pages(run.tenant, cursor):
            sources = [m.id for m in memories if m.type != META_PATTERN]
            if sources and self.settings.similar_max_per_memory > 0:
                found = await self.stores.bounded(
                    self.stores.vector.neighbours(
                        run.tenant,
                        sources,
                        self.settings.similar_max_per_memory,
                        self.settings.similar_min_cosine,
                    ),
                    "vector neighbours",
                )
                hits = await self._kept(run, memories, found)
                await self._write(run, sources, similar_to(hits, run.now, self.settings))
            yield Step(after, len(memories))

    async def _kept(
        self, run: Run, memories: list[Memory], found: dict[str, list[Hit]]
    ) -> list[Neighbour]:
        """The hits that are live memories other than MetaPatterns (hits carry no memory:
        a MetaPattern resembles its members by construction, which is no finding)."""
        types = {m.id: m.type for m in memories}
        others = sorted({h.id for hs in found.values() for h in hs} - types.keys())
        if others:
            held = await self.stores.get(run.tenant, others)
            types |= {id_: m.type for id_, m in held.items()}
        return [
            Neighbour(id_, h.id, h.score)
            for id_, hs in found.items()
            for h in hs
            if types.get(h.id, META_PATTERN) != META_PATTERN
        ]

    # --- PRECEDED_BY -------------------------------------------------------------------

    async def _index(self, run: Run) -> AsyncIterator[list[_Entry] | None]:
        """Yields None per page read (a heartbeat), then the sorted index."""
        spec = self.settings.key
        entries: list[_Entry] = []
        async for memories, _ in self.stores.pages(run.tenant, ""):
            for m in memories:
                key = spec.of(m) if m.type != META_PATTERN else None
                if key is not None:
                    entries.append(_Entry(key, m.timestamp, m.id))
            yield None
        entries.sort()
        yield entries

    async def _sequence(self, run: Run, cursor: str) -> AsyncIterator[Step]:
        if self.settings.preceded_max == 0:
            yield Step(None, 0)
            return
        entries: list[_Entry] = []
        async for built in self._index(run):
            if built is None:
                yield Step(cursor, 0)  # reading: checkpoint nothing new, renew the lease
            else:
                entries = built
        start = bisect.bisect_right(entries, _Entry.parse(cursor)) if cursor else 0
        page = self.stores.page_size
        if start >= len(entries):
            yield Step(None, 0, total=len(entries))
            return
        for at in range(start, len(entries), page):
            batch = entries[at : at + page]
            await self._preceded(run, entries, at, batch)
            last = at + len(batch) >= len(entries)
            yield Step(None if last else batch[-1].cursor(), len(batch), total=len(entries))

    async def _preceded(
        self, run: Run, entries: Sequence[_Entry], at: int, batch: Sequence[_Entry]
    ) -> None:
        """PRECEDED_BY proposals of ``batch`` (entries[at:at+len(batch)]): each memory's
        ``preceded_max`` nearest predecessors of the same key are its candidates."""
        n = self.settings.preceded_max
        wanted: dict[str, list[str]] = {}
        for i, entry in enumerate(batch, start=at):
            before = [e.id for e in entries[max(0, i - n) : i] if e.key == entry.key]
            wanted[entry.id] = before
        ids = set(wanted) | {c for cs in wanted.values() for c in cs}
        held = await self.stores.get(run.tenant, sorted(ids))
        proposals: list[Relation] = []
        for id_, before in wanted.items():
            memory = held.get(id_)
            if memory is None:
                continue  # deleted since the index was read
            candidates = [held[c] for c in before if c in held]
            proposals.extend(preceded_by(memory, candidates, run.now, self.settings))
        await self._write(run, list(wanted), proposals)

    def _publisher(self, run: Run, r: Relation, event_id: str) -> Callable[[], Awaitable[bool]]:
        return lambda: self.stores.events.relation_added(run.tenant, r, event_id)

    # --- writing -----------------------------------------------------------------------

    async def _write(self, run: Run, ids: Iterable[str], proposals: Sequence[Relation]) -> None:
        if not proposals:
            return
        # Every proposal touches one of `ids`: the edges of that end hold its key, if any.
        scope = set(ids)
        ends = {p.source_id if p.source_id in scope else p.target_id for p in proposals}
        existing = await self.stores.relations(run.tenant, sorted(ends))
        plan = reconcile(proposals, existing, self.settings)
        publish = []
        keys = []
        for write in plan.writes:
            r = write.relation
            key = edge_key(r)
            if key in self._written:
                continue
            keys.append(key)
            change = "created" if write.change is Change.CREATE else "updated"
            run.tally.add(f"{r.type.lower()}_{change}", [edge_label(r.source_id, r.target_id)])
            publish.append(self._publisher(run, r, run.event_id("edge", *key)))
        if not run.dry_run:
            # A page that fails is redone from the checkpoint, with its tally: counting
            # before the publishes counts nothing twice, remembering after them loses none.
            await self.stores.all(publish, "publish relation")
        self._written.update(keys)
        for r in plan.user_owned:
            key = edge_key(r)
            if key not in self._user_edges:
                self._user_edges.add(key)
                run.tally.add(USER_EDGE_KEPT, [edge_label(r.source_id, r.target_id)])
