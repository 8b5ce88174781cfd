"""The calls the store clients share (Upsert's reply, Delete, UpdateAccess, Count, Get, Scan,
UpdateRelevance), each client against an in-process servicer that records what arrived; and
the vector client's Neighbours."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.graph.v1 import graph_pb2, graph_pb2_grpc
from engram.lexical.v1 import lexical_pb2, lexical_pb2_grpc
from engram.vector.v1 import vector_pb2, vector_pb2_grpc
from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.vector import VectorClient
from engram_core.errors import FailedPrecondition, NotFound, Unavailable
from engram_core.model import AccessUpdate, Generation, Hit, Memory, RelevanceUpdate, ScanPage
from engram_platform.convert import (
    access_update_from_proto,
    generation_to_proto,
    memory_to_proto,
)
from engram_platform.errors import FIELD_KEY
from engram_testing.in_process import serving_fake

T0 = datetime(2025, 3, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Kind:
    name: str
    client: Callable[[grpc.aio.Channel], Any]
    servicer: type
    register: Callable[[Any, grpc.aio.Server], None]
    pb2: ModuleType
    upsert_items: list[Any]


MEMORY = Memory(id="m1", tenant="t", content="hello", timestamp=T0, updated_at=T0)
KINDS = [
    Kind(
        "vector",
        VectorClient,
        vector_pb2_grpc.VectorServiceServicer,
        vector_pb2_grpc.add_VectorServiceServicer_to_server,
        vector_pb2,
        [(MEMORY, [0.5, 0.25])],
    ),
    Kind(
        "lexical",
        LexicalClient,
        lexical_pb2_grpc.LexicalServiceServicer,
        lexical_pb2_grpc.add_LexicalServiceServicer_to_server,
        lexical_pb2,
        [MEMORY],
    ),
    Kind(
        "graph",
        GraphClient,
        graph_pb2_grpc.GraphServiceServicer,
        graph_pb2_grpc.add_GraphServiceServicer_to_server,
        graph_pb2,
        [(MEMORY, [])],
    ),
]


def _generation(name: str, model: str, *, live: bool = False) -> common_pb2.Generation:
    return generation_to_proto(Generation(name, live, model, 7, T0))


def recorder(kind: Kind) -> Any:
    pb2 = kind.pb2

    class Recorder(kind.servicer):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self.seen: list[Any] = []

        async def Upsert(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            return pb2.UpsertResponse(applied=3, skipped=2)

        async def Delete(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            return pb2.DeleteResponse(deleted=len(request.ids) + 10)

        async def UpdateAccess(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            return pb2.UpdateAccessResponse(updated=len(request.updates) + 20)

        async def Count(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            if request.tenant == "down":
                await context.abort(grpc.StatusCode.UNAVAILABLE, "backend down")
            return pb2.CountResponse(count=41)

        async def Get(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            found = [
                memory_to_proto(
                    Memory(id=i, tenant=request.tenant, content=i, timestamp=T0, updated_at=T0)
                )
                for i in request.ids
            ]
            return pb2.GetResponse(memories=found)

        async def Scan(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            m = Memory(id="m1", tenant=request.tenant, content="c", timestamp=T0, updated_at=T0)
            # A first page continues at "m1"; the page after it is the last.
            more = "m1" if request.cursor == "" else ""
            return pb2.ScanResponse(memories=[memory_to_proto(m)], next_cursor=more)

        async def ScanBySequence(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(("by_sequence", request))
            m = Memory(id="m2", tenant=request.tenant, content="c", timestamp=T0, updated_at=T0)
            more = "4:m2" if request.cursor == "" else ""
            return pb2.ScanResponse(memories=[memory_to_proto(m)], next_cursor=more)

        async def UpdateRelevance(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            return pb2.UpdateRelevanceResponse(updated=len(request.updates) + 30)

        async def CreateGeneration(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            return pb2.CreateGenerationResponse(
                generation=_generation("v2", request.embedding_model)
            )

        async def ListGenerations(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            return pb2.ListGenerationsResponse(
                generations=[_generation("v1", "m", live=True), _generation("v2", "m")]
            )

        async def SwapGeneration(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            if request.name == "v9":
                await context.abort(grpc.StatusCode.NOT_FOUND, "generation 'v9' does not exist")
            if request.name == "v1":
                context.set_trailing_metadata(((FIELD_KEY, "name"),))
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "name: it is live")
            return pb2.SwapGenerationResponse(previous=_generation("v1", "m"))

        async def DropGeneration(self, request: Any, context: Any) -> Any:  # noqa: N802
            self.seen.append(request)
            return pb2.DropGenerationResponse()

    return Recorder()


@dataclass
class Served:
    kind: Kind
    client: Any
    servicer: Any


@pytest.fixture(params=KINDS, ids=[k.name for k in KINDS])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[Served]:
    kind: Kind = request.param
    servicer = recorder(kind)
    async with serving_fake(kind.register, servicer) as channel:
        yield Served(kind, kind.client(channel), servicer)


async def test_delete_sends_tenant_ids_version(served: Served) -> None:
    assert await served.client.delete("t", ["a", "b"], 9, timeout=5) == 12
    sent = served.servicer.seen[-1]
    assert (sent.tenant, list(sent.ids), sent.version) == ("t", ["a", "b"], 9)


async def test_update_access_sends_the_updates(served: Served) -> None:
    updates = [
        AccessUpdate(id="a", last_accessed=T0, access_count=4),
        AccessUpdate(id="b", last_accessed=T0, access_count=1),
    ]
    assert await served.client.update_access("t", updates) == 22
    sent = served.servicer.seen[-1]
    assert sent.tenant == "t"
    assert [access_update_from_proto(u) for u in sent.updates] == updates


async def test_count(served: Served) -> None:
    assert await served.client.count("t") == 41
    assert served.servicer.seen[-1].tenant == "t"


async def test_a_failed_call_raises_the_catalog_error(served: Served) -> None:
    with pytest.raises(Unavailable, match="backend down"):
        await served.client.count("down")


async def test_upsert_maps_the_reply(served: Served) -> None:
    result = await served.client.upsert("t", served.kind.upsert_items)
    assert (result.applied, result.skipped) == (3, 2)
    assert served.servicer.seen[-1].tenant == "t"


async def test_get_returns_the_memories(served: Served) -> None:
    if isinstance(served.client, GraphClient):
        assert not hasattr(served.client, "get")  # the graph serves no Get
        return
    got = await served.client.get("t", ["x", "y"])
    assert [(m.id, m.tenant, m.content) for m in got] == [("x", "t", "x"), ("y", "t", "y")]
    assert list(served.servicer.seen[-1].ids) == ["x", "y"]


async def test_scan_maps_cursors_both_ways(served: Served) -> None:
    first = await served.client.scan("t", None, 50)
    sent = served.servicer.seen[-1]
    assert (sent.tenant, sent.cursor, sent.limit) == ("t", "", 50)
    assert [m.id for m in first.memories] == ["m1"]
    assert first.next_cursor == "m1"
    last = await served.client.scan("t", first.next_cursor, 50, timeout=5)
    assert served.servicer.seen[-1].cursor == "m1"
    assert last == ScanPage(memories=first.memories, next_cursor=None)


async def test_vector_scan_by_sequence_calls_its_own_rpc(served: Served) -> None:
    if not isinstance(served.client, VectorClient):
        return
    first = await served.client.scan_by_sequence("t", None, 50)
    assert [m.id for m in first.memories] == ["m2"]
    assert first.next_cursor == "4:m2"
    last = await served.client.in_generation("v2").scan_by_sequence("t", "4:m2", 50)
    assert last.next_cursor is None
    (rpc, sent) = served.servicer.seen[-1]
    assert (rpc, sent.tenant, sent.cursor, sent.limit, sent.generation) == (
        "by_sequence",
        "t",
        "4:m2",
        50,
        "v2",
    )


async def test_update_relevance_sends_the_updates(served: Served) -> None:
    updates = [RelevanceUpdate(id="a", relevance_score=0.25), RelevanceUpdate("b", 1.0)]
    assert await served.client.update_relevance("t", updates) == 32
    sent = served.servicer.seen[-1]
    assert sent.tenant == "t"
    assert [(u.id, u.relevance_score) for u in sent.updates] == [("a", 0.25), ("b", 1.0)]


class NeighbourRecorder(vector_pb2_grpc.VectorServiceServicer):
    def __init__(self) -> None:
        self.seen: list[vector_pb2.NeighboursRequest] = []

    async def Neighbours(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        return vector_pb2.NeighboursResponse(
            neighbours=[
                vector_pb2.Neighbours(
                    id=i,
                    hits=[common_pb2.Hit(id=f"{i}-n{k}", score=0.9 - k / 10) for k in range(2)],
                )
                for i in request.ids
                if i != "gone"
            ]
        )


async def test_vector_neighbours_map_to_a_dict_of_hits() -> None:
    servicer = NeighbourRecorder()
    async with serving_fake(vector_pb2_grpc.add_VectorServiceServicer_to_server, servicer) as ch:
        got = await VectorClient(ch).neighbours("t", ["a", "gone", "b"], 2, 0.5, timeout=5)
    [sent] = servicer.seen
    assert (sent.tenant, list(sent.ids), sent.limit, sent.min_score) == (
        "t",
        ["a", "gone", "b"],
        2,
        0.5,
    )
    assert got == {
        "a": [Hit("a-n0", 0.9), Hit("a-n1", 0.8)],
        "b": [Hit("b-n0", 0.9), Hit("b-n1", 0.8)],
    }


async def test_a_client_bound_to_a_generation_sends_it_on_every_write_and_read(
    served: Served,
) -> None:
    if isinstance(served.client, GraphClient):
        assert not hasattr(served.client, "in_generation")  # the graph has no generations
        return
    bound = served.client.in_generation("v2")
    assert (bound.generation, served.client.generation) == ("v2", "")
    await bound.upsert("t", served.kind.upsert_items)
    await bound.delete("t", ["a"], 3)
    await bound.get("t", ["a"])
    await bound.update_access("t", [AccessUpdate(id="a", last_accessed=T0, access_count=1)])
    await bound.count("t")
    await bound.scan("t", None, 10)
    await bound.update_relevance("t", [RelevanceUpdate(id="a", relevance_score=0.5)])
    assert [r.generation for r in served.servicer.seen] == ["v2"] * 7
    await served.client.count("t")  # the client it came from still talks to the live one
    assert served.servicer.seen[-1].generation == ""
    assert bound.in_generation("").generation == ""


async def test_generation_calls_map_both_ways(served: Served) -> None:
    if isinstance(served.client, GraphClient):
        return
    created = await served.client.create_generation("model-b")
    assert created == Generation("v2", False, "model-b", 7, T0)
    assert served.servicer.seen[-1].embedding_model == "model-b"
    assert [g.name for g in await served.client.list_generations() if g.live] == ["v1"]
    assert (await served.client.swap_generation("v2")).name == "v1"
    assert served.servicer.seen[-1].name == "v2"
    await served.client.drop_generation("v1")
    assert served.servicer.seen[-1].name == "v1"
    with pytest.raises(NotFound):
        await served.client.swap_generation("v9")
    with pytest.raises(FailedPrecondition) as err:
        await served.client.swap_generation("v1")
    assert (err.value.field, err.value.reason) == ("name", "it is live")
