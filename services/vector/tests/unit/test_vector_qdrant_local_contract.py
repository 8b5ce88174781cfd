"""The qdrant-client adapter passes the VectorIndex contract, through local mode.

Local mode (``:memory:``) is a pure-Python reimplementation and slow; the contract's
data is small. The same suite runs against a real server in the integration tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from qdrant_client import AsyncQdrantClient

from engram_core.errors import InvalidArgument, Unavailable
from engram_testing.contracts.vector import DIM, T, VectorIndexContract, axis, mem
from engram_vector.adapters.qdrant_server import QdrantOptions, QdrantVectorIndex


class TestQdrantVectorIndex(VectorIndexContract):
    @pytest.fixture
    async def index(self) -> AsyncIterator[QdrantVectorIndex]:
        client = AsyncQdrantClient(location=":memory:")
        index = await QdrantVectorIndex.open(client, QdrantOptions(dimension=DIM))
        yield index
        await index.close()


async def test_opening_an_existing_collection_keeps_its_data() -> None:
    client = AsyncQdrantClient(location=":memory:")
    first = await QdrantVectorIndex.open(client, QdrantOptions(dimension=DIM))
    await first.upsert(T, [(mem("a"), axis(0))])
    second = await QdrantVectorIndex.open(client, QdrantOptions(dimension=DIM))
    assert await second.count(T) == 1
    with pytest.raises(Unavailable, match="holds 8-d vectors"):
        await QdrantVectorIndex.open(client, QdrantOptions(dimension=DIM * 2))
    await client.close()


async def test_qdrant_enforces_the_version_guard_when_replicas_race(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = await QdrantVectorIndex.open(
        AsyncQdrantClient(location=":memory:"), QdrantOptions(dimension=DIM)
    )
    await index.upsert(T, [(mem("a", "newer", version=5), axis(0))])

    async def nothing_stored(tenant: str, ids: object) -> dict[str, object]:
        return {}  # what a replica sees when it read just before another one wrote

    monkeypatch.setattr(index, "_stored", nothing_stored)
    await index.upsert(T, [(mem("a", "older", version=3), axis(1))])
    await index.delete(T, ["a"], version=4)
    monkeypatch.undo()
    assert [m.content for m in await index.get(T, ["a"])] == ["newer"]
    await index.close()


@pytest.mark.parametrize("prefer_grpc", [False, True])
async def test_a_server_that_is_down_is_unavailable(prefer_grpc: bool) -> None:
    client = AsyncQdrantClient(
        url="http://127.0.0.1:9",
        grpc_port=9,
        prefer_grpc=prefer_grpc,
        timeout=2,
        check_compatibility=False,
    )
    with pytest.raises(Unavailable, match="qdrant"):
        await QdrantVectorIndex.open(client, QdrantOptions(dimension=DIM))
    await client.close()


async def test_a_cursor_that_is_no_point_id_is_invalid_argument() -> None:
    index = await QdrantVectorIndex.open(
        AsyncQdrantClient(location=":memory:"), QdrantOptions(dimension=DIM)
    )
    await index.upsert(T, [(mem("a"), axis(0))])
    with pytest.raises(InvalidArgument) as err:
        await index.scan(T, "not-a-cursor", 10)
    assert err.value.field == "cursor"
    await index.close()
