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
    out = vector_pb2.SearchResponse()
    convert.add_hits(out.hits, hits)
    return out


def search_many_response(results: Sequence[Sequence[Hit]]) -> vector_pb2.SearchManyResponse:
    out = vector_pb2.SearchManyResponse()
    for hits in results:
        convert.add_hits(out.results.add().hits, hits)
    return out


def get_response(memories: Sequence[Memory]) -> vector_pb2.GetResponse:
    out = vector_pb2.GetResponse()
    convert.add_memories(out.memories, memories)
    return out


def access_updates_from_proto(
    request: vector_pb2.UpdateAccessRequest,
) -> list[AccessUpdate]:
    return [convert.access_update_from_proto(u) for u in request.updates]


def scan_response(page: ScanPage) -> vector_pb2.ScanResponse:
    out = vector_pb2.ScanResponse(next_cursor=page.next_cursor or "")
    convert.add_memories(out.memories, page.memories)
    return out


def relevance_updates_from_proto(
    updates: Iterable[vector_pb2.RelevanceUpdate],
) -> list[RelevanceUpdate]:
    return [RelevanceUpdate(id=u.id, relevance_score=u.relevance_score) for u in updates]


def neighbours_response(found: Mapping[str, Sequence[Hit]]) -> vector_pb2.NeighboursResponse:
    out = vector_pb2.NeighboursResponse()
    for id_, hits in found.items():
        convert.add_hits(out.neighbours.add(id=id_).hits, hits)
    return out
