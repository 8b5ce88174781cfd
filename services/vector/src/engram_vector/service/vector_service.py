"""Upsert, delete, search, get, access stats, count, and what consolidation reads and writes
(scan, neighbours, relevance) over the generations of a vector store.

Every write and read but Search and Neighbours may name a generation ("" = the live one):
a rebuild fills a new one beside the live one, then swaps it in. Each generation records
the embedding model its vectors come from; an upsert of a memory embedded with another
model is refused (FailedPrecondition) so an ingest still on the old model waits in the log
until it is rolled out with the new one.

Search takes a query text or a vector. A text is embedded with the LIVE generation's
model (the service holds an embedder per model it can serve: its ``embed`` and optional
``next_embed``); the embedding is cached in the Cache port under a key holding the tenant
and model name, so a model change never serves stale vectors and one tenant's queries
leave no trace another can time.
"""

from __future__ import annotations

import array
import hashlib
import logging
import math
from collections.abc import Sequence
from typing import Protocol

from engram_core.errors import FailedPrecondition, InvalidArgument, Unavailable
from engram_core.generation_routing import GenerationRouted
from engram_core.generations import GenerationRecord
from engram_core.model import Filter, Hit, Memory, ScanPage, UpsertResult
from engram_core.ports import Cache, Embedder, Generations, VectorIndex

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


class VectorGenerations(Generations, Protocol):
    """What the service needs of a backend's generations (each adapter family has one)."""

    async def record(self, generation: str = "", *, fresh: bool = False) -> GenerationRecord:
        """The record of a generation ("" = the live one; unknown → NotFound); ``fresh``
        re-reads what other replicas may have changed."""
        ...

    async def index(self, generation: str = "") -> VectorIndex: ...

    async def close(self) -> None: ...


class VectorService(GenerationRouted[VectorIndex]):
    """The calls that only pick a generation's index come from `GenerationRouted`."""

    def __init__(
        self,
        generations: VectorGenerations,
        embedders: Sequence[Embedder],
        cache: Cache,
        *,
        query_cache_ttl_s: float = 3600.0,
    ) -> None:
        super().__init__(generations)
        self._generations = generations  # its records too (model, dimension)
        self._embedders = {e.model_name: e for e in embedders}
        self._cache = cache
        self._ttl = query_cache_ttl_s

    async def check_live_model(self) -> None:
        """Fail the start when the live generation's model has no embedder here, or one of
        another dimension (queries could never be embedded for it)."""
        live = await self._generations.record()
        embedder = self._embedders.get(live.embedding_model)
        if embedder is None:
            known = ", ".join(sorted(self._embedders))
            raise ValueError(
                f"the live generation {live.name} holds vectors of {live.embedding_model!r}, "
                f"which no configured embedder provides (configured: {known}): point "
                "EMBED__MODEL_DIR at that model, or add the new one as NEXT_EMBED and "
                "Rebuild (libs/embed/README.md, choosing another model)"
            )
        if embedder.dimension != live.dimension:
            raise ValueError(
                f"embedder {embedder.model_name} gives {embedder.dimension}-d vectors, "
                f"the index holds {live.dimension}-d ones"
            )

    async def dimension(self, generation: str = "") -> int:
        return (await self._generations.record(generation)).dimension

    async def upsert(
        self,
        tenant: str,
        items: Sequence[tuple[Memory, Sequence[float]]],
        generation: str = "",
    ) -> UpsertResult:
        record = await self._generations.record(generation)
        if _foreign_model(items, record) is not None:
            # Another replica may have swapped meanwhile: look again before refusing.
            record = await self._generations.record(generation, fresh=True)
            wrong = _foreign_model(items, record)
            if wrong is not None:
                raise FailedPrecondition(
                    f"points[{wrong}].memory.embedding_model",
                    f"{items[wrong][0].embedding_model!r} is not the model of generation "
                    f"{record.name} ({record.embedding_model!r})",
                )
        checked = [
            (memory, check_vector(vector, record.dimension, f"points[{i}].vector"))
            for i, (memory, vector) in enumerate(items)
        ]
        return await (await self._index(generation)).upsert(tenant, checked)

    async def search(
        self,
        tenant: str,
        flt: Filter,
        limit: int,
        *,
        query: str = "",
        vector: Sequence[float] = (),
    ) -> list[Hit]:
        """Search the live generation by ``vector`` when given, else by the embedding of
        ``query`` with the live generation's model."""
        values = await self._query_vector(tenant, query, vector)
        return await (await self._index("")).search(tenant, values, flt, limit)

    async def search_many(
        self,
        tenant: str,
        flts: Sequence[Filter],
        limit: int,
        *,
        query: str = "",
        vector: Sequence[float] = (),
    ) -> list[list[Hit]]:
        """One search per filter with one query: the query is embedded (or checked) once,
        and the searches run as one batch."""
        values = await self._query_vector(tenant, query, vector)
        return await (await self._index("")).search_batch(tenant, values, flts, limit)

    async def _query_vector(self, tenant: str, query: str, vector: Sequence[float]) -> list[float]:
        """``vector`` checked against the live generation, else ``query`` embedded by its model."""
        live = await self._generations.record()
        if vector:
            return check_vector(vector, live.dimension, "vector")
        if query.strip():
            return await self.embed_query(tenant, query, live)
        raise InvalidArgument("query", "give a query text or a vector")

    async def embed_query(
        self, tenant: str, text: str, live: GenerationRecord | None = None
    ) -> list[float]:
        live = live or await self._generations.record()
        embedder = self._embedders.get(live.embedding_model)
        if embedder is None:
            raise Unavailable(f"no embedder for {live.embedding_model!r}, the live model")
        # The model's query instruction is part of what is embedded, and so of the key.
        text = embedder.query_instruction + text
        key = _cache_key(embedder.model_name, tenant, text)
        cached = await self._cache.get(key)
        if cached is not None:
            values = array.array("f")
            values.frombytes(cached)
            if len(values) == embedder.dimension:
                return list(values)
            log.warning("ignoring a cached query embedding of the wrong size")
        [vector] = await embedder.embed([text])
        # float32 either way, so a cached answer scores exactly like a fresh one.
        packed = array.array("f", vector)
        await self._cache.set(key, packed.tobytes(), self._ttl)
        return list(packed)

    async def scan_by_sequence(
        self, tenant: str, cursor: str | None, limit: int, generation: str = ""
    ) -> ScanPage:
        return await (await self._index(generation)).scan_by_sequence(tenant, cursor, limit)

    async def neighbours(
        self, tenant: str, ids: Sequence[str], limit: int, min_score: float
    ) -> dict[str, list[Hit]]:
        return await (await self._index("")).neighbours(tenant, ids, limit, min_score)

    async def close(self) -> None:
        await super().close()
        await self._cache.close()


def _foreign_model(
    items: Sequence[tuple[Memory, Sequence[float]]], record: GenerationRecord
) -> int | None:
    """The first item embedded with a model other than the generation's ("" = not said)."""
    return next(
        (
            i
            for i, (m, _) in enumerate(items)
            if m.embedding_model and m.embedding_model != record.embedding_model
        ),
        None,
    )


def _cache_key(model: str, tenant: str, text: str) -> str:
    digest = hashlib.sha256(f"{tenant}\x1f{text}".encode()).hexdigest()
    return f"{CACHE_PREFIX}{model}:{digest}"
