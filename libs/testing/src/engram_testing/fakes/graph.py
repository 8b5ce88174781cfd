"""An in-memory `GraphStore` for unit tests: dicts, a breadth-first walk, the reference filter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from engram_core.access import apply_access, keep_access
from engram_core.errors import EngramError, NotFound
from engram_core.filters import matches
from engram_core.model import (
    AccessUpdate,
    Entity,
    Filter,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    UpsertResult,
)


@dataclass(frozen=True, slots=True)
class _Node:
    version: int
    memory: Memory | None  # None: a tombstone
    mentions: frozenset[str] = frozenset()  # entity keys "kind:slug"


@dataclass(frozen=True, slots=True)
class _Edge:
    relation: Relation
    version: int


_EdgeKey = tuple[str, str, str, str]  # tenant, source, target, type


class FakeGraphStore:
    """Holds everything in dicts. Set ``failure`` to make every call raise it (a backend down)."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[str, str], _Node] = {}
        self._entities: dict[tuple[str, str], Entity] = {}
        self._edges: dict[_EdgeKey, _Edge] = {}
        self.failure: EngramError | None = None

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _live(self, tenant: str, id_: str) -> _Node | None:
        node = self._nodes.get((tenant, id_))
        return None if node is None or node.memory is None else node

    def _drop_edges(self, tenant: str, id_: str) -> None:
        for key in [k for k in self._edges if k[0] == tenant and id_ in (k[1], k[2])]:
            del self._edges[key]

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[Entity]]]
    ) -> UpsertResult:
        self._check()
        newest: dict[str, tuple[Memory, Sequence[Entity]]] = {}
        for m, entities in items:
            if m.id not in newest or m.version > newest[m.id][0].version:
                newest[m.id] = (m, entities)
        applied = 0
        for m, entities in newest.values():
            node = self._nodes.get((tenant, m.id))
            if node is not None and m.version <= node.version:
                continue
            for e in entities:
                self._entities.setdefault((tenant, e.key), e)
            stored = replace(m, tenant=tenant)
            if node is not None and node.memory is not None:
                stored = keep_access(stored, node.memory)
            self._nodes[(tenant, m.id)] = _Node(
                m.version, stored, frozenset(e.key for e in entities)
            )
            applied += 1
        return UpsertResult(applied=applied, skipped=len(items) - applied)

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        self._check()
        deleted = 0
        for id_ in dict.fromkeys(ids):
            node = self._nodes.get((tenant, id_))
            if node is not None and version <= node.version:
                continue
            if node is not None and node.memory is not None:
                deleted += 1
            self._drop_edges(tenant, id_)
            self._nodes[(tenant, id_)] = _Node(version, None)
        return deleted

    async def add_relations(self, tenant: str, relations: Sequence[Relation], version: int) -> int:
        self._check()
        for r in relations:
            for id_ in (r.source_id, r.target_id):
                if self._live(tenant, id_) is None:
                    raise NotFound(f"memory {id_} not found")
        applied = 0
        for r in relations:
            key = (tenant, r.source_id, r.target_id, r.type)
            old = self._edges.get(key)
            if old is not None:
                if r.origin == "system" and old.relation.origin == "user":
                    continue
                if version < old.version:
                    continue
                r = replace(r, created_at=old.relation.created_at)
            self._edges[key] = _Edge(r, version)
            applied += 1
        return applied

    def _neighbours(
        self, tenant: str, id_: str, types: Sequence[str]
    ) -> list[tuple[str, str, float]]:
        out = []
        for (t, source, target, type_), edge in self._edges.items():
            if t != tenant or (types and type_ not in types):
                continue
            if source == id_:
                out.append((target, type_, edge.relation.strength))
            elif target == id_:
                out.append((source, type_, edge.relation.strength))
        return out

    async def related(
        self, tenant: str, id: str, depth: int, types: Sequence[str], limit: int
    ) -> list[RelatedHit]:
        self._check()
        if self._live(tenant, id) is None:
            raise NotFound(f"memory {id} not found")
        seen = {id}
        frontier: dict[str, tuple[float, str]] = {id: (1.0, "")}
        hits: list[RelatedHit] = []
        for d in range(1, depth + 1):
            level: dict[str, tuple[float, str]] = {}
            for node, (strength, first) in frontier.items():
                for other, type_, s in self._neighbours(tenant, node, types):
                    if other in seen or self._live(tenant, other) is None:
                        continue
                    candidate = (strength * s, first or type_)
                    best = level.get(other)
                    if best is None or (-candidate[0], candidate[1]) < (-best[0], best[1]):
                        level[other] = candidate
            if not level:
                break
            seen.update(level)
            ranked = sorted(level.items(), key=lambda kv: (-kv[1][0], kv[0]))
            hits.extend(RelatedHit(id=k, type=v[1], strength=v[0], depth=d) for k, v in ranked)
            if len(hits) >= limit:
                break
            frontier = level
        return hits[: max(limit, 0)]

    async def search(
        self,
        tenant: str,
        entity_keys: Sequence[str],
        keywords: Sequence[str],
        flt: Filter,
        limit: int,
    ) -> list[Hit]:
        self._check()
        wanted_keys = set(entity_keys)
        words = [k.lower() for k in keywords if k]
        matched = {
            key
            for (t, key), e in self._entities.items()
            if t == tenant and (key in wanted_keys or any(w in e.name.lower() for w in words))
        }
        scored = []
        for (t, _), node in self._nodes.items():
            if t != tenant or node.memory is None or not matches(node.memory, flt):
                continue
            score = len(node.mentions & matched)
            if score:
                scored.append((score, node.memory))
        scored.sort(key=lambda sm: (-sm[0], -sm[1].timestamp.timestamp(), sm[1].id))
        return [Hit(id=m.id, score=float(s), memory=m) for s, m in scored[: max(limit, 0)]]

    async def relations(self, tenant: str, ids: Sequence[str]) -> list[Relation]:
        self._check()
        wanted = set(ids)
        return [
            edge.relation
            for (t, source, target, _), edge in self._edges.items()
            if t == tenant and (source in wanted or target in wanted)
        ]

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        self._check()
        found = (self._live(tenant, i) for i in dict.fromkeys(ids))
        return [n.memory for n in found if n is not None and n.memory is not None]

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        self._check()
        updated = 0
        for u in updates:
            node = self._live(tenant, u.id)
            if (
                node is None
                or node.memory is None
                or (changed := apply_access(node.memory, u)) is None
            ):
                continue
            self._nodes[(tenant, u.id)] = replace(node, memory=changed)
            updated += 1
        return updated

    async def count(self, tenant: str) -> int:
        self._check()
        return sum(1 for (t, _), n in self._nodes.items() if t == tenant and n.memory is not None)

    async def close(self) -> None:
        return None
