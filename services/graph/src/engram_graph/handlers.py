"""gRPC servicer for engram.graph.v1.GraphService: validate, map, call the service, map back.

The handlers check what only the proto can get wrong (presence, timestamps, ids, the tenant);
the service checks the domain rules (relation types, strengths, depth, limits, entities). Both
raise `InvalidArgument` naming the field; the platform interceptor turns it into
INVALID_ARGUMENT with the field in the trailing metadata.
"""

from __future__ import annotations

from typing import Any

import grpc

from engram.graph.v1 import graph_pb2, graph_pb2_grpc
from engram_core.errors import InvalidArgument
from engram_core.model import utcnow
from engram_graph import mapping
from engram_graph.service import GraphService
from engram_platform import request_checks as checks

SERVICE_NAME: str = graph_pb2.DESCRIPTOR.services_by_name["GraphService"].full_name
_Context = grpc.aio.ServicerContext[Any, Any]


def check_tenant(value: str) -> None:
    checks.check_tenant(value)
    # The store prefixes every key with the tenant and "/": one could alias another's keys.
    if "/" in value:
        raise InvalidArgument("tenant", "must not contain '/'")


class GraphHandlers(graph_pb2_grpc.GraphServiceServicer):
    def __init__(self, service: GraphService) -> None:
        self._service = service

    async def Upsert(  # noqa: N802 (the generated servicer's names)
        self, request: graph_pb2.UpsertRequest, context: _Context
    ) -> graph_pb2.UpsertResponse:
        check_tenant(request.tenant)
        for i, g in enumerate(request.memories):
            if not g.HasField("memory"):
                raise InvalidArgument(f"memories[{i}].memory", "must be set")
            checks.check_memory(f"memories[{i}].memory", g.memory, request.tenant)
        items = mapping.upsert_items(request.memories)
        return mapping.upsert_response(await self._service.upsert(request.tenant, items))

    async def Delete(  # noqa: N802
        self, request: graph_pb2.DeleteRequest, context: _Context
    ) -> graph_pb2.DeleteResponse:
        check_tenant(request.tenant)
        if not request.ids:
            raise InvalidArgument("ids", "must not be empty")
        checks.check_ids("ids", request.ids)
        deleted = await self._service.delete(request.tenant, list(request.ids), request.version)
        return graph_pb2.DeleteResponse(deleted=deleted)

    async def AddRelations(  # noqa: N802
        self, request: graph_pb2.AddRelationsRequest, context: _Context
    ) -> graph_pb2.AddRelationsResponse:
        check_tenant(request.tenant)
        if not request.relations:
            raise InvalidArgument("relations", "must not be empty")
        for i, r in enumerate(request.relations):
            if r.HasField("created_at"):
                checks.check_timestamp(f"relations[{i}].created_at", r.created_at)
            checks.check_struct(f"relations[{i}].properties", r.properties)
        relations = mapping.relations_from_proto(request.relations, utcnow())
        applied = await self._service.add_relations(
            request.tenant, relations, request.version, list(request.versions)
        )
        return graph_pb2.AddRelationsResponse(applied=applied)

    async def RemoveRelations(  # noqa: N802
        self, request: graph_pb2.RemoveRelationsRequest, context: _Context
    ) -> graph_pb2.RemoveRelationsResponse:
        check_tenant(request.tenant)
        if not request.relations:
            raise InvalidArgument("relations", "must not be empty")
        for i, r in enumerate(request.relations):
            checks.check_id(f"relations[{i}].source_id", r.source_id)
            checks.check_id(f"relations[{i}].target_id", r.target_id)
        relations = mapping.relations_from_proto(request.relations, utcnow())
        removed = await self._service.remove_relations(
            request.tenant, relations, request.version, list(request.versions)
        )
        return graph_pb2.RemoveRelationsResponse(removed=removed)

    async def Related(  # noqa: N802
        self, request: graph_pb2.RelatedRequest, context: _Context
    ) -> graph_pb2.RelatedResponse:
        check_tenant(request.tenant)
        checks.check_id("id", request.id)
        hits = await self._service.related(
            request.tenant, request.id, request.depth, list(request.types), request.limit
        )
        return mapping.related_response(hits)

    async def Search(  # noqa: N802
        self, request: graph_pb2.SearchRequest, context: _Context
    ) -> graph_pb2.SearchResponse:
        check_tenant(request.tenant)
        checks.check_filter(request.filter)
        hits = await self._service.search(*mapping.search_args(request))
        return mapping.search_response(hits)

    async def Relations(  # noqa: N802
        self, request: graph_pb2.RelationsRequest, context: _Context
    ) -> graph_pb2.RelationsResponse:
        check_tenant(request.tenant)
        checks.check_ids("ids", request.ids)
        relations = await self._service.relations(request.tenant, list(request.ids), request.origin)
        return mapping.relations_response(relations)

    async def UpdateAccess(  # noqa: N802
        self, request: graph_pb2.UpdateAccessRequest, context: _Context
    ) -> graph_pb2.UpdateAccessResponse:
        check_tenant(request.tenant)
        checks.check_access_updates(request.updates)
        updates = mapping.access_updates_from_proto(request.updates)
        updated = await self._service.update_access(request.tenant, updates)
        return graph_pb2.UpdateAccessResponse(updated=updated)

    async def Count(  # noqa: N802
        self, request: graph_pb2.CountRequest, context: _Context
    ) -> graph_pb2.CountResponse:
        check_tenant(request.tenant)
        return graph_pb2.CountResponse(count=await self._service.count(request.tenant))

    async def DeleteTenant(  # noqa: N802
        self, request: graph_pb2.DeleteTenantRequest, context: _Context
    ) -> graph_pb2.DeleteTenantResponse:
        check_tenant(request.tenant)
        deleted = await self._service.delete_tenant(request.tenant)
        return graph_pb2.DeleteTenantResponse(deleted=deleted)

    async def Scan(  # noqa: N802
        self, request: graph_pb2.ScanRequest, context: _Context
    ) -> graph_pb2.ScanResponse:
        check_tenant(request.tenant)
        cursor = checks.check_cursor(request.cursor)
        page = await self._service.scan(request.tenant, cursor, request.limit)
        return mapping.scan_response(page)

    async def UpdateRelevance(  # noqa: N802
        self, request: graph_pb2.UpdateRelevanceRequest, context: _Context
    ) -> graph_pb2.UpdateRelevanceResponse:
        check_tenant(request.tenant)
        for i, u in enumerate(request.updates):
            checks.check_id(f"updates[{i}].id", u.id)
        updates = mapping.relevance_updates_from_proto(request.updates)
        updated = await self._service.update_relevance(request.tenant, updates)
        return graph_pb2.UpdateRelevanceResponse(updated=updated)
