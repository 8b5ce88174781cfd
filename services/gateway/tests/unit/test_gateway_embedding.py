"""The vector stream's inputs: the client's own query vector (`embedding`) — searched by,
the model skipped, a size the model cannot take the client's error — and the pool tags
widen."""

from __future__ import annotations

import math
from typing import Any

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2

VECTOR = [0.6, 0.0, 0.8]  # the fake vector service's model has 3 dimensions


def _id(n: int) -> str:
    return f"0190f3a4-7b1c-7d2e-8f00-{n:012x}"


async def test_the_vector_stream_searches_by_the_sent_embedding(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(_id(1), "green tea at breakfast"), h.memory(_id(2), "tea"))
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(query="tea", embedding=VECTOR, profile="conversation"),
        metadata=client.auth(),
    )
    assert {r.memory.id for r in reply.results} == {_id(1), _id(2)}
    assert "vector" in reply.streams
    # The main search and every timeline-window search of the context step used it…
    searches = [a for op, a in h.vector.calls if op == "search"]
    assert len(h.vector.vectors) == len(searches) >= 2
    assert all(v == pytest.approx(tuple(VECTOR)) for v in h.vector.vectors)
    # …while BM25 still read the text.
    assert [a[0] for op, a in h.lexical.calls if op == "search"] == ["tea"]


async def test_without_an_embedding_the_text_is_embedded(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(_id(1), "tea"))
    await client.stub.Recall(gateway_pb2.RecallRequest(query="tea"), metadata=client.auth())
    assert h.vector.vectors == []


@pytest.mark.parametrize(
    "request_",
    [
        gateway_pb2.RecallRequest(query="tea", embedding=[0.1, 0.2]),  # the model has 3
        gateway_pb2.RecallRequest(query="tea", embedding=[0.1, math.nan, 0.2]),
        gateway_pb2.RecallRequest(query="tea", embedding=[0.1] * 4097),
        gateway_pb2.RecallRequest(query="tea", embedding=[0.0, 0.0, 0.0]),  # no direction
        gateway_pb2.RecallRequest(query="", embedding=VECTOR),  # trending has no vector
    ],
)
async def test_a_bad_embedding_names_the_field(client: Any, request_: Any) -> None:
    client.harness.world.put(client.harness.memory(_id(1), "tea"))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Recall(request_, metadata=client.auth(), timeout=5)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == "embedding"


async def test_tags_widen_the_vector_pool_only(harness: Any) -> None:
    h = harness
    h.world.put(h.memory(_id(1), "tea", tags=("kitchen",)))
    await h.recall("tea", limit=10)
    await h.recall("tea", limit=10, tags=["kitchen"])
    # The main searches (the context step's window searches carry a time window).
    pools = [a[2] for op, a in h.vector.calls if op == "search" and a[1].start is None]
    lexical = [a[2] for op, a in h.lexical.calls if op == "search"]
    # limit 10: pool 40; scoped by tags, the vector stream's is streams.tag_pool_factor (2) × 40.
    assert pools == [40, 80]
    assert lexical == [40, 40]
