"""What the store clients share. Upsert's reply, Delete, UpdateAccess, Count, Scan and
UpdateRelevance (and Get, on the indexes) carry the same fields in every store's proto; only the
stub and the generated module holding the request classes differ, so one implementation serves
them all. The indexes with generations (vector, lexical) also share the generation calls and
``in_generation(name)``: a copy of the client whose every write and read above carries the
request field ``generation``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Generic, Protocol, Self, TypeVar

import grpc

from engram_core.model import (
    AccessUpdate,
    Generation,
    Memory,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_platform.convert import (
    access_update_to_proto,
    generation_from_proto,
    memory_from_proto,
)
from engram_platform.grpc_client import translate_errors

_Rpc = grpc.aio.UnaryUnaryMultiCallable[Any, Any]
Req = TypeVar("Req")
Resp = TypeVar("Resp")


class StoreStub(Protocol):
    """The RPCs every store serves (the generated async stubs have these attributes)."""

    Upsert: _Rpc
    Delete: _Rpc
    UpdateAccess: _Rpc
    Count: _Rpc
    DeleteTenant: _Rpc
    Scan: _Rpc
    UpdateRelevance: _Rpc


class IndexStub(StoreStub, Protocol):
    """A store that also serves Get (vector, lexical)."""

    Get: _Rpc


class GenerationsStub(IndexStub, Protocol):
    """An index with generations (vector, lexical)."""

    CreateGeneration: _Rpc
    ListGenerations: _Rpc
    SwapGeneration: _Rpc
    DropGeneration: _Rpc


StubT = TypeVar("StubT", bound=StoreStub)
IndexStubT = TypeVar("IndexStubT", bound=IndexStub)
GenerationsStubT = TypeVar("GenerationsStubT", bound=GenerationsStub)


class StoreClient(Generic[StubT]):
    """``messages`` is the service's generated ``*_pb2`` module (DeleteRequest, CountRequest…)."""

    def __init__(self, name: str, stub: StubT, messages: ModuleType) -> None:
        self._name = name
        self._stub = stub
        self._messages = messages
        # Extra request fields of every write and read: {"generation": name} when bound.
        self._scope: dict[str, str] = {}

    async def _call(
        self, rpc: grpc.aio.UnaryUnaryMultiCallable[Req, Resp], request: Req, timeout: float | None
    ) -> Resp:
        async with translate_errors(self._name):
            return await rpc(request, timeout=timeout)

    async def _upsert(self, request: Any, timeout: float | None) -> UpsertResult:
        reply = await self._call(self._stub.Upsert, request, timeout)
        return UpsertResult(applied=reply.applied, skipped=reply.skipped)

    async def delete(
        self, tenant: str, ids: Sequence[str], version: int, timeout: float | None = None
    ) -> int:
        request = self._messages.DeleteRequest(
            tenant=tenant, ids=list(ids), version=version, **self._scope
        )
        return int((await self._call(self._stub.Delete, request, timeout)).deleted)

    async def update_access(
        self, tenant: str, updates: Sequence[AccessUpdate], timeout: float | None = None
    ) -> int:
        request = self._messages.UpdateAccessRequest(
            tenant=tenant, updates=[access_update_to_proto(u) for u in updates], **self._scope
        )
        return int((await self._call(self._stub.UpdateAccess, request, timeout)).updated)

    async def count(self, tenant: str, timeout: float | None = None) -> int:
        request = self._messages.CountRequest(tenant=tenant, **self._scope)
        return int((await self._call(self._stub.Count, request, timeout)).count)

    async def delete_tenant(self, tenant: str, timeout: float | None = None) -> int:
        """Every generation's documents of the tenant; the live memories removed."""
        request = self._messages.DeleteTenantRequest(tenant=tenant)
        return int((await self._call(self._stub.DeleteTenant, request, timeout)).deleted)

    async def scan(
        self, tenant: str, cursor: str | None, limit: int, timeout: float | None = None
    ) -> ScanPage:
        """One page of the tenant's live memories; the proto's "" cursor is the port's None."""
        return await self._scan(self._stub.Scan, tenant, cursor, limit, timeout)

    async def _scan(
        self, rpc: _Rpc, tenant: str, cursor: str | None, limit: int, timeout: float | None
    ) -> ScanPage:
        request = self._messages.ScanRequest(
            tenant=tenant, cursor=cursor or "", limit=limit, **self._scope
        )
        reply = await self._call(rpc, request, timeout)
        return ScanPage(
            memories=[memory_from_proto(m) for m in reply.memories],
            next_cursor=reply.next_cursor or None,
        )

    async def update_relevance(
        self, tenant: str, updates: Sequence[RelevanceUpdate], timeout: float | None = None
    ) -> int:
        request = self._messages.UpdateRelevanceRequest(
            tenant=tenant,
            updates=[
                self._messages.RelevanceUpdate(id=u.id, relevance_score=u.relevance_score)
                for u in updates
            ],
            **self._scope,
        )
        return int((await self._call(self._stub.UpdateRelevance, request, timeout)).updated)


class IndexClient(StoreClient[IndexStubT]):
    async def get(
        self, tenant: str, ids: Sequence[str], timeout: float | None = None
    ) -> list[Memory]:
        request = self._messages.GetRequest(tenant=tenant, ids=list(ids), **self._scope)
        reply = await self._call(self._stub.Get, request, timeout)
        return [memory_from_proto(m) for m in reply.memories]


class GenerationsClient(IndexClient[GenerationsStubT]):
    """An index client that also implements `engram_core.ports.Generations`."""

    def in_generation(self, name: str) -> Self:
        """The same client (channel, stub), every write and read bound to generation ``name``
        ("" = the live one): a VectorIndex/TextIndex writing into a staging generation.
        Search (and Neighbours) carry no generation: they always read the live one."""
        bound = copy.copy(self)
        bound._scope = {"generation": name} if name else {}
        return bound

    @property
    def generation(self) -> str:
        """The generation this client is bound to ("" = the live one)."""
        return self._scope.get("generation", "")

    async def create_generation(
        self, embedding_model: str, timeout: float | None = None
    ) -> Generation:
        request = self._messages.CreateGenerationRequest(embedding_model=embedding_model)
        reply = await self._call(self._stub.CreateGeneration, request, timeout)
        return generation_from_proto(reply.generation)

    async def list_generations(self, timeout: float | None = None) -> list[Generation]:
        request = self._messages.ListGenerationsRequest()
        reply = await self._call(self._stub.ListGenerations, request, timeout)
        return [generation_from_proto(g) for g in reply.generations]

    async def swap_generation(self, name: str, timeout: float | None = None) -> Generation:
        request = self._messages.SwapGenerationRequest(name=name)
        reply = await self._call(self._stub.SwapGeneration, request, timeout)
        return generation_from_proto(reply.previous)

    async def drop_generation(self, name: str, timeout: float | None = None) -> None:
        request = self._messages.DropGenerationRequest(name=name)
        await self._call(self._stub.DropGeneration, request, timeout)
