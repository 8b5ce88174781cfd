"""Proto <-> domain for engram.vector.v1 messages (shared types via engram_platform.convert)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from engram.vector.v1 import vector_pb2
from engram_core.model import AccessUpdate, Hit, Memory, RelevanceUpdate, ScanPage, UpsertResult
from engram_platform import convert


def point_from_proto(point: vector_pb2.Point) -> tuple[Memory, list[float]]:
    return convert.memory_from_proto(point.memory), list(point.vector)


def point_to_proto(memory: Memory, vector: Sequence[float]) -> vector_pb2.Point:
    return vector_pb2.Point(memory=convert.memory_to_proto(memory), vector=list(vector))


def upsert_response(result: UpsertResult) -> vector_pb2.UpsertResponse:
    return vector_pb2.UpsertResponse(applied=result.applied, skipped=result.skipped)


def search_response(hits: Sequence[Hit]) -> vector_pb2.SearchResponse:
    return vector_pb2.SearchResponse(hits=[convert.hit_to_proto(h) for h in hits])


def search_many_response(results: Sequence[Sequence[Hit]]) -> vector_pb2.SearchManyResponse:
    return vector_pb2.SearchManyResponse(results=[search_response(hits) for hits in results])


def get_response(memories: Sequence[Memory]) -> vector_pb2.GetResponse:
    return vector_pb2.GetResponse(memories=[convert.memory_to_proto(m) for m in memories])


def access_updates_from_proto(
    request: vector_pb2.UpdateAccessRequest,
) -> list[AccessUpdate]:
    return [convert.access_update_from_proto(u) for u in request.updates]


def scan_response(page: ScanPage) -> vector_pb2.ScanResponse:
    return vector_pb2.ScanResponse(
        memories=[convert.memory_to_proto(m) for m in page.memories],
        next_cursor=page.next_cursor or "",
    )


def relevance_updates_from_proto(
    updates: Iterable[vector_pb2.RelevanceUpdate],
) -> list[RelevanceUpdate]:
    return [RelevanceUpdate(id=u.id, relevance_score=u.relevance_score) for u in updates]


def neighbours_response(found: Mapping[str, Sequence[Hit]]) -> vector_pb2.NeighboursResponse:
    return vector_pb2.NeighboursResponse(
        neighbours=[
            vector_pb2.Neighbours(id=id_, hits=[convert.hit_to_proto(h) for h in hits])
            for id_, hits in found.items()
        ]
    )
