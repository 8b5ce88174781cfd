"""gRPC servicer for engram.lexical.v1.LexicalService: validate, map, call the service, map back.

Every check raises `InvalidArgument` naming the field (``memories[3].importance``); the platform
interceptor turns it into INVALID_ARGUMENT with the field in the trailing metadata.
"""

from __future__ import annotations

import math
from typing import Any

import grpc
from google.protobuf import timestamp_pb2

from engram.common.v1 import common_pb2
from engram.lexical.v1 import lexical_pb2, lexical_pb2_grpc
from engram_core.errors import InvalidArgument
from engram_core.tags import MAX_TAGS, tag_problem
from engram_lexical import mapping
from engram_lexical.service import LexicalService

SERVICE_NAME: str = lexical_pb2.DESCRIPTOR.services_by_name["LexicalService"].full_name
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


def check_count(field: str, count: int, most: int) -> None:
    if count > most:
        raise InvalidArgument(field, f"at most {most} per request, got {count}")


def check_id(field: str, value: str) -> None:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgument(field, f"longer than {MAX_ID_CHARS} characters")


def check_timestamp(field: str, ts: timestamp_pb2.Timestamp) -> None:
    if not (_MIN_SECONDS <= ts.seconds <= _MAX_SECONDS and 0 <= ts.nanos < 1_000_000_000):
        raise InvalidArgument(field, "not a valid timestamp")


def check_unit(field: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidArgument(field, "must be in [0, 1]")


def check_tags(field: str, tags: list[str]) -> None:
    check_count(field, len(tags), MAX_TAGS)
    for i, tag in enumerate(tags):
        problem = tag_problem(tag)
        if problem is not None:
            raise InvalidArgument(f"{field}[{i}]", problem)


def check_names(field: str, names: list[str]) -> None:
    for i, name in enumerate(names):
        if not name.strip():
            raise InvalidArgument(f"{field}[{i}]", "must not be empty")


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
    check_names("filter.types", list(f.types))
    check_names("filter.exclude_types", list(f.exclude_types))
    for name in ("start", "end"):
        if f.HasField(name):
            check_timestamp(f"filter.{name}", getattr(f, name))
    both = f.HasField("start") and f.HasField("end")
    if both and f.end.ToNanoseconds() < f.start.ToNanoseconds():
        raise InvalidArgument("filter.end", "must not be before filter.start")


class LexicalHandlers(lexical_pb2_grpc.LexicalServiceServicer):
    def __init__(self, service: LexicalService) -> None:
        self._service = service
        self._limits = service.limits

    def _check_ids(self, ids: list[str]) -> None:
        check_count("ids", len(ids), self._limits.max_batch)
        for i, id_ in enumerate(ids):
            check_id(f"ids[{i}]", id_)

    async def Upsert(  # noqa: N802 (the generated servicer's names)
        self, request: lexical_pb2.UpsertRequest, context: _Context
    ) -> lexical_pb2.UpsertResponse:
        check_tenant(request.tenant)
        check_count("memories", len(request.memories), self._limits.max_batch)
        for i, m in enumerate(request.memories):
            check_memory(f"memories[{i}]", m, request.tenant)
        memories = mapping.memories_from_proto(request.memories)
        return mapping.upsert_response(await self._service.upsert(request.tenant, memories))

    async def Delete(  # noqa: N802
        self, request: lexical_pb2.DeleteRequest, context: _Context
    ) -> lexical_pb2.DeleteResponse:
        check_tenant(request.tenant)
        if not request.ids:
            raise InvalidArgument("ids", "must not be empty")
        self._check_ids(list(request.ids))
        if request.version < 0:
            raise InvalidArgument("version", "must be >= 0")
        deleted = await self._service.delete(request.tenant, list(request.ids), request.version)
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

    async def Get(  # noqa: N802
        self, request: lexical_pb2.GetRequest, context: _Context
    ) -> lexical_pb2.GetResponse:
        check_tenant(request.tenant)
        self._check_ids(list(request.ids))
        return mapping.get_response(await self._service.get(request.tenant, list(request.ids)))

    async def UpdateAccess(  # noqa: N802
        self, request: lexical_pb2.UpdateAccessRequest, context: _Context
    ) -> lexical_pb2.UpdateAccessResponse:
        check_tenant(request.tenant)
        check_count("updates", len(request.updates), self._limits.max_batch)
        for i, u in enumerate(request.updates):
            check_id(f"updates[{i}].id", u.id)
            if not u.HasField("last_accessed"):
                raise InvalidArgument(f"updates[{i}].last_accessed", "must be set")
            check_timestamp(f"updates[{i}].last_accessed", u.last_accessed)
            if u.access_count < 0:
                raise InvalidArgument(f"updates[{i}].access_count", "must be >= 0")
        updates = mapping.access_updates_from_proto(request.updates)
        updated = await self._service.update_access(request.tenant, updates)
        return lexical_pb2.UpdateAccessResponse(updated=updated)

    async def Count(  # noqa: N802
        self, request: lexical_pb2.CountRequest, context: _Context
    ) -> lexical_pb2.CountResponse:
        check_tenant(request.tenant)
        return lexical_pb2.CountResponse(count=await self._service.count(request.tenant))
