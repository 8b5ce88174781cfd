"""RecallRequest.mode: which retrieval streams a recall queries."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2
from engram_core.model import Relation
from engram_core.scoring import Fusion
from engram_gateway.service import RecallMode

A = "0190f3a4-7b1c-7d2e-8f00-00000000001a"
B = "0190f3a4-7b1c-7d2e-8f00-00000000001b"
C = "0190f3a4-7b1c-7d2e-8f00-00000000001c"


def seed(h: Any) -> None:
    h.world.put(
        h.memory(A, "Sarah prefers green tea in the morning"),
        h.memory(B, "The deploy pipeline runs tea tests"),
        h.memory(C, "Lunch with Sarah at noon"),
    )
    h.world.relations.append((h.tenant, Relation(A, C, "RELATES_TO", 0.5)))


def searched(backend: Any) -> int:
    return sum(1 for op, _ in backend.calls if op == "search")


def graph_calls(h: Any) -> list[str]:
    return [op for op, _ in h.graph.calls]


async def _recall(client: Any, mode: int) -> Any:
    return await client.stub.Recall(
        gateway_pb2.RecallRequest(query="sarah tea", mode=mode),  # type: ignore[arg-type]
        metadata=client.auth(),
    )


async def test_bm25_mode_queries_only_the_lexical_stream(client: Any) -> None:
    h = client.harness
    seed(h)
    reply = await _recall(client, gateway_pb2.RECALL_MODE_BM25)
    assert (searched(h.vector), searched(h.lexical)) == (0, 1)
    assert graph_calls(h) == []  # neither the graph search nor the relations lookup
    assert list(reply.streams) == ["lexical"]
    assert list(reply.degraded) == []
    assert {r.memory.id for r in reply.results} == {A, B, C}
    assert all(set(r.streams) == {"keyword"} for r in reply.results)
    assert reply.results[0].memory.id == A  # both words
    assert all(c.relation == 0.0 for c in h.ranker.calls[-1]["candidates"])


async def test_vector_mode_queries_only_the_vector_stream(client: Any) -> None:
    h = client.harness
    seed(h)
    reply = await _recall(client, gateway_pb2.RECALL_MODE_VECTOR)
    assert (searched(h.vector), searched(h.lexical)) == (1, 0)
    assert graph_calls(h) == []
    assert list(reply.streams) == ["vector"]
    assert all(set(r.streams) == {"vector"} for r in reply.results)


async def test_graph_mode_queries_only_the_graph(client: Any) -> None:
    h = client.harness
    seed(h)
    reply = await _recall(client, gateway_pb2.RECALL_MODE_GRAPH)
    assert (searched(h.vector), searched(h.lexical), searched(h.graph)) == (0, 0, 1)
    assert list(reply.streams) == ["graph"]
    assert "relations" in graph_calls(h)  # the relation signal belongs to the graph
    assert all(set(r.streams) == {"graph"} for r in reply.results)


async def test_graph_mode_without_anything_to_look_up_is_empty(client: Any) -> None:
    h = client.harness
    seed(h)
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(query="is it", mode=gateway_pb2.RECALL_MODE_GRAPH),
        metadata=client.auth(),
    )
    assert list(reply.results) == []
    assert list(reply.streams) == []
    assert h.graph.calls == []


@pytest.mark.parametrize(
    "mode", [gateway_pb2.RECALL_MODE_UNSPECIFIED, gateway_pb2.RECALL_MODE_HYBRID]
)
async def test_hybrid_is_the_default_and_leaves_the_graph_stream_out(
    client: Any, mode: int
) -> None:
    """The graph stream's weight is 0 in weighted fusion, so default hybrid does not search
    it; the graph still answers the candidates' relations."""
    h = client.harness
    seed(h)
    reply = await _recall(client, mode)
    assert list(reply.streams) == ["vector", "lexical"]
    assert (searched(h.lexical), searched(h.graph)) == (1, 0)
    assert "relations" in graph_calls(h)


@pytest.mark.parametrize(
    ("setting", "fusion", "mode"),
    [
        (True, None, RecallMode.HYBRID),
        (False, Fusion.RRF, RecallMode.HYBRID),
        (False, None, RecallMode.HYBRID_GRAPH),
    ],
)
async def test_every_stream_is_searched_where_the_graph_stream_counts(
    new_harness: Any, setting: bool, fusion: Fusion | None, mode: RecallMode
) -> None:
    """With the setting on (a deployment that gives the graph weight), with RRF (stream
    weight 1) and in hybrid_graph, hybrid searches all three streams."""
    h = new_harness(streams={"hybrid_graph_stream": setting})
    seed(h)
    result = await h.recall("sarah tea", mode=mode, fusion=fusion)
    assert list(result.streams) == ["vector", "lexical", "graph"]
    assert (searched(h.lexical), searched(h.graph)) == (1, 1)


async def test_mode_is_part_of_the_recall_cache_key(client: Any) -> None:
    h = client.harness
    seed(h)
    first = await _recall(client, gateway_pb2.RECALL_MODE_BM25)
    second = await _recall(client, gateway_pb2.RECALL_MODE_VECTOR)
    assert list(first.streams) == ["lexical"]
    assert list(second.streams) == ["vector"]


async def test_an_unknown_mode_is_invalid_argument_naming_mode(client: Any) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await _recall(client, 42)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == "mode"
    h = client.harness
    assert h.vector.calls == h.lexical.calls == h.graph.calls == []


async def test_a_recall_asks_the_graph_for_each_memorys_relations_once(client: Any) -> None:
    h = client.harness
    seed(h)
    reply = await _recall(client, gateway_pb2.RECALL_MODE_HYBRID_GRAPH)
    assert len(reply.results) == 3
    asked = [ids for op, ids in h.graph.calls if op == "relations"]
    # The relation component, the graph rerank and the state step share one lookup.
    assert len(asked) == 1
    assert sorted(asked[0]) == sorted({A, B, C})
