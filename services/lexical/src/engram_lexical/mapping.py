"""Proto <-> domain for the lexical RPCs; Memory, Filter, Hit and AccessUpdate conversions
are the shared ones in engram_platform.convert."""

from __future__ import annotations

from collections.abc import Iterable

from engram.common.v1 import common_pb2
from engram.lexical.v1 import lexical_pb2
from engram_core.model import (
    AccessUpdate,
    Filter,
    Hit,
    Memory,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_core.ordering import Sort
from engram_platform.convert import (
    access_update_from_proto,
    add_hits,
    add_memories,
    filter_from_proto,
    memory_from_proto,
)


def memories_from_proto(memories: Iterable[common_pb2.Memory]) -> list[Memory]:
    return [memory_from_proto(m) for m in memories]


def search_args(request: lexical_pb2.SearchRequest) -> tuple[str, str, Filter, int]:
    return request.tenant, request.query, filter_from_proto(request.filter), request.limit


def top_args(request: lexical_pb2.TopRequest) -> tuple[str, Filter, Sort, int]:
    sort = (
        Sort.IMPORTANCE
        if request.sort == lexical_pb2.SORT_UNSPECIFIED
        else Sort[lexical_pb2.Sort.Name(request.sort).removeprefix("SORT_")]
    )
    return request.tenant, filter_from_proto(request.filter), sort, request.limit


def top_response(memories: Iterable[Memory]) -> lexical_pb2.TopResponse:
    out = lexical_pb2.TopResponse()
    add_memories(out.memories, memories)
    return out


def access_updates_from_proto(
    updates: Iterable[common_pb2.AccessUpdate],
) -> list[AccessUpdate]:
    return [access_update_from_proto(u) for u in updates]


def upsert_response(result: UpsertResult) -> lexical_pb2.UpsertResponse:
    return lexical_pb2.UpsertResponse(applied=result.applied, skipped=result.skipped)


def search_response(hits: Iterable[Hit]) -> lexical_pb2.SearchResponse:
    out = lexical_pb2.SearchResponse()
    add_hits(out.hits, hits)
    return out


def get_response(memories: Iterable[Memory]) -> lexical_pb2.GetResponse:
    out = lexical_pb2.GetResponse()
    add_memories(out.memories, memories)
    return out


def relevance_updates_from_proto(
    updates: Iterable[lexical_pb2.RelevanceUpdate],
) -> list[RelevanceUpdate]:
    return [RelevanceUpdate(id=u.id, relevance_score=u.relevance_score) for u in updates]


def scan_response(page: ScanPage) -> lexical_pb2.ScanResponse:
    out = lexical_pb2.ScanResponse(next_cursor=page.next_cursor or "")
    add_memories(out.memories, page.memories)
    return out
