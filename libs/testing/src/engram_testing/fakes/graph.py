"""An in-memory `GraphStore` for unit tests: dicts, a breadth-first walk, the reference filter."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engram_core.errors import NotFound
from engram_core.filters import matches
from engram_core.model import (
    Entity,
    Filter,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    UpsertResult,
)
from engram_core.relations import ORIGIN_SYSTEM, ORIGIN_USER, relation_versions
from engram_testing.fakes.common import FakeStore


@dataclass(frozen=True, slots=True)
class _Edge:
    relation: Relation
    version: int


_EdgeKey = tuple[str, str, str, str]  # tenant, source, target, type


class FakeGraphStore(FakeStore[tuple[Entity, ...]]):
    """Keeps each memory's mentions and the edges. Set ``failure`` to make every call raise it."""

    def __init__(self) -> None:
        super().__init__()
        self._entities: dict[tuple[str, str], Entity] = {}
        self._edges: dict[_EdgeKey, _Edge] = {}

    def _forget(self, tenant: str, id_: str) -> None:
        for key in [k for k in self._edges if k[0] == tenant and id_ in (k[1], k[2])]:
            del self._edges[key]

    def _forget_tenant(self, tenant: str) -> None:
        self._edges = {k: e for k, e in self._edges.items() if k[0] != tenant}
        self._entities = {k: e for k, e in self._entities.items() if k[0] != tenant}

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[Entity]]]
    ) -> UpsertResult:
        self._check()
        applied = self._write(tenant, [(m, tuple(entities)) for m, entities in items])
        for _, entities in applied:
            for e in entities:
                self._entities.setdefault((tenant, e.key), e)
        return UpsertResult(applied=len(applied), skipped=len(items) - len(applied))

    async def add_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        self._check()
        per = relation_versions(len(relations), version, versions)
        for r in relations:
            for id_ in (r.source_id, r.target_id):
                if self._live(tenant, id_) is None:
                    raise NotFound(f"memory {id_} not found")
        applied = 0
        for r, v in zip(relations, per, strict=True):
            key = (tenant, r.source_id, r.target_id, r.type)
            old = self._edges.get(key)
            if old is not None:
                if r.origin == ORIGIN_SYSTEM and old.relation.origin == ORIGIN_USER:
                    continue
                if v < old.version:
                    continue
                r = replace(r, created_at=old.relation.created_at)
            self._edges[key] = _Edge(r, v)
            applied += 1
        return applied

    async def remove_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        self._check()
        removed = 0
        for r, v in zip(
            relations, relation_versions(len(relations), version, versions), strict=True
        ):
            key = (tenant, r.source_id, r.target_id, r.type)
            old = self._edges.get(key)
            if old is None or v < old.version:
                continue
            if r.origin == ORIGIN_SYSTEM and old.relation.origin == ORIGIN_USER:
                continue
            del self._edges[key]
            removed += 1
        return removed

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
        live = list(self._all_live(tenant))
        df = {k: sum(1 for _, ents in live if k in {e.key for e in ents}) for k in matched}
        scored = []
        for m, entities in live:
            if not matches(m, flt):
                continue
            keys = sorted({e.key for e in entities} & matched)
            if keys:
                scored.append((sum(math.log(1.0 + len(live) / df[k]) for k in keys), m))
        scored.sort(key=lambda sm: (-sm[0], -sm[1].timestamp.timestamp(), sm[1].id))
        return [Hit(id=m.id, score=float(s), memory=m) for s, m in scored[: max(limit, 0)]]

    async def relations(self, tenant: str, ids: Sequence[str], origin: str = "") -> list[Relation]:
        self._check()
        wanted = set(ids)
        return [
            edge.relation
            for (t, source, target, _), edge in self._edges.items()
            if t == tenant
            and (source in wanted or target in wanted)
            and origin in ("", edge.relation.origin)
        ]
