"""GraphClient's relation writes: what goes on the wire and what comes back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from engram.graph.v1 import graph_pb2, graph_pb2_grpc
from engram_clients.graph import GraphClient
from engram_core.model import Relation
from engram_platform.convert import relation_from_proto
from engram_testing.in_process import serving_fake


class Recorder(graph_pb2_grpc.GraphServiceServicer):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def AddRelations(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        return graph_pb2.AddRelationsResponse(applied=len(request.relations) + 10)

    async def RemoveRelations(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        return graph_pb2.RemoveRelationsResponse(removed=len(request.relations) + 20)


@pytest.fixture
async def served() -> AsyncIterator[tuple[GraphClient, Recorder]]:
    recorder = Recorder()
    async with serving_fake(graph_pb2_grpc.add_GraphServiceServicer_to_server, recorder) as ch:
        yield GraphClient(ch), recorder


RELATIONS = [
    Relation("a", "b", "SIMILAR_TO", 0.5, origin="system"),
    Relation("b", "c", "LEADS_TO", 0.25),
]


async def test_add_relations_sends_per_relation_versions(
    served: tuple[GraphClient, Recorder],
) -> None:
    client, recorder = served
    assert await client.add_relations("t", RELATIONS, 9, [4, 9]) == 12
    assert await client.add_relations("t", RELATIONS[:1], 3) == 11
    first, second = recorder.seen
    assert (first.tenant, first.version, list(first.versions)) == ("t", 9, [4, 9])
    assert [relation_from_proto(r).target_id for r in first.relations] == ["b", "c"]
    assert (second.version, list(second.versions)) == (3, [])


async def test_remove_relations_sends_the_edges_and_origins(
    served: tuple[GraphClient, Recorder],
) -> None:
    client, recorder = served
    assert await client.remove_relations("t", RELATIONS, 7, [5, 7]) == 22
    [request] = recorder.seen
    assert (request.tenant, request.version, list(request.versions)) == ("t", 7, [5, 7])
    sent = [relation_from_proto(r) for r in request.relations]
    assert [(r.source_id, r.target_id, r.type, r.origin) for r in sent] == [
        ("a", "b", "SIMILAR_TO", "system"),
        ("b", "c", "LEADS_TO", "user"),
    ]
