"""The lexical service's logic over the generations of a text index. No gRPC, no backend here.

Every write and read but Search may name a generation ("" = the live one): a rebuild fills a
new one beside the live one, then swaps it in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from engram_core.generation_routing import GenerationRouted
from engram_core.model import Filter, Hit, Memory, UpsertResult
from engram_core.ordering import Sort
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


class LexicalService(GenerationRouted[TextIndex]):
    """BM25 search and the write side of the text index, scoped to one tenant per call (the
    calls that only pick a generation's index come from `GenerationRouted`)."""

    def __init__(self, generations: TextGenerations, limits: Limits | None = None) -> None:
        super().__init__(generations)
        self.limits = limits or Limits()

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

    async def search(self, tenant: str, query: str, flt: Filter, limit: int) -> list[Hit]:
        index = await self._index("")
        return await index.search(tenant, query, flt, limit or self.limits.default_limit)

    async def top(self, tenant: str, flt: Filter, sort: Sort, limit: int) -> list[Memory]:
        return await (await self._index("")).top(tenant, flt, sort, limit)
