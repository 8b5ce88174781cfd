"""The reads and writes a store service routes to one of its generations, written once for
every service whose store has generations (vector, lexical).

Each call names a generation ("" = the live one) and goes to that generation's index; the
generation calls themselves go to the store's `Generations`. Pure delegation over ports:
what differs between stores (upsert, search) stays in each service.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from engram_core.model import AccessUpdate, Generation, Memory, RelevanceUpdate, ScanPage
from engram_core.ports import Generations


class StoreIndex(Protocol):
    """What every store index answers alike (`VectorIndex`, `TextIndex`)."""

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int: ...

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int: ...

    async def count(self, tenant: str) -> int: ...

    async def delete_tenant(self, tenant: str) -> int: ...

    async def scan(self, tenant: str, cursor: str | None, limit: int) -> ScanPage: ...

    async def update_relevance(self, tenant: str, updates: Sequence[RelevanceUpdate]) -> int: ...


IndexT_co = TypeVar("IndexT_co", bound=StoreIndex, covariant=True)
IndexT = TypeVar("IndexT", bound=StoreIndex)


class IndexedGenerations(Generations, Protocol[IndexT_co]):
    """A store's generations, each reachable as an index."""

    async def index(self, generation: str = "") -> IndexT_co:
        """The index of a generation ("" = the live one); unknown → NotFound."""
        ...

    async def close(self) -> None: ...


class GenerationRouted(Generic[IndexT]):
    """Base of a store service: the calls that only pick a generation's index."""

    def __init__(self, generations: IndexedGenerations[IndexT]) -> None:
        self._routed = generations

    async def _index(self, generation: str) -> IndexT:
        return await self._routed.index(generation)

    async def delete(
        self, tenant: str, ids: Sequence[str], version: int, generation: str = ""
    ) -> int:
        return await (await self._index(generation)).delete(tenant, ids, version)

    async def get(self, tenant: str, ids: Sequence[str], generation: str = "") -> list[Memory]:
        return await (await self._index(generation)).get(tenant, ids)

    async def update_access(
        self, tenant: str, updates: Sequence[AccessUpdate], generation: str = ""
    ) -> int:
        return await (await self._index(generation)).update_access(tenant, updates)

    async def count(self, tenant: str, generation: str = "") -> int:
        return await (await self._index(generation)).count(tenant)

    async def delete_tenant(self, tenant: str) -> int:
        """From every generation: a rebuild's new one and the kept previous one hold the
        tenant too. The live one's count of live memories removed."""
        deleted = await (await self._index("")).delete_tenant(tenant)
        for generation in await self._routed.list_generations():
            if not generation.live:
                await (await self._index(generation.name)).delete_tenant(tenant)
        return deleted

    async def scan(
        self, tenant: str, cursor: str | None, limit: int, generation: str = ""
    ) -> ScanPage:
        return await (await self._index(generation)).scan(tenant, cursor, limit)

    async def update_relevance(
        self, tenant: str, updates: Sequence[RelevanceUpdate], generation: str = ""
    ) -> int:
        return await (await self._index(generation)).update_relevance(tenant, updates)

    async def create_generation(self, embedding_model: str) -> Generation:
        return await self._routed.create_generation(embedding_model)

    async def list_generations(self) -> list[Generation]:
        return await self._routed.list_generations()

    async def swap_generation(self, name: str) -> Generation:
        return await self._routed.swap_generation(name)

    async def drop_generation(self, name: str) -> None:
        await self._routed.drop_generation(name)

    async def close(self) -> None:
        await self._routed.close()
