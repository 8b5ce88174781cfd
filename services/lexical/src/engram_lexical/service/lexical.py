"""The lexical service's logic over the `TextIndex` port. No gRPC, no backend here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from engram_core.model import (
    AccessUpdate,
    Filter,
    Hit,
    Memory,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_core.ports import TextIndex
from engram_core.tags import tag_prefixes


@dataclass(frozen=True, slots=True)
class Limits:
    """Request bounds the handlers enforce (from settings)."""

    max_batch: int = 1000
    default_limit: int = 10
    max_limit: int = 1000
    max_query_chars: int = 4096


class LexicalService:
    """BM25 search and the write side of the text index, scoped to one tenant per call."""

    def __init__(self, index: TextIndex, limits: Limits | None = None) -> None:
        self._index = index
        self.limits = limits or Limits()

    async def upsert(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        # The request's tenant is the one that counts; tag_prefixes are derived when a writer
        # left them out, so Get returns what every filter sees.
        stamped = [
            replace(m, tenant=tenant, tag_prefixes=m.tag_prefixes or tag_prefixes(m.tags))
            for m in memories
        ]
        return await self._index.upsert(tenant, stamped)

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        return await self._index.delete(tenant, ids, version)

    async def search(self, tenant: str, query: str, flt: Filter, limit: int) -> list[Hit]:
        return await self._index.search(tenant, query, flt, limit or self.limits.default_limit)

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

    async def close(self) -> None:
        await self._index.close()
