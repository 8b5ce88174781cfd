"""Client of engram.lexical.v1.LexicalService."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from engram.lexical.v1 import lexical_pb2, lexical_pb2_grpc
from engram_clients._store import GenerationsClient
from engram_core.model import Filter, Hit, Memory, UpsertResult
from engram_core.ordering import Sort
from engram_platform.convert import (
    filter_to_proto,
    hit_from_proto,
    memory_from_proto,
    memory_to_proto,
)

NAME = "lexical"


class LexicalClient(GenerationsClient["lexical_pb2_grpc.LexicalServiceAsyncStub"]):
    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__(NAME, lexical_pb2_grpc.LexicalServiceStub(channel), lexical_pb2)

    async def upsert(
        self,
        tenant: str,
        memories: Sequence[Memory],
        timeout: float | None = None,
    ) -> UpsertResult:
        request = lexical_pb2.UpsertRequest(
            tenant=tenant, memories=[memory_to_proto(m) for m in memories], **self._scope
        )
        return await self._upsert(request, timeout)

    async def search(
        self,
        tenant: str,
        query: str,
        flt: Filter,
        limit: int,
        timeout: float | None = None,
    ) -> list[Hit]:
        request = lexical_pb2.SearchRequest(
            tenant=tenant, query=query, filter=filter_to_proto(flt), limit=limit
        )
        reply = await self._call(self._stub.Search, request, timeout)
        return [hit_from_proto(h) for h in reply.hits]

    async def top(
        self, tenant: str, flt: Filter, sort: Sort, limit: int, timeout: float | None = None
    ) -> list[Memory]:
        if limit <= 0:  # the port's answer; the RPC takes 1..max
            return []
        request = lexical_pb2.TopRequest(
            tenant=tenant,
            filter=filter_to_proto(flt),
            sort=lexical_pb2.Sort.Value(f"SORT_{sort.name}"),
            limit=limit,
        )
        reply = await self._call(self._stub.Top, request, timeout)
        return [memory_from_proto(m) for m in reply.memories]
