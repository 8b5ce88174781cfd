"""gRPC servicer for engram.vector.v1.VectorService: validate, map, call the service, map back.

Every field is checked here and named in INVALID_ARGUMENT; the platform interceptor
turns catalog errors into status codes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from engram.common.v1 import common_pb2
from engram.vector.v1 import vector_pb2, vector_pb2_grpc
from engram_core.errors import InvalidArgument
from engram_core.generations import check_generation_name
from engram_core.ids import normalise_id
from engram_core.model import AccessUpdate, Filter, Memory, RelevanceUpdate
from engram_platform import convert
from engram_platform.request_checks import check_cursor, check_struct, check_tags, check_unit
from engram_platform.settings import (
    SEARCH_MANY_MAX_FILTERS,
    SEARCH_MANY_MAX_HITS,
    STORE_MAX_ITEMS,
)
from engram_vector import mapping
from engram_vector.service import VectorService

SERVICE_NAME: str = vector_pb2.DESCRIPTOR.services_by_name["VectorService"].full_name
MAX_ITEMS = STORE_MAX_ITEMS
MAX_LIMIT = 1000
MAX_NEIGHBOURS = 100  # per id; with MAX_ITEMS ids a reply stays a few MB (no memories in it)
if TYPE_CHECKING:
    Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


def _tenant(value: str) -> str:
    if not value.strip():
        raise InvalidArgument("tenant", "must not be empty")
    if value != value.strip():
        raise InvalidArgument("tenant", "must not start or end with whitespace")
    return value


def _count(n: int, field: str) -> None:
    if n > MAX_ITEMS:
        raise InvalidArgument(field, f"at most {MAX_ITEMS} per request, got {n}")


def _uuid(value: str, field: str) -> str:
    canonical = normalise_id(value)
    if canonical is None:
        raise InvalidArgument(field, f"not a UUID: {value[:64]!r}")
    return canonical


def _ids(values: Sequence[str], field: str) -> list[str]:
    _count(len(values), field)
    return [_uuid(v, f"{field}[{i}]") for i, v in enumerate(values)]


def _vector(values: Sequence[float], dimension: int, field: str) -> list[float]:
    if len(values) != dimension:
        raise InvalidArgument(field, f"expected {dimension} dimensions, got {len(values)}")
    if not all(math.isfinite(x) for x in values):
        raise InvalidArgument(field, "must hold finite numbers only")
    return list(values)


def _points(
    request: vector_pb2.UpsertRequest, tenant: str, dimension: int
) -> list[tuple[Memory, list[float]]]:
    _count(len(request.points), "points")
    out = []
    for i, point in enumerate(request.points):
        field = f"points[{i}]"
        if not point.HasField("memory"):
            raise InvalidArgument(f"{field}.memory", "is required")
        check_tags(f"{field}.memory.tags", point.memory.tags)  # the limits every store keeps
        check_struct(f"{field}.memory.metadata", point.memory.metadata)
        memory, vector = mapping.point_from_proto(point)
        memory_id = _uuid(memory.id, f"{field}.memory.id")
        if memory.tenant and memory.tenant != tenant:
            raise InvalidArgument(f"{field}.memory.tenant", "differs from the request's tenant")
        if memory.version < 0:
            raise InvalidArgument(f"{field}.memory.version", "must be >= 0")
        vector = _vector(vector, dimension, f"{field}.vector")
        out.append((replace(memory, id=memory_id, tenant=tenant), vector))
    return out


def _filter(raw: common_pb2.Filter, field: str = "filter") -> Filter:
    flt = convert.filter_from_proto(raw)
    if flt.start is not None and flt.end is not None and flt.start > flt.end:
        raise InvalidArgument(f"{field}.start", f"is after {field}.end")
    return flt


def _filters(request: vector_pb2.SearchManyRequest) -> list[Filter]:
    n = len(request.filters)
    if not 1 <= n <= SEARCH_MANY_MAX_FILTERS:
        raise InvalidArgument("filters", f"give 1..{SEARCH_MANY_MAX_FILTERS} filters, got {n}")
    if request.limit * n > SEARCH_MANY_MAX_HITS:
        raise InvalidArgument(
            "limit",
            f"limit x filters must be at most {SEARCH_MANY_MAX_HITS}, got {request.limit} x {n}",
        )
    return [_filter(f, f"filters[{i}]") for i, f in enumerate(request.filters)]


def _updates(request: vector_pb2.UpdateAccessRequest) -> list[AccessUpdate]:
    _count(len(request.updates), "updates")
    out = []
    for i, (raw, update) in enumerate(
        zip(request.updates, mapping.access_updates_from_proto(request), strict=True)
    ):
        if not raw.HasField("last_accessed"):
            raise InvalidArgument(f"updates[{i}].last_accessed", "is required")
        if update.access_count < 0:
            raise InvalidArgument(f"updates[{i}].access_count", "must be >= 0")
        out.append(replace(update, id=_uuid(update.id, f"updates[{i}].id")))
    return out


def _scan_args(request: vector_pb2.ScanRequest) -> tuple[str | None, int]:
    if not 1 <= request.limit <= MAX_LIMIT:
        raise InvalidArgument("limit", f"must be within 1..{MAX_LIMIT}, got {request.limit}")
    return check_cursor(request.cursor), request.limit


def _relevance_updates(request: vector_pb2.UpdateRelevanceRequest) -> list[RelevanceUpdate]:
    _count(len(request.updates), "updates")
    out = []
    for i, update in enumerate(mapping.relevance_updates_from_proto(request.updates)):
        check_unit(f"updates[{i}].relevance_score", update.relevance_score)
        out.append(replace(update, id=_uuid(update.id, f"updates[{i}].id")))
    return out


def _neighbours_args(request: vector_pb2.NeighboursRequest) -> tuple[list[str], int, float]:
    if not request.ids:
        raise InvalidArgument("ids", "must not be empty")
    ids = _ids(request.ids, "ids")
    if not 1 <= request.limit <= MAX_NEIGHBOURS:
        raise InvalidArgument("limit", f"must be within 1..{MAX_NEIGHBOURS}, got {request.limit}")
    if not (math.isfinite(request.min_score) and -1.0 <= request.min_score <= 1.0):
        raise InvalidArgument("min_score", "must be a cosine within [-1, 1]")
    return ids, request.limit, request.min_score


class VectorHandlers(vector_pb2_grpc.VectorServiceServicer):
    def __init__(self, service: VectorService) -> None:
        self._service = service

    async def Upsert(  # noqa: N802 (the generated servicer's names)
        self, request: vector_pb2.UpsertRequest, context: Context
    ) -> vector_pb2.UpsertResponse:
        tenant = _tenant(request.tenant)
        dimension = await self._service.dimension(request.generation)
        points = _points(request, tenant, dimension)
        result = await self._service.upsert(tenant, points, request.generation)
        return mapping.upsert_response(result)

    async def Delete(  # noqa: N802
        self, request: vector_pb2.DeleteRequest, context: Context
    ) -> vector_pb2.DeleteResponse:
        tenant = _tenant(request.tenant)
        ids = _ids(request.ids, "ids")
        if request.version < 0:
            raise InvalidArgument("version", "must be >= 0")
        deleted = await self._service.delete(tenant, ids, request.version, request.generation)
        return vector_pb2.DeleteResponse(deleted=deleted)

    async def _query(
        self, request: vector_pb2.SearchRequest | vector_pb2.SearchManyRequest
    ) -> tuple[str, list[float]]:
        """The tenant and the query vector ([] = embed ``query``) of a search, checked."""
        tenant = _tenant(request.tenant)
        if not 1 <= request.limit <= MAX_LIMIT:
            raise InvalidArgument("limit", f"must be within 1..{MAX_LIMIT}, got {request.limit}")
        vector: list[float] = []
        if request.vector:
            vector = _vector(request.vector, await self._service.dimension(), "vector")
        elif not request.query.strip():
            raise InvalidArgument("query", "give a query text or a vector")
        return tenant, vector

    async def Search(  # noqa: N802
        self, request: vector_pb2.SearchRequest, context: Context
    ) -> vector_pb2.SearchResponse:
        tenant, vector = await self._query(request)
        hits = await self._service.search(
            tenant, _filter(request.filter), request.limit, query=request.query, vector=vector
        )
        return mapping.search_response(hits)

    async def SearchMany(  # noqa: N802
        self, request: vector_pb2.SearchManyRequest, context: Context
    ) -> vector_pb2.SearchManyResponse:
        tenant, vector = await self._query(request)
        found = await self._service.search_many(
            tenant, _filters(request), request.limit, query=request.query, vector=vector
        )
        return mapping.search_many_response(found)

    async def Get(  # noqa: N802
        self, request: vector_pb2.GetRequest, context: Context
    ) -> vector_pb2.GetResponse:
        tenant = _tenant(request.tenant)
        ids = _ids(request.ids, "ids")
        return mapping.get_response(await self._service.get(tenant, ids, request.generation))

    async def UpdateAccess(  # noqa: N802
        self, request: vector_pb2.UpdateAccessRequest, context: Context
    ) -> vector_pb2.UpdateAccessResponse:
        tenant = _tenant(request.tenant)
        updated = await self._service.update_access(tenant, _updates(request), request.generation)
        return vector_pb2.UpdateAccessResponse(updated=updated)

    async def Count(  # noqa: N802
        self, request: vector_pb2.CountRequest, context: Context
    ) -> vector_pb2.CountResponse:
        tenant = _tenant(request.tenant)
        count = await self._service.count(tenant, request.generation)
        return vector_pb2.CountResponse(count=count)

    async def DeleteTenant(  # noqa: N802
        self, request: vector_pb2.DeleteTenantRequest, context: Context
    ) -> vector_pb2.DeleteTenantResponse:
        tenant = _tenant(request.tenant)
        deleted = await self._service.delete_tenant(tenant)
        return vector_pb2.DeleteTenantResponse(deleted=deleted)

    async def Scan(  # noqa: N802
        self, request: vector_pb2.ScanRequest, context: Context
    ) -> vector_pb2.ScanResponse:
        tenant = _tenant(request.tenant)
        cursor, limit = _scan_args(request)
        page = await self._service.scan(tenant, cursor, limit, request.generation)
        return mapping.scan_response(page)

    async def ScanBySequence(  # noqa: N802
        self, request: vector_pb2.ScanRequest, context: Context
    ) -> vector_pb2.ScanResponse:
        tenant = _tenant(request.tenant)
        cursor, limit = _scan_args(request)
        page = await self._service.scan_by_sequence(tenant, cursor, limit, request.generation)
        return mapping.scan_response(page)

    async def UpdateRelevance(  # noqa: N802
        self, request: vector_pb2.UpdateRelevanceRequest, context: Context
    ) -> vector_pb2.UpdateRelevanceResponse:
        tenant = _tenant(request.tenant)
        updates = _relevance_updates(request)
        updated = await self._service.update_relevance(tenant, updates, request.generation)
        return vector_pb2.UpdateRelevanceResponse(updated=updated)

    async def Neighbours(  # noqa: N802
        self, request: vector_pb2.NeighboursRequest, context: Context
    ) -> vector_pb2.NeighboursResponse:
        tenant = _tenant(request.tenant)
        ids, limit, min_score = _neighbours_args(request)
        found = await self._service.neighbours(tenant, ids, limit, min_score)
        return mapping.neighbours_response(found)

    async def CreateGeneration(  # noqa: N802
        self, request: vector_pb2.CreateGenerationRequest, context: Context
    ) -> vector_pb2.CreateGenerationResponse:
        created = await self._service.create_generation(request.embedding_model.strip())
        return vector_pb2.CreateGenerationResponse(generation=convert.generation_to_proto(created))

    async def ListGenerations(  # noqa: N802
        self, request: vector_pb2.ListGenerationsRequest, context: Context
    ) -> vector_pb2.ListGenerationsResponse:
        listed = await self._service.list_generations()
        return vector_pb2.ListGenerationsResponse(
            generations=[convert.generation_to_proto(g) for g in listed]
        )

    async def SwapGeneration(  # noqa: N802
        self, request: vector_pb2.SwapGenerationRequest, context: Context
    ) -> vector_pb2.SwapGenerationResponse:
        previous = await self._service.swap_generation(check_generation_name(request.name))
        return vector_pb2.SwapGenerationResponse(previous=convert.generation_to_proto(previous))

    async def DropGeneration(  # noqa: N802
        self, request: vector_pb2.DropGenerationRequest, context: Context
    ) -> vector_pb2.DropGenerationResponse:
        await self._service.drop_generation(check_generation_name(request.name))
        return vector_pb2.DropGenerationResponse()
