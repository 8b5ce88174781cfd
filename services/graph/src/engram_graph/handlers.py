"""gRPC servicer for engram.graph.v1.GraphService: validate, map, call the service, map back.

The handlers check what only the proto can get wrong (presence, timestamps, ids, the tenant);
the service checks the domain rules (relation types, strengths, depth, limits, entities). Both
raise `InvalidArgument` naming the field; the platform interceptor turns it into
INVALID_ARGUMENT with the field in the trailing metadata.
"""

from __future__ import annotations

import math
from typing import Any

import grpc
from google.protobuf import timestamp_pb2

from engram.common.v1 import common_pb2
from engram.graph.v1 import graph_pb2, graph_pb2_grpc
from engram_core.errors import InvalidArgument
from engram_core.model import utcnow
from engram_core.tags import MAX_TAGS, tag_problem
from engram_graph import mapping
from engram_graph.service import GraphService

SERVICE_NAME: str = graph_pb2.DESCRIPTOR.services_by_name["GraphService"].full_name
MAX_TENANT_CHARS = 128
MAX_ID_CHARS = 128
# google.protobuf.Timestamp's valid range: 0001-01-01 to 9999-12-31.
_MIN_SECONDS, _MAX_SECONDS = -62_135_596_800, 253_402_300_799
_Context = grpc.aio.ServicerContext[Any, Any]


def check_tenant(value: str) -> None:
    if not value:
        raise InvalidArgument("tenant", "must not be empty")
    if len(value) > MAX_TENANT_CHARS:
        raise InvalidArgument("tenant", f"longer than {MAX_TENANT_CHARS} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise InvalidArgument("tenant", "must not contain whitespace or control characters")
    if "/" in value:
        raise InvalidArgument("tenant", "must not contain '/'")


def check_id(field: str, value: str) -> None:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgument(field, f"longer than {MAX_ID_CHARS} characters")


def check_ids(field: str, ids: list[str]) -> None:
    for i, id_ in enumerate(ids):
        check_id(f"{field}[{i}]", id_)


def check_timestamp(field: str, ts: timestamp_pb2.Timestamp) -> None:
    if not (_MIN_SECONDS <= ts.seconds <= _MAX_SECONDS and 0 <= ts.nanos < 1_000_000_000):
        raise InvalidArgument(field, "not a valid timestamp")


def check_unit(field: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidArgument(field, "must be in [0, 1]")


def check_tags(field: str, tags: list[str]) -> None:
    if len(tags) > MAX_TAGS:
        raise InvalidArgument(field, f"at most {MAX_TAGS} tags, got {len(tags)}")
    for i, tag in enumerate(tags):
        problem = tag_problem(tag)
        if problem is not None:
            raise InvalidArgument(f"{field}[{i}]", problem)


def check_memory(field: str, m: common_pb2.Memory, tenant: str) -> None:
    check_id(f"{field}.id", m.id)
    if m.tenant and m.tenant != tenant:
        raise InvalidArgument(f"{field}.tenant", "differs from the request's tenant")
    if not m.content.strip():
        raise InvalidArgument(f"{field}.content", "must not be empty")
    if not m.type.strip():
        raise InvalidArgument(f"{field}.type", "must not be empty")
    check_tags(f"{field}.tags", list(m.tags))
    check_unit(f"{field}.importance", m.importance)
    check_unit(f"{field}.confidence", m.confidence)
    if not math.isfinite(m.relevance_score):
        raise InvalidArgument(f"{field}.relevance_score", "must be finite")
    if not m.HasField("timestamp"):
        raise InvalidArgument(f"{field}.timestamp", "must be set")
    for name in ("timestamp", "updated_at", "last_accessed", "t_valid", "t_invalid"):
        if m.HasField(name):
            check_timestamp(f"{field}.{name}", getattr(m, name))
    if m.access_count < 0:
        raise InvalidArgument(f"{field}.access_count", "must be >= 0")
    if m.version < 0:
        raise InvalidArgument(f"{field}.version", "must be >= 0")


def check_filter(f: common_pb2.Filter) -> None:
    if f.tag_mode not in common_pb2.TagMode.values():
        raise InvalidArgument("filter.tag_mode", f"unknown tag mode {f.tag_mode}")
    if f.tag_match not in common_pb2.TagMatch.values():
        raise InvalidArgument("filter.tag_match", f"unknown tag match {f.tag_match}")
    check_tags("filter.tags", list(f.tags))
    check_tags("filter.exclude_tags", list(f.exclude_tags))
    for name in ("types", "exclude_types"):
        for i, value in enumerate(getattr(f, name)):
            if not value.strip():
                raise InvalidArgument(f"filter.{name}[{i}]", "must not be empty")
    if f.HasField("start"):
        check_timestamp("filter.start", f.start)
    if f.HasField("end"):
        check_timestamp("filter.end", f.end)
    both = f.HasField("start") and f.HasField("end")
    if both and f.end.ToNanoseconds() < f.start.ToNanoseconds():
        raise InvalidArgument("filter.end", "must not be before filter.start")


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
            check_memory(f"memories[{i}].memory", g.memory, request.tenant)
        items = mapping.upsert_items(request.memories)
        return mapping.upsert_response(await self._service.upsert(request.tenant, items))

    async def Delete(  # noqa: N802
        self, request: graph_pb2.DeleteRequest, context: _Context
    ) -> graph_pb2.DeleteResponse:
        check_tenant(request.tenant)
        if not request.ids:
            raise InvalidArgument("ids", "must not be empty")
        check_ids("ids", list(request.ids))
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
                check_timestamp(f"relations[{i}].created_at", r.created_at)
        relations = mapping.relations_from_proto(request.relations, utcnow())
        applied = await self._service.add_relations(request.tenant, relations, request.version)
        return graph_pb2.AddRelationsResponse(applied=applied)

    async def Related(  # noqa: N802
        self, request: graph_pb2.RelatedRequest, context: _Context
    ) -> graph_pb2.RelatedResponse:
        check_tenant(request.tenant)
        check_id("id", request.id)
        hits = await self._service.related(
            request.tenant, request.id, request.depth, list(request.types), request.limit
        )
        return mapping.related_response(hits)

    async def Search(  # noqa: N802
        self, request: graph_pb2.SearchRequest, context: _Context
    ) -> graph_pb2.SearchResponse:
        check_tenant(request.tenant)
        check_filter(request.filter)
        hits = await self._service.search(*mapping.search_args(request))
        return mapping.search_response(hits)

    async def Relations(  # noqa: N802
        self, request: graph_pb2.RelationsRequest, context: _Context
    ) -> graph_pb2.RelationsResponse:
        check_tenant(request.tenant)
        check_ids("ids", list(request.ids))
        relations = await self._service.relations(request.tenant, list(request.ids))
        return mapping.relations_response(relations)

    async def UpdateAccess(  # noqa: N802
        self, request: graph_pb2.UpdateAccessRequest, context: _Context
    ) -> graph_pb2.UpdateAccessResponse:
        check_tenant(request.tenant)
        for i, u in enumerate(request.updates):
            check_id(f"updates[{i}].id", u.id)
            if not u.HasField("last_accessed"):
                raise InvalidArgument(f"updates[{i}].last_accessed", "must be set")
            check_timestamp(f"updates[{i}].last_accessed", u.last_accessed)
            if u.access_count < 0:
                raise InvalidArgument(f"updates[{i}].access_count", "must be >= 0")
        updates = mapping.access_updates_from_proto(request.updates)
        updated = await self._service.update_access(request.tenant, updates)
        return graph_pb2.UpdateAccessResponse(updated=updated)

    async def Count(  # noqa: N802
        self, request: graph_pb2.CountRequest, context: _Context
    ) -> graph_pb2.CountResponse:
        check_tenant(request.tenant)
        return graph_pb2.CountResponse(count=await self._service.count(request.tenant))
