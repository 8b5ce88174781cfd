"""Client of engram.vector.v1.VectorService."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from engram.vector.v1 import vector_pb2, vector_pb2_grpc
from engram_clients._store import GenerationsClient
from engram_core.model import Filter, Hit, Memory, ScanPage, UpsertResult
from engram_platform.convert import filter_to_proto, hit_from_proto, memory_to_proto

NAME = "vector"


class VectorClient(GenerationsClient["vector_pb2_grpc.VectorServiceAsyncStub"]):
    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__(NAME, vector_pb2_grpc.VectorServiceStub(channel), vector_pb2)

    async def upsert(
        self,
        tenant: str,
        items: Sequence[tuple[Memory, Sequence[float]]],
        timeout: float | None = None,
    ) -> UpsertResult:
        request = vector_pb2.UpsertRequest(
            tenant=tenant,
            points=[vector_pb2.Point(memory=memory_to_proto(m), vector=list(v)) for m, v in items],
            **self._scope,
        )
        return await self._upsert(request, timeout)

    async def scan_by_sequence(
        self, tenant: str, cursor: str | None, limit: int, timeout: float | None = None
    ) -> ScanPage:
        """`scan` ordered by the version that last wrote each memory (ScanBySequence)."""
        return await self._scan(self._stub.ScanBySequence, tenant, cursor, limit, timeout)

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
        reply = await self._call(self._stub.Search, request, timeout)
        return [hit_from_proto(h) for h in reply.hits]

    async def search_many(
        self,
        tenant: str,
        flts: Sequence[Filter],
        limit: int,
        query: str = "",
        vector: Sequence[float] = (),
        timeout: float | None = None,
    ) -> list[list[Hit]]:
        """One hit list per filter, in order, for one query (one round trip)."""
        request = vector_pb2.SearchManyRequest(
            tenant=tenant,
            query=query,
            vector=list(vector),
            filters=[filter_to_proto(f) for f in flts],
            limit=limit,
        )
        reply = await self._call(self._stub.SearchMany, request, timeout)
        return [[hit_from_proto(h) for h in r.hits] for r in reply.results]

    async def neighbours(
        self,
        tenant: str,
        ids: Sequence[str],
        limit: int,
        min_score: float,
        timeout: float | None = None,
    ) -> dict[str, list[Hit]]:
        request = vector_pb2.NeighboursRequest(
            tenant=tenant, ids=list(ids), limit=limit, min_score=min_score
        )
        reply = await self._call(self._stub.Neighbours, request, timeout)
        return {n.id: [hit_from_proto(h) for h in n.hits] for n in reply.neighbours}
