"""Client of engram.graph.v1.GraphService."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from engram.graph.v1 import graph_pb2, graph_pb2_grpc
from engram_clients._store import StoreClient
from engram_core.model import (
    Entity,
    Filter,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    UpsertResult,
)
from engram_platform.convert import (
    entity_to_proto,
    filter_to_proto,
    hit_from_proto,
    memory_to_proto,
    relation_from_proto,
    relation_to_proto,
)

NAME = "graph"


class GraphClient(StoreClient["graph_pb2_grpc.GraphServiceAsyncStub"]):
    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__(NAME, graph_pb2_grpc.GraphServiceStub(channel), graph_pb2)

    async def upsert(
        self,
        tenant: str,
        items: Sequence[tuple[Memory, Sequence[Entity]]],
        timeout: float | None = None,
    ) -> UpsertResult:
        request = graph_pb2.UpsertRequest(
            tenant=tenant,
            memories=[
                graph_pb2.GraphMemory(
                    memory=memory_to_proto(m), entities=[entity_to_proto(e) for e in ents]
                )
                for m, ents in items
            ],
        )
        return await self._upsert(request, timeout)

    async def add_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
        timeout: float | None = None,
    ) -> int:
        request = graph_pb2.AddRelationsRequest(
            tenant=tenant,
            relations=[relation_to_proto(r) for r in relations],
            version=version,
            versions=list(versions),
        )
        reply = await self._call(self._stub.AddRelations, request, timeout)
        return int(reply.applied)

    async def remove_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
        timeout: float | None = None,
    ) -> int:
        request = graph_pb2.RemoveRelationsRequest(
            tenant=tenant,
            relations=[relation_to_proto(r) for r in relations],
            version=version,
            versions=list(versions),
        )
        reply = await self._call(self._stub.RemoveRelations, request, timeout)
        return int(reply.removed)

    async def related(
        self,
        tenant: str,
        id: str,
        depth: int,
        types: Sequence[str],
        limit: int,
        timeout: float | None = None,
    ) -> list[RelatedHit]:
        request = graph_pb2.RelatedRequest(
            tenant=tenant, id=id, depth=depth, types=list(types), limit=limit
        )
        reply = await self._call(self._stub.Related, request, timeout)
        return [
            RelatedHit(id=h.id, type=h.type, strength=h.strength, depth=h.depth) for h in reply.hits
        ]

    async def search(
        self,
        tenant: str,
        entity_keys: Sequence[str],
        keywords: Sequence[str],
        flt: Filter,
        limit: int,
        timeout: float | None = None,
    ) -> list[Hit]:
        request = graph_pb2.SearchRequest(
            tenant=tenant,
            entity_keys=list(entity_keys),
            keywords=list(keywords),
            filter=filter_to_proto(flt),
            limit=limit,
        )
        reply = await self._call(self._stub.Search, request, timeout)
        return [hit_from_proto(h) for h in reply.hits]

    async def relations(
        self, tenant: str, ids: Sequence[str], origin: str = "", timeout: float | None = None
    ) -> list[Relation]:
        request = graph_pb2.RelationsRequest(tenant=tenant, ids=list(ids), origin=origin)
        reply = await self._call(self._stub.Relations, request, timeout)
        return [relation_from_proto(r) for r in reply.relations]
