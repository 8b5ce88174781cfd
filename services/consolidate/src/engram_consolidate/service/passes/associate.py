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

An incremental run (params ``{"after", "upto"}``, set by the runner for a scheduled run
of a tenant that changed since a recent full run) reads the ids of the memories stored or
updated by the log's events in that range (``ChangeMarks.written_ids``; more than
``incremental_max`` of them: a full run). ``similar`` then proposes for those memories
only, page by page in id order (the cursor is the last id done), and removes a system
edge of theirs that neither end proposes (the other end is searched too, as in a full
run); ``sequence`` reads the index only when one of them has a sequence key, keeps only their
keys, and proposes only for those memories and the ``preceded_max`` after each in its key
(the ones whose predecessors they may be), removing what those no longer justify.
Removals a change implies elsewhere (an edge the new memory displaced from an old one's
nearest, neither of whose ends was written) wait for the next full run.

A system edge the rules no longer propose is removed (``RelationRemoved``, origin system,
so a user edge written meanwhile stays): a PRECEDED_BY from a memory of this page that is
not among its proposals; a SIMILAR_TO once both of its ends have been proposed for in this
process (either end may justify it; the scan is in id order, so that is the page of the
later end) and neither did. After a resume the ends read before it do not count, so an edge
between them waits for the next run. User edges are never removed.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from engram_consolidate.service.passes.base import Pass, Run, Step, Stores
from engram_consolidate.service.records import PassName, edge_label, incremental_window
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
from engram_core.relations import ORIGIN_SYSTEM, RelationType

DEFAULT_INCREMENTAL_MAX = 5_000  # events an incremental run reads before it goes full
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

    def __init__(
        self,
        stores: Stores,
        settings: AssociationSettings,
        incremental_max: int = DEFAULT_INCREMENTAL_MAX,
    ) -> None:
        super().__init__(stores)
        self.settings = settings
        self.incremental_max = incremental_max
        self._scope: list[str] | None = None  # an incremental run's memories, in id order
        self._scope_read = False
        # Edges this run wrote: a similar pair is proposed from both ends, on two pages,
        # before ingest has applied the first write (after a crash this is lost, and such
        # a pair may be counted twice; the log still drops the second event).
        self._written: set[tuple[str, str, str]] = set()
        self._user_edges: set[tuple[str, str, str]] = set()  # user edges met, likewise
        # SIMILAR_TO: memories proposed for in this process, and the pairs proposed.
        self._similar_seen: set[str] = set()
        self._similar_proposed: set[tuple[str, str, str]] = set()
        self._removed: set[tuple[str, str, str]] = set()

    async def total(self, run: Run, phase: str) -> int:
        if phase == SIMILAR:
            scope = await self._scoped(run)
            if scope is not None:
                return len(scope)
            return await self.stores.bounded(self.stores.vector.count(run.tenant), "vector count")
        return 0  # the sequence index's size, once it is built

    def steps(self, run: Run, phase: str, cursor: str) -> AsyncIterator[Step]:
        return self._similar(run, cursor) if phase == SIMILAR else self._sequence(run, cursor)

    async def _scoped(self, run: Run) -> list[str] | None:
        """An incremental run's memories (ids in order), or None: a full run. Read once per
        run (a pass object serves one run); a resumed run reads the same range again."""
        if self._scope_read:
            return self._scope
        window = incremental_window(run.params)
        marks = self.stores.marks
        if window is not None and marks is not None:
            ids = await self.stores.bounded(
                marks.written_ids(run.tenant, *window, self.incremental_max), "log read"
            )
            self._scope = None if ids is None else sorted(ids)
        self._scope_read = True
        return self._scope

    # --- SIMILAR_TO --------------------------------------------------------------------

    async def _similar(self, run: Run, cursor: str) -> AsyncIterator[Step]:
        scope = await self._scoped(run)
        if scope is None and incremental_window(run.params) is not None:
            # Over incremental_max events: a full run, and its params say so from here on.
            run.params = ""
            yield Step(cursor, 0, params="")
        if scope is not None:
            async for step in self._similar_of(run, scope, cursor):
                yield step
            return
        async for memories, after in self.stores.pages(run.tenant, cursor):
            await self._similar_page(run, memories, self._stale_similar)
            yield Step(after, len(memories))

    async def _similar_of(self, run: Run, ids: list[str], cursor: str) -> AsyncIterator[Step]:
        """Proposals for ``ids`` only, after ``cursor`` (the last id done)."""
        start = bisect.bisect_right(ids, cursor) if cursor else 0
        if start >= len(ids):
            yield Step(None, 0)
            return
        page = self.stores.page_size
        for at in range(start, len(ids), page):
            chunk = ids[at : at + page]
            held = await self.stores.get(run.tenant, chunk)
            sources, proposals = await self._proposals(run, [held[i] for i in chunk if i in held])
            if sources:
                existing = await self.stores.relations(run.tenant, sources)
                stale = await self._stale_around(run, set(sources), proposals, existing)
                await self._write(run, sources, proposals, stale, existing)
            yield Step(None if at + page >= len(ids) else chunk[-1], len(chunk))

    async def _similar_page(
        self, run: Run, memories: list[Memory], stale: Callable[[Relation], bool]
    ) -> None:
        sources, proposals = await self._proposals(run, memories)
        if sources:
            self._similar_seen.update(sources)
            self._similar_proposed.update(edge_key(p) for p in proposals)
            await self._write(run, sources, proposals, stale)

    async def _proposals(
        self, run: Run, memories: list[Memory]
    ) -> tuple[list[str], list[Relation]]:
        """The memories searched (MetaPatterns are not) and their SIMILAR_TO proposals."""
        sources = [m.id for m in memories if m.type != META_PATTERN]
        if not sources or self.settings.similar_max_per_memory <= 0:
            return [], []
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
        return sources, similar_to(hits, run.now, self.settings)

    async def _stale_around(
        self,
        run: Run,
        sources: set[str],
        proposals: Sequence[Relation],
        existing: Sequence[Relation],
    ) -> Callable[[Relation], bool]:
        """An incremental run's stale SIMILAR_TO: a system edge of a memory written since
        that neither end proposes — its other end is searched too, as a full run would."""
        proposed = {edge_key(p) for p in proposals}
        suspects = [
            r
            for r in existing
            if r.type == RelationType.SIMILAR_TO.value
            and r.origin == ORIGIN_SYSTEM
            and edge_key(r) not in proposed
        ]
        ends = {r.source_id for r in suspects} | {r.target_id for r in suspects}
        others = sorted(ends - sources)
        if others:
            held = await self.stores.get(run.tenant, others)
            _, theirs = await self._proposals(run, [held[i] for i in others if i in held])
            proposed |= {edge_key(p) for p in theirs}
        stale = {edge_key(r) for r in suspects} - proposed
        return lambda r: r.type == RelationType.SIMILAR_TO.value and edge_key(r) in stale

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

    def _key(self, m: Memory) -> str | None:
        return self.settings.key.of(m) if m.type != META_PATTERN else None

    async def _index(self, run: Run, keys: set[str] | None) -> AsyncIterator[list[_Entry] | None]:
        """Yields None per page read (a heartbeat), then the sorted index (of ``keys``
        only, unless None)."""
        entries: list[_Entry] = []
        async for memories, _ in self.stores.pages(run.tenant, ""):
            for m in memories:
                key = self._key(m)
                if key is not None and (keys is None or key in keys):
                    entries.append(_Entry(key, m.timestamp, m.id))
            yield None
        entries.sort()
        yield entries

    async def _sequence(self, run: Run, cursor: str) -> AsyncIterator[Step]:
        if self.settings.preceded_max == 0:
            yield Step(None, 0)
            return
        scope = await self._scoped(run)
        keys: set[str] | None = None
        if scope is not None:  # only the sequences of what was written can change
            held = await self.stores.get(run.tenant, scope)
            keys = {k for m in held.values() if (k := self._key(m)) is not None}
            if not keys:
                yield Step(None, 0, total=0)  # none in a sequence: no index to read
                return
        entries: list[_Entry] = []
        async for built in self._index(run, keys):
            if built is None:
                yield Step(cursor, 0)  # reading: checkpoint nothing new, renew the lease
            else:
                entries = built
        todo = (
            list(range(len(entries)))
            if scope is None
            else affected(entries, set(scope), self.settings.preceded_max)
        )
        total = len(todo)
        if cursor:
            done = _Entry.parse(cursor)
            todo = todo[bisect.bisect_right([entries[i] for i in todo], done) :]
        page = self.stores.page_size
        if not todo:
            yield Step(None, 0, total=total)
            return
        for at in range(0, len(todo), page):
            batch = todo[at : at + page]
            await self._preceded(run, entries, batch)
            last = at + len(batch) >= len(todo)
            cursor_after = None if last else entries[batch[-1]].cursor()
            yield Step(cursor_after, len(batch), total=total)

    async def _preceded(self, run: Run, entries: Sequence[_Entry], batch: Sequence[int]) -> None:
        """PRECEDED_BY proposals of the entries at positions ``batch``: each memory's
        ``preceded_max`` nearest predecessors of the same key are its candidates."""
        n = self.settings.preceded_max
        wanted: dict[str, list[str]] = {}
        for i in batch:
            entry = entries[i]
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
        proposed = {edge_key(p) for p in proposals}
        sources = {id_ for id_ in wanted if id_ in held}

        def stale(r: Relation) -> bool:
            return (
                r.type == RelationType.PRECEDED_BY.value
                and r.source_id in sources
                and edge_key(r) not in proposed
            )

        await self._write(run, sorted(sources), proposals, stale)

    def _stale_similar(self, r: Relation) -> bool:
        return (
            r.type == RelationType.SIMILAR_TO.value
            and r.source_id in self._similar_seen
            and r.target_id in self._similar_seen
            and edge_key(r) not in self._similar_proposed
        )

    def _publisher(self, run: Run, r: Relation, event_id: str) -> Callable[[], Awaitable[bool]]:
        return lambda: self.stores.events.relation_added(run.tenant, r, event_id)

    # --- writing -----------------------------------------------------------------------

    async def _write(
        self,
        run: Run,
        ids: Iterable[str],
        proposals: Sequence[Relation],
        stale: Callable[[Relation], bool],
        existing: Sequence[Relation] | None = None,
    ) -> None:
        """``existing``: the edges of ``ids``, when already read."""
        # Every proposal touches one of `ids`, and so does every edge that may be stale.
        scope = sorted(set(ids))
        if not scope:
            return
        if existing is None:
            existing = await self.stores.relations(run.tenant, scope)
        await self._remove(run, [r for r in existing if r.origin == ORIGIN_SYSTEM and stale(r)])
        if not proposals:
            return
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

    async def _remove(self, run: Run, edges: Sequence[Relation]) -> None:
        publish = []
        keys = []
        for r in edges:
            key = edge_key(r)
            if key in self._removed:
                continue
            keys.append(key)
            run.tally.add(f"{r.type.lower()}_removed", [edge_label(r.source_id, r.target_id)])
            publish.append(self._remover(run, r, run.event_id("unlink", *key)))
        if not run.dry_run and publish:
            await self.stores.all(publish, "publish relation removal")
        self._removed.update(keys)

    def _remover(self, run: Run, r: Relation, event_id: str) -> Callable[[], Awaitable[bool]]:
        return lambda: self.stores.events.relation_removed(run.tenant, r, event_id)


def affected(entries: Sequence[_Entry], ids: set[str], n: int) -> list[int]:
    """Positions in ``entries`` (sorted by key, then time) whose predecessors may have
    changed: each memory of ``ids`` and the ``n`` after it in its key."""
    out: set[int] = set()
    for i, entry in enumerate(entries):
        if entry.id not in ids:
            continue
        for j in range(i, min(len(entries), i + n + 1)):
            if entries[j].key != entry.key:
                break
            out.add(j)
    return sorted(out)
