"""Client of engram.vector.v1.VectorService."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from engram.vector.v1 import vector_pb2, vector_pb2_grpc
from engram_core.model import AccessUpdate, Filter, Hit, Memory, UpsertResult
from engram_platform.convert import (
    access_update_to_proto,
    filter_to_proto,
    hit_from_proto,
    memory_from_proto,
    memory_to_proto,
)
from engram_platform.grpc_client import translate_errors

NAME = "vector"


class VectorClient:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = vector_pb2_grpc.VectorServiceStub(channel)

    async def upsert(
        self,
        tenant: str,
        items: Sequence[tuple[Memory, Sequence[float]]],
        timeout: float | None = None,
    ) -> UpsertResult:
        request = vector_pb2.UpsertRequest(
            tenant=tenant,
            points=[vector_pb2.Point(memory=memory_to_proto(m), vector=list(v)) for m, v in items],
        )
        async with translate_errors(NAME):
            reply = await self._stub.Upsert(request, timeout=timeout)
        return UpsertResult(applied=reply.applied, skipped=reply.skipped)

    async def delete(
        self, tenant: str, ids: Sequence[str], version: int, timeout: float | None = None
    ) -> int:
        request = vector_pb2.DeleteRequest(tenant=tenant, ids=list(ids), version=version)
        async with translate_errors(NAME):
            reply = await self._stub.Delete(request, timeout=timeout)
        return int(reply.deleted)

    async def search(
        self,
        tenant: str,
        flt: Filter,
        limit: int,
        query: str = "",
        vector: Sequence[float] = (),
        timeout: float | None = None,
    ) -> list[Hit]:
        request = vector_pb2.SearchRequest(
            tenant=tenant,
            query=query,
            vector=list(vector),
            filter=filter_to_proto(flt),
            limit=limit,
        )
        async with translate_errors(NAME):
            reply = await self._stub.Search(request, timeout=timeout)
        return [hit_from_proto(h) for h in reply.hits]

    async def get(
        self, tenant: str, ids: Sequence[str], timeout: float | None = None
    ) -> list[Memory]:
        request = vector_pb2.GetRequest(tenant=tenant, ids=list(ids))
        async with translate_errors(NAME):
            reply = await self._stub.Get(request, timeout=timeout)
        return [memory_from_proto(m) for m in reply.memories]

    async def update_access(
        self, tenant: str, updates: Sequence[AccessUpdate], timeout: float | None = None
    ) -> int:
        request = vector_pb2.UpdateAccessRequest(
            tenant=tenant, updates=[access_update_to_proto(u) for u in updates]
        )
        async with translate_errors(NAME):
            reply = await self._stub.UpdateAccess(request, timeout=timeout)
        return int(reply.updated)

    async def count(self, tenant: str, timeout: float | None = None) -> int:
        async with translate_errors(NAME):
            reply = await self._stub.Count(vector_pb2.CountRequest(tenant=tenant), timeout=timeout)
        return int(reply.count)
