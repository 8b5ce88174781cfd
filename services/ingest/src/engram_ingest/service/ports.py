"""The narrow slices of the store ports ingest writes through.

Vector and lexical are also read by id, and only to tell a relation's endpoint that the
graph has not applied yet (it is in another store) from one deleted since.

engram_clients' VectorClient/LexicalClient/GraphClient satisfy them, and so does any
full engram_core.ports adapter or engram_testing fake.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engram_core.model import Entity, Memory, Relation, UpsertResult


class VectorWriter(Protocol):
    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[float]]]
    ) -> UpsertResult: ...

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int: ...

    async def delete_tenant(self, tenant: str) -> int: ...

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...


class TextWriter(Protocol):
    async def upsert(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult: ...

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int: ...

    async def delete_tenant(self, tenant: str) -> int: ...

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...


class GraphWriter(Protocol):
    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[Entity]]]
    ) -> UpsertResult: ...

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int: ...

    async def delete_tenant(self, tenant: str) -> int: ...

    async def add_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int: ...

    async def remove_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int: ...
