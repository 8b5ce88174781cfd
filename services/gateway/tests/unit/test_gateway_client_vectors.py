"""A memory's own vector (`MemoryInput.embedding`) on every write: checked as a recall's
query vector is, against the live model's size, and carried on the event to ingest; a bad
one refuses the whole request before anything is published."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_core.errors import Unavailable
from engram_core.model import Generation
from engram_gateway.service.vector_size import LiveDimension

VECTOR = [0.6, 0.0, 0.8]  # the fake vector service's live model has 3 dimensions
UUID = "0190f3a4-7b1c-7d2e-8f00-123456789abc"

BAD = {
    "too short": [0.1, 0.2],
    "too long": [0.1, 0.2, 0.3, 0.4],
    "past any model": [0.1] * 4097,
    "nan": [0.1, math.nan, 0.2],
    "infinite": [0.1, math.inf, 0.2],
    "beyond float32": [0.1, 1e39, 0.2],  # becomes infinite on the wire
    "all zeros": [0.0, 0.0, 0.0],
}


def _input(content: str, embedding: list[float] | None = None) -> common_pb2.MemoryInput:
    return common_pb2.MemoryInput(content=content, embedding=embedding or [])


async def _refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await call
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return exc.value


async def test_store_carries_the_vector_on_its_event(client: Any) -> None:
    h = client.harness
    reply = await client.stub.Store(
        gateway_pb2.StoreRequest(memory=_input("green tea", VECTOR)), metadata=client.auth()
    )
    [event] = h.log.of("stored")
    assert event.payload[0].id == reply.id
    assert event.embedding == pytest.approx(tuple(VECTOR))


async def test_a_batch_carries_each_vector_and_none_where_none_was_sent(client: Any) -> None:
    h = client.harness
    memories = [_input("a", VECTOR), _input("b"), _input("c", [0.0, 1.0, 0.0])]
    await client.stub.StoreBatch(
        gateway_pb2.StoreBatchRequest(memories=memories), metadata=client.auth()
    )
    by_content = {e.payload[0].content: e.embedding for e in h.log.of("stored")}
    assert by_content == {"a": pytest.approx(tuple(VECTOR)), "b": (), "c": (0.0, 1.0, 0.0)}


async def test_the_size_is_asked_once_and_only_when_a_vector_is_sent(client: Any) -> None:
    h = client.harness
    await client.stub.Store(gateway_pb2.StoreRequest(memory=_input("x")), metadata=client.auth())
    assert not [op for op, _ in h.vector.calls if op == "list_generations"]
    for text in ("y", "z"):
        await client.stub.Store(
            gateway_pb2.StoreRequest(memory=_input(text, VECTOR)), metadata=client.auth()
        )
    assert [op for op, _ in h.vector.calls if op == "list_generations"] == ["list_generations"]


@pytest.mark.parametrize("values", BAD.values(), ids=BAD.keys())
async def test_store_refuses_a_bad_vector_naming_it(client: Any, values: list[float]) -> None:
    request = gateway_pb2.StoreRequest(memory=_input("tea", values))
    err = await _refused(client.stub.Store(request, metadata=client.auth()))
    assert client.field_of(err) == "memory.embedding"
    assert client.harness.log.events == []


@pytest.mark.parametrize("values", BAD.values(), ids=BAD.keys())
async def test_a_batch_with_one_bad_vector_stores_nothing(client: Any, values: list[float]) -> None:
    memories = [_input(f"m{i}", VECTOR) for i in range(5)]
    memories[3] = _input("m3", values)
    request = gateway_pb2.StoreBatchRequest(memories=memories)
    err = await _refused(client.stub.StoreBatch(request, metadata=client.auth()))
    assert client.field_of(err) == "memories[3].embedding"
    assert client.harness.log.events == []


async def test_a_stream_with_one_bad_vector_stores_nothing(client: Any) -> None:
    async def requests() -> AsyncIterator[gateway_pb2.StoreRequest]:
        yield gateway_pb2.StoreRequest(memory=_input("ok", VECTOR))
        yield gateway_pb2.StoreRequest(memory=_input("bad", [1.0, 2.0]))

    err = await _refused(client.stub.StoreStream(requests(), metadata=client.auth()))
    assert client.field_of(err) == "requests[1].memory.embedding"
    assert client.harness.log.events == []


@pytest.mark.parametrize("values", BAD.values(), ids=BAD.keys())
async def test_update_refuses_a_bad_vector_and_leaves_the_memory(
    client: Any, values: list[float]
) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "old text"))
    request = gateway_pb2.UpdateRequest(id=UUID, memory=_input("new text", values))
    err = await _refused(client.stub.Update(request, metadata=client.auth()))
    assert client.field_of(err) == "memory.embedding"
    assert h.log.events == []


async def test_update_carries_the_vector(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "old text"))
    await client.stub.Update(
        gateway_pb2.UpdateRequest(
            id=UUID,
            memory=_input("ignored", VECTOR),
            update_mask=FieldMask(paths=["embedding"]),
        ),
        metadata=client.auth(),
    )
    [event] = h.log.of("updated")
    memory, mask = event.payload
    assert (memory.content, mask) == ("old text", ("embedding",))
    assert event.embedding == pytest.approx(tuple(VECTOR))


async def test_an_update_without_a_vector_carries_none(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "old text"))
    await client.stub.Update(
        gateway_pb2.UpdateRequest(id=UUID, memory=_input("new text")), metadata=client.auth()
    )
    assert h.log.of("updated")[0].embedding == ()
    assert not [op for op, _ in h.vector.calls if op == "list_generations"]


async def test_without_the_vector_service_a_vector_cannot_be_checked(client: Any) -> None:
    h = client.harness
    h.vector.fail = Unavailable("vector down")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Store(
            gateway_pb2.StoreRequest(memory=_input("tea", VECTOR)), metadata=client.auth()
        )
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    assert h.log.events == []


class _Generations:
    """The vector port's generation listing alone, counting its calls."""

    def __init__(self, *listed: Generation) -> None:
        self.listed = list(listed)
        self.calls = 0

    async def list_generations(self, timeout: float | None = None) -> list[Generation]:
        self.calls += 1
        return self.listed


def _generation(name: str, live: bool, dimension: int) -> Generation:
    return Generation(name, live, "model", 0, datetime.now(UTC), dimension)


async def test_the_size_is_the_live_generation_s_and_asked_again_once_stale() -> None:
    now = [0.0]
    vector = _Generations(_generation("v1", False, 8), _generation("v2", True, 3))
    size = LiveDimension(vector, ttl_s=30.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert await size.get() == await size.get() == 3
    assert vector.calls == 1
    vector.listed = [_generation("v3", True, 5)]  # a rebuild swapped another model in
    now[0] = 31.0
    assert await size.get() == 5
    assert vector.calls == 2


async def test_no_live_generation_with_a_size_is_unavailable() -> None:
    size = LiveDimension(_Generations(_generation("v1", True, 0)))  # type: ignore[arg-type]
    with pytest.raises(Unavailable):
        await size.get()
