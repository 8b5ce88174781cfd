"""Upsert, delete, search, get, access stats, count, and what consolidation reads and writes
(scan, neighbours, relevance) over a VectorIndex.

Search takes a query text or a vector. A text is embedded with the query Embedder
(the same model the ingest worker embeds documents with); its embedding is cached
in the Cache port under a key holding the tenant and model name, so a model change
never serves stale vectors and one tenant's queries leave no trace another can time.
"""

from __future__ import annotations

import array
import hashlib
import logging
import math
from collections.abc import Sequence

from engram_core.errors import InvalidArgument
from engram_core.model import (
    AccessUpdate,
    Filter,
    Hit,
    Memory,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_core.ports import Cache, Embedder, VectorIndex

log = logging.getLogger(__name__)
CACHE_PREFIX = "vector:qemb:"


def check_vector(vector: Sequence[float], dimension: int, field: str) -> list[float]:
    if len(vector) != dimension:
        raise InvalidArgument(field, f"expected {dimension} dimensions, got {len(vector)}")
    values = [float(x) for x in vector]
    if not all(math.isfinite(x) for x in values):
        raise InvalidArgument(field, "must hold finite numbers only")
    if not any(values):
        raise InvalidArgument(field, "must not be all zeros (no direction for cosine)")
    return values


class VectorService:
    def __init__(
        self,
        index: VectorIndex,
        embedder: Embedder,
        cache: Cache,
        *,
        query_cache_ttl_s: float = 3600.0,
    ) -> None:
        if embedder.dimension != index.dimension:
            raise ValueError(
                f"embedder {embedder.model_name} gives {embedder.dimension}-d vectors, "
                f"the index holds {index.dimension}-d ones"
            )
        self._index = index
        self._embedder = embedder
        self._cache = cache
        self._ttl = query_cache_ttl_s

    @property
    def dimension(self) -> int:
        return self._index.dimension

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[float]]]
    ) -> UpsertResult:
        checked = [
            (memory, check_vector(vector, self.dimension, f"points[{i}].vector"))
            for i, (memory, vector) in enumerate(items)
        ]
        return await self._index.upsert(tenant, checked)

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        return await self._index.delete(tenant, ids, version)

    async def search(
        self,
        tenant: str,
        flt: Filter,
        limit: int,
        *,
        query: str = "",
        vector: Sequence[float] = (),
    ) -> list[Hit]:
        """Search by ``vector`` when given, else by the embedding of ``query``."""
        if vector:
            values = check_vector(vector, self.dimension, "vector")
        elif query.strip():
            values = await self.embed_query(tenant, query)
        else:
            raise InvalidArgument("query", "give a query text or a vector")
        return await self._index.search(tenant, values, flt, limit)

    async def embed_query(self, tenant: str, text: str) -> list[float]:
        key = self._cache_key(tenant, text)
        cached = await self._cache.get(key)
        if cached is not None:
            values = array.array("f")
            values.frombytes(cached)
            if len(values) == self.dimension:
                return list(values)
            log.warning("ignoring a cached query embedding of the wrong size")
        [vector] = await self._embedder.embed([text])
        # float32 either way, so a cached answer scores exactly like a fresh one.
        packed = array.array("f", vector)
        await self._cache.set(key, packed.tobytes(), self._ttl)
        return list(packed)

    def _cache_key(self, tenant: str, text: str) -> str:
        digest = hashlib.sha256(f"{tenant}\x1f{text}".encode()).hexdigest()
        return f"{CACHE_PREFIX}{self._embedder.model_name}:{digest}"

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        return await self._index.get(tenant, ids)

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        return await self._index.update_access(tenant, updates)

    async def count(self, tenant: str) -> int:
        return await self._index.count(tenant)

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage:
        return await self._index.scan(tenant, cursor, limit)

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int:
        return await self._index.update_relevance(tenant, updates)

    async def neighbours(
        self, tenant: str, ids: Sequence[str], limit: int, min_score: float
    ) -> dict[str, list[Hit]]:
        return await self._index.neighbours(tenant, ids, limit, min_score)

    async def close(self) -> None:
        await self._index.close()
        await self._cache.close()
