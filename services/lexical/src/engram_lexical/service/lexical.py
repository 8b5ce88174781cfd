"""The lexical service's logic over the generations of a text index. No gRPC, no backend here.

Every write and read but Search may name a generation ("" = the live one): a rebuild fills a
new one beside the live one, then swaps it in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from engram_core.model import (
    AccessUpdate,
    Filter,
    Generation,
    Hit,
    Memory,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_core.ports import Generations, TextIndex
from engram_core.tags import tag_prefixes


@dataclass(frozen=True, slots=True)
class Limits:
    """Request bounds the handlers enforce (from settings)."""

    max_batch: int = 1000
    default_limit: int = 10
    max_limit: int = 1000
    max_query_chars: int = 4096


class TextGenerations(Generations, Protocol):
    """What the service needs of a backend's generations (each adapter family has one)."""

    async def index(self, generation: str = "") -> TextIndex:
        """The index of a generation ("" = the live one); unknown → NotFound."""
        ...

    async def close(self) -> None: ...


class LexicalService:
    """BM25 search and the write side of the text index, scoped to one tenant per call."""

    def __init__(self, generations: TextGenerations, limits: Limits | None = None) -> None:
        self._generations = generations
        self.limits = limits or Limits()

    async def _index(self, generation: str) -> TextIndex:
        return await self._generations.index(generation)

    async def upsert(
        self, tenant: str, memories: Sequence[Memory], generation: str = ""
    ) -> UpsertResult:
        # The request's tenant is the one that counts; tag_prefixes are derived when a writer
        # left them out, so Get returns what every filter sees.
        stamped = [
            replace(m, tenant=tenant, tag_prefixes=m.tag_prefixes or tag_prefixes(m.tags))
            for m in memories
        ]
        return await (await self._index(generation)).upsert(tenant, stamped)

    async def delete(
        self, tenant: str, ids: Sequence[str], version: int, generation: str = ""
    ) -> int:
        return await (await self._index(generation)).delete(tenant, ids, version)

    async def search(self, tenant: str, query: str, flt: Filter, limit: int) -> list[Hit]:
        index = await self._index("")
        return await index.search(tenant, query, flt, limit or self.limits.default_limit)

    async def get(self, tenant: str, ids: Sequence[str], generation: str = "") -> list[Memory]:
        return await (await self._index(generation)).get(tenant, ids)

    async def update_access(
        self, tenant: str, updates: Sequence[AccessUpdate], generation: str = ""
    ) -> int:
        return await (await self._index(generation)).update_access(tenant, updates)

    async def count(self, tenant: str, generation: str = "") -> int:
        return await (await self._index(generation)).count(tenant)

    async def scan(
        self, tenant: str, cursor: str | None, limit: int, generation: str = ""
    ) -> ScanPage:
        return await (await self._index(generation)).scan(tenant, cursor, limit)

    async def update_relevance(
        self, tenant: str, updates: Sequence[RelevanceUpdate], generation: str = ""
    ) -> int:
        return await (await self._index(generation)).update_relevance(tenant, updates)

    async def create_generation(self, embedding_model: str) -> Generation:
        return await self._generations.create_generation(embedding_model)

    async def list_generations(self) -> list[Generation]:
        return await self._generations.list_generations()

    async def swap_generation(self, name: str) -> Generation:
        return await self._generations.swap_generation(name)

    async def drop_generation(self, name: str) -> None:
        await self._generations.drop_generation(name)

    async def close(self) -> None:
        await self._generations.close()
