"""gRPC servicer for engram.lexical.v1.LexicalService: validate, map, call the service, map back.

Every check raises `InvalidArgument` naming the field (``memories[3].importance``); the platform
interceptor turns it into INVALID_ARGUMENT with the field in the trailing metadata.
"""

from __future__ import annotations

from typing import Any

import grpc

from engram.lexical.v1 import lexical_pb2, lexical_pb2_grpc
from engram_core.errors import InvalidArgument
from engram_core.generations import check_generation_name
from engram_lexical import mapping
from engram_lexical.service import LexicalService
from engram_platform.convert import generation_to_proto
from engram_platform.request_checks import (
    check_access_updates,
    check_count,
    check_cursor,
    check_filter,
    check_id,
    check_ids,
    check_memory,
    check_tenant,
    check_unit,
)

SERVICE_NAME: str = lexical_pb2.DESCRIPTOR.services_by_name["LexicalService"].full_name
_Context = grpc.aio.ServicerContext[Any, Any]


class LexicalHandlers(lexical_pb2_grpc.LexicalServiceServicer):
    def __init__(self, service: LexicalService) -> None:
        self._service = service
        self._limits = service.limits

    async def Upsert(  # noqa: N802 (the generated servicer's names)
        self, request: lexical_pb2.UpsertRequest, context: _Context
    ) -> lexical_pb2.UpsertResponse:
        check_tenant(request.tenant)
        check_count("memories", len(request.memories), self._limits.max_batch)
        for i, m in enumerate(request.memories):
            check_memory(f"memories[{i}]", m, request.tenant)
        memories = mapping.memories_from_proto(request.memories)
        result = await self._service.upsert(request.tenant, memories, request.generation)
        return mapping.upsert_response(result)

    async def Delete(  # noqa: N802
        self, request: lexical_pb2.DeleteRequest, context: _Context
    ) -> lexical_pb2.DeleteResponse:
        check_tenant(request.tenant)
        if not request.ids:
            raise InvalidArgument("ids", "must not be empty")
        check_ids("ids", request.ids, self._limits.max_batch)
        if request.version < 0:
            raise InvalidArgument("version", "must be >= 0")
        deleted = await self._service.delete(
            request.tenant, list(request.ids), request.version, request.generation
        )
        return lexical_pb2.DeleteResponse(deleted=deleted)

    async def Search(  # noqa: N802
        self, request: lexical_pb2.SearchRequest, context: _Context
    ) -> lexical_pb2.SearchResponse:
        check_tenant(request.tenant)
        if len(request.query) > self._limits.max_query_chars:
            raise InvalidArgument("query", f"longer than {self._limits.max_query_chars} characters")
        if not 0 <= request.limit <= self._limits.max_limit:
            raise InvalidArgument("limit", f"must be in 0..{self._limits.max_limit} (0: default)")
        check_filter(request.filter)
        hits = await self._service.search(*mapping.search_args(request))
        return mapping.search_response(hits)

    async def Top(  # noqa: N802
        self, request: lexical_pb2.TopRequest, context: _Context
    ) -> lexical_pb2.TopResponse:
        check_tenant(request.tenant)
        if not 1 <= request.limit <= self._limits.max_limit:
            raise InvalidArgument("limit", f"must be in 1..{self._limits.max_limit}")
        if request.sort not in lexical_pb2.Sort.values():
            raise InvalidArgument("sort", f"unknown sort {request.sort}")
        check_filter(request.filter)
        memories = await self._service.top(*mapping.top_args(request))
        return mapping.top_response(memories)

    async def Get(  # noqa: N802
        self, request: lexical_pb2.GetRequest, context: _Context
    ) -> lexical_pb2.GetResponse:
        check_tenant(request.tenant)
        check_ids("ids", request.ids, self._limits.max_batch)
        found = await self._service.get(request.tenant, list(request.ids), request.generation)
        return mapping.get_response(found)

    async def UpdateAccess(  # noqa: N802
        self, request: lexical_pb2.UpdateAccessRequest, context: _Context
    ) -> lexical_pb2.UpdateAccessResponse:
        check_tenant(request.tenant)
        check_count("updates", len(request.updates), self._limits.max_batch)
        check_access_updates(request.updates)
        updates = mapping.access_updates_from_proto(request.updates)
        updated = await self._service.update_access(request.tenant, updates, request.generation)
        return lexical_pb2.UpdateAccessResponse(updated=updated)

    async def Count(  # noqa: N802
        self, request: lexical_pb2.CountRequest, context: _Context
    ) -> lexical_pb2.CountResponse:
        check_tenant(request.tenant)
        count = await self._service.count(request.tenant, request.generation)
        return lexical_pb2.CountResponse(count=count)

    async def DeleteTenant(  # noqa: N802
        self, request: lexical_pb2.DeleteTenantRequest, context: _Context
    ) -> lexical_pb2.DeleteTenantResponse:
        check_tenant(request.tenant)
        deleted = await self._service.delete_tenant(request.tenant)
        return lexical_pb2.DeleteTenantResponse(deleted=deleted)

    async def Scan(  # noqa: N802
        self, request: lexical_pb2.ScanRequest, context: _Context
    ) -> lexical_pb2.ScanResponse:
        check_tenant(request.tenant)
        if not 1 <= request.limit <= self._limits.max_limit:
            raise InvalidArgument("limit", f"must be in 1..{self._limits.max_limit}")
        cursor = check_cursor(request.cursor)
        page = await self._service.scan(request.tenant, cursor, request.limit, request.generation)
        return mapping.scan_response(page)

    async def UpdateRelevance(  # noqa: N802
        self, request: lexical_pb2.UpdateRelevanceRequest, context: _Context
    ) -> lexical_pb2.UpdateRelevanceResponse:
        check_tenant(request.tenant)
        check_count("updates", len(request.updates), self._limits.max_batch)
        for i, u in enumerate(request.updates):
            check_id(f"updates[{i}].id", u.id)
            check_unit(f"updates[{i}].relevance_score", u.relevance_score)
        updates = mapping.relevance_updates_from_proto(request.updates)
        updated = await self._service.update_relevance(request.tenant, updates, request.generation)
        return lexical_pb2.UpdateRelevanceResponse(updated=updated)

    async def CreateGeneration(  # noqa: N802
        self, request: lexical_pb2.CreateGenerationRequest, context: _Context
    ) -> lexical_pb2.CreateGenerationResponse:
        created = await self._service.create_generation(request.embedding_model)
        return lexical_pb2.CreateGenerationResponse(generation=generation_to_proto(created))

    async def ListGenerations(  # noqa: N802
        self, request: lexical_pb2.ListGenerationsRequest, context: _Context
    ) -> lexical_pb2.ListGenerationsResponse:
        listed = await self._service.list_generations()
        return lexical_pb2.ListGenerationsResponse(
            generations=[generation_to_proto(g) for g in listed]
        )

    async def SwapGeneration(  # noqa: N802
        self, request: lexical_pb2.SwapGenerationRequest, context: _Context
    ) -> lexical_pb2.SwapGenerationResponse:
        previous = await self._service.swap_generation(check_generation_name(request.name))
        return lexical_pb2.SwapGenerationResponse(previous=generation_to_proto(previous))

    async def DropGeneration(  # noqa: N802
        self, request: lexical_pb2.DropGenerationRequest, context: _Context
    ) -> lexical_pb2.DropGenerationResponse:
        await self._service.drop_generation(check_generation_name(request.name))
        return lexical_pb2.DropGenerationResponse()
