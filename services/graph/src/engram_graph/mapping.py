"""Proto <-> domain for the graph RPCs; Memory, Filter, Hit, Relation, Entity and AccessUpdate
conversions are the shared ones in engram_platform.convert."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from engram.common.v1 import common_pb2
from engram.graph.v1 import graph_pb2
from engram_core.model import (
    AccessUpdate,
    Entity,
    Filter,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    RelevanceUpdate,
    ScanPage,
    UpsertResult,
)
from engram_platform.convert import (
    access_update_from_proto,
    add_hits,
    add_memories,
    entity_from_proto,
    filter_from_proto,
    memory_from_proto,
    relation_from_proto,
    relation_to_proto,
)


def upsert_items(
    memories: Iterable[graph_pb2.GraphMemory],
) -> list[tuple[Memory, list[Entity]]]:
    return [
        (memory_from_proto(g.memory), [entity_from_proto(e) for e in g.entities]) for g in memories
    ]


def relations_from_proto(relations: Iterable[common_pb2.Relation], now: datetime) -> list[Relation]:
    """An edge sent without created_at was created ``now``, not at the epoch."""
    out = []
    for r in relations:
        relation = relation_from_proto(r)
        out.append(relation if r.HasField("created_at") else replace(relation, created_at=now))
    return out


def search_args(
    request: graph_pb2.SearchRequest,
) -> tuple[str, list[str], list[str], Filter, int]:
    return (
        request.tenant,
        list(request.entity_keys),
        list(request.keywords),
        filter_from_proto(request.filter),
        request.limit,
    )


def access_updates_from_proto(updates: Iterable[common_pb2.AccessUpdate]) -> list[AccessUpdate]:
    return [access_update_from_proto(u) for u in updates]


def upsert_response(result: UpsertResult) -> graph_pb2.UpsertResponse:
    return graph_pb2.UpsertResponse(applied=result.applied, skipped=result.skipped)


def related_response(hits: Iterable[RelatedHit]) -> graph_pb2.RelatedResponse:
    return graph_pb2.RelatedResponse(
        hits=[
            graph_pb2.RelatedHit(id=h.id, type=h.type, strength=h.strength, depth=h.depth)
            for h in hits
        ]
    )


def search_response(hits: Iterable[Hit]) -> graph_pb2.SearchResponse:
    out = graph_pb2.SearchResponse()
    add_hits(out.hits, hits)
    return out


def relations_response(relations: Iterable[Relation]) -> graph_pb2.RelationsResponse:
    return graph_pb2.RelationsResponse(relations=[relation_to_proto(r) for r in relations])


def relevance_updates_from_proto(
    updates: Iterable[graph_pb2.RelevanceUpdate],
) -> list[RelevanceUpdate]:
    return [RelevanceUpdate(id=u.id, relevance_score=u.relevance_score) for u in updates]


def scan_response(page: ScanPage) -> graph_pb2.ScanResponse:
    out = graph_pb2.ScanResponse(next_cursor=page.next_cursor or "")
    add_memories(out.memories, page.memories)
    return out
