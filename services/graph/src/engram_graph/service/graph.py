"""The graph service's logic over the `GraphStore` port. No gRPC, no backend here.

It owns the rules that do not depend on the transport: relation types come from the one
registry (engram_core.relations), strengths are in [0, 1], walks are 1..3 hops, limits and
batch sizes are bounded. Errors name the request field (``relations[2].type``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from engram_core.errors import InvalidArgument
from engram_core.model import (
    ENTITY_KINDS,
    AccessUpdate,
    Entity,
    Filter,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_core.ports import GraphStore
from engram_core.relations import (
    MEMORY_EDGE_TYPES,
    ORIGINS,
    parse_relation_type,
    relation_versions,
)
from engram_core.tags import tag_prefixes
from engram_core.validation import check_limit, check_relation_types

MAX_DEPTH = 3


@dataclass(frozen=True, slots=True)
class Limits:
    """Request bounds (from settings)."""

    max_batch: int = 1000
    default_limit: int = 10
    max_limit: int = 1000
    max_seeds: int = 64  # entity keys, and keywords, per search


def _check_count(field: str, count: int, most: int) -> None:
    if count > most:
        raise InvalidArgument(field, f"at most {most} per request, got {count}")


def _check_entity(field: str, e: Entity) -> Entity:
    if e.kind not in ENTITY_KINDS:
        raise InvalidArgument(f"{field}.kind", f"one of {', '.join(sorted(ENTITY_KINDS))}")
    if not e.slug or any(ch.isspace() for ch in e.slug):
        raise InvalidArgument(f"{field}.slug", "must be non-empty and without whitespace")
    # An unnamed entity is still findable by keyword: its slug stands in for the name.
    return e if e.name.strip() else replace(e, name=e.slug)


def _check_relation(field: str, r: Relation) -> Relation:
    if not r.source_id:
        raise InvalidArgument(f"{field}.source_id", "must not be empty")
    if not r.target_id:
        raise InvalidArgument(f"{field}.target_id", "must not be empty")
    if r.source_id == r.target_id:
        raise InvalidArgument(f"{field}.target_id", "a memory cannot relate to itself")
    parsed = parse_relation_type(r.type)
    if parsed is None or parsed.value not in MEMORY_EDGE_TYPES:
        known = ", ".join(sorted(MEMORY_EDGE_TYPES))
        raise InvalidArgument(
            f"{field}.type", f"unknown relation type {r.type[:64]!r}; one of {known}"
        )
    if not (math.isfinite(r.strength) and 0.0 <= r.strength <= 1.0):
        raise InvalidArgument(f"{field}.strength", f"must be within [0, 1], got {r.strength!r}")
    if r.origin not in ORIGINS:
        raise InvalidArgument(f"{field}.origin", f"one of {', '.join(ORIGINS)}")
    return replace(r, type=parsed.value)


def _check_edge_key(field: str, r: Relation) -> Relation:
    """What a removal reads of a relation: its ends, type and origin (strength is moot)."""
    return _check_relation(field, replace(r, strength=0.0))


def _check_versions(count: int, version: int, versions: Sequence[int]) -> list[int]:
    """One version per relation: ``versions`` as given, or ``version`` for each."""
    if version < 0:
        raise InvalidArgument("version", "must be >= 0")
    for i, v in enumerate(versions):
        if v < 0:
            raise InvalidArgument(f"versions[{i}]", "must be >= 0")
    return relation_versions(count, version, versions)


class GraphService:
    """Memory nodes, entities and relations of one tenant per call."""

    def __init__(self, store: GraphStore, limits: Limits | None = None) -> None:
        self._store = store
        self.limits = limits or Limits()

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[Entity]]]
    ) -> UpsertResult:
        _check_count("memories", len(items), self.limits.max_batch)
        checked = []
        for i, (m, entities) in enumerate(items):
            ents = [
                _check_entity(f"memories[{i}].entities[{j}]", e) for j, e in enumerate(entities)
            ]
            # The request's tenant is the one that counts; prefixes derived when left out.
            stamped = replace(m, tenant=tenant, tag_prefixes=m.tag_prefixes or tag_prefixes(m.tags))
            checked.append((stamped, ents))
        return await self._store.upsert(tenant, checked)

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        _check_count("ids", len(ids), self.limits.max_batch)
        if version < 0:
            raise InvalidArgument("version", "must be >= 0")
        return await self._store.delete(tenant, ids, version)

    async def add_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        checked, per = self._check_edges(relations, version, versions, _check_relation)
        return await self._store.add_relations(tenant, checked, version, per)

    async def remove_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        checked, per = self._check_edges(relations, version, versions, _check_edge_key)
        return await self._store.remove_relations(tenant, checked, version, per)

    def _check_edges(
        self,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int],
        check: Callable[[str, Relation], Relation],
    ) -> tuple[list[Relation], list[int]]:
        """A batch of relations to add or remove, each checked, with its version."""
        _check_count("relations", len(relations), self.limits.max_batch)
        per = _check_versions(len(relations), version, versions)
        return [check(f"relations[{i}]", r) for i, r in enumerate(relations)], per

    async def related(
        self, tenant: str, id: str, depth: int, types: Sequence[str], limit: int
    ) -> list[RelatedHit]:
        if not id:
            raise InvalidArgument("id", "must not be empty")
        hops = check_limit(depth, "depth", 1, MAX_DEPTH)
        # Any registry type is accepted (the gateway forwards what clients ask for); MENTIONS
        # links no two memories, so asking for it alone finds nothing.
        kinds = check_relation_types(types, "types")
        count = check_limit(limit, "limit", self.limits.default_limit, self.limits.max_limit)
        return await self._store.related(tenant, id, hops, kinds, count)

    async def search(
        self,
        tenant: str,
        entity_keys: Sequence[str],
        keywords: Sequence[str],
        flt: Filter,
        limit: int,
    ) -> list[Hit]:
        _check_count("entity_keys", len(entity_keys), self.limits.max_seeds)
        _check_count("keywords", len(keywords), self.limits.max_seeds)
        for i, key in enumerate(entity_keys):
            kind, _, slug = key.partition(":")
            if kind not in ENTITY_KINDS or not slug:
                raise InvalidArgument(
                    f"entity_keys[{i}]", "must be '<kind>:<slug>' of a known kind"
                )
        words = [w.strip() for w in keywords]
        for i, word in enumerate(words):
            if not word:
                raise InvalidArgument(f"keywords[{i}]", "must not be empty")
        count = check_limit(limit, "limit", self.limits.default_limit, self.limits.max_limit)
        if not entity_keys and not words:
            return []
        return await self._store.search(tenant, entity_keys, words, flt, count)

    async def relations(self, tenant: str, ids: Sequence[str], origin: str = "") -> list[Relation]:
        _check_count("ids", len(ids), self.limits.max_batch)
        if origin and origin not in ORIGINS:
            raise InvalidArgument("origin", f"'' (every edge) or one of {', '.join(ORIGINS)}")
        return await self._store.relations(tenant, ids, origin)

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        _check_count("ids", len(ids), self.limits.max_batch)
        return await self._store.get(tenant, ids)

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        _check_count("updates", len(updates), self.limits.max_batch)
        return await self._store.update_access(tenant, updates)

    async def count(self, tenant: str) -> int:
        return await self._store.count(tenant)

    async def delete_tenant(self, tenant: str) -> int:
        return await self._store.delete_tenant(tenant)

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        if not 1 <= limit <= self.limits.max_limit:
            raise InvalidArgument("limit", f"must be within 1..{self.limits.max_limit}")
        return await self._store.scan(tenant, cursor, limit)

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int:
        _check_count("updates", len(updates), self.limits.max_batch)
        for i, u in enumerate(updates):
            if not (math.isfinite(u.relevance_score) and 0.0 <= u.relevance_score <= 1.0):
                raise InvalidArgument(f"updates[{i}].relevance_score", "must be within [0, 1]")
        return await self._store.update_relevance(tenant, updates)

    async def close(self) -> None:
        await self._store.close()
