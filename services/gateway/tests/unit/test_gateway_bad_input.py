"""Issue 2 §9 over gRPC: each bad input is INVALID_ARGUMENT (or NOT_FOUND) naming the field,
and nothing is published."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.field_mask_pb2 import FieldMask

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_gateway import server
from engram_gateway.auth import Authenticator

UUID = "0190f3a4-7b1c-7d2e-8f00-123456789abc"
OTHER = "0190f3a4-7b1c-7d2e-8f00-0000000000ff"


def mem(**kw: Any) -> common_pb2.MemoryInput:
    return common_pb2.MemoryInput(**{"content": "valid content", **kw})


def ts(seconds: int, nanos: int = 0) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


def big_struct(size: int) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update({"blob": "x" * size})
    return s


BAD_MEMORIES: list[tuple[common_pb2.MemoryInput, str]] = [
    (common_pb2.MemoryInput(content=""), "content"),
    (common_pb2.MemoryInput(content=" \t"), "content"),
    (mem(content="x" * (16 * 1024 + 1)), "content"),
    (mem(importance=1.01), "importance"),
    (mem(importance=-0.5), "importance"),
    (mem(importance=math.nan), "importance"),
    (mem(confidence=2.0), "confidence"),
    (mem(timestamp=ts(253_402_300_800)), "timestamp"),
    (mem(t_valid=ts(-62_135_596_801)), "t_valid"),
    (mem(t_invalid=ts(0, 1_000_000_000)), "t_invalid"),
    (mem(t_valid=ts(200), t_invalid=ts(100)), "t_valid"),
    (mem(tags=[f"t{i}" for i in range(65)]), "tags"),
    (mem(tags=["ok", "x" * 129]), "tags[1]"),
    (mem(tags=["ok", "fine", "has space"]), "tags[2]"),
    (mem(id="not-a-uuid"), "id"),
    (mem(type="no spaces allowed"), "type"),
    (mem(metadata=big_struct(16 * 1024)), "metadata"),
]


@pytest.mark.parametrize(("memory", "field"), BAD_MEMORIES)
async def test_store_names_the_field(client: Any, memory: Any, field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Store(gateway_pb2.StoreRequest(memory=memory), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == f"memory.{field}"
    assert field in (exc.value.details() or "")
    assert client.harness.log.events == []


@pytest.mark.parametrize(("memory", "field"), BAD_MEMORIES[:6])
async def test_a_rejected_batch_publishes_nothing(client: Any, memory: Any, field: str) -> None:
    batch = [mem(content=f"good {i}") for i in range(5)]
    batch.insert(3, memory)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.StoreBatch(
            gateway_pb2.StoreBatchRequest(memories=batch), metadata=client.auth()
        )
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == f"memories[3].{field}"
    assert client.harness.log.events == []
    assert client.harness.world.memories == {}


async def test_batch_size_limits(client: Any) -> None:
    for memories in ([], [mem() for _ in range(1001)]):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await client.stub.StoreBatch(
                gateway_pb2.StoreBatchRequest(memories=memories), metadata=client.auth()
            )
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert client.field_of(exc.value) == "memories"
    assert client.harness.log.events == []


async def test_a_rejected_stream_publishes_nothing(client: Any) -> None:
    async def requests() -> AsyncIterator[gateway_pb2.StoreRequest]:
        yield gateway_pb2.StoreRequest(memory=mem())
        yield gateway_pb2.StoreRequest(memory=mem(), idempotency_key="k" * 300)
        yield gateway_pb2.StoreRequest(memory=mem())

    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.StoreStream(requests(), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == "requests[1].idempotency_key"
    assert client.harness.log.events == []


def _focus(**kw: Any) -> common_pb2.Focus:
    return common_pb2.Focus(**kw)


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (gateway_pb2.RecallRequest(query="", sort="popular"), "sort"),
        (gateway_pb2.RecallRequest(query="q", sort="recency"), "sort"),
        (gateway_pb2.RecallRequest(query="q", queries=["a"] * 9), "queries"),
        (gateway_pb2.RecallRequest(query="q", queries=["a", " "]), "queries[1]"),
        (gateway_pb2.RecallRequest(query="q", per_query_limit=201), "per_query_limit"),
        (gateway_pb2.RecallRequest(query="q", per_query_limit=-1), "per_query_limit"),
        (gateway_pb2.RecallRequest(query="q", limit=101), "limit"),
        (gateway_pb2.RecallRequest(query="q", limit=-1), "limit"),
        (gateway_pb2.RecallRequest(query="q", tags=["a b"]), "tags[0]"),
        (gateway_pb2.RecallRequest(query="q", exclude_tags=["ok", "x" * 200]), "exclude_tags[1]"),
        (gateway_pb2.RecallRequest(query="q", types=["Decision", "not ok"]), "types[1]"),
        (gateway_pb2.RecallRequest(query="q", start="last tuesday"), "start"),
        (gateway_pb2.RecallRequest(query="q", end="2025-02-30"), "end"),
        (gateway_pb2.RecallRequest(query="q", start="2025-03-01", end="2025-02-01"), "start"),
        (gateway_pb2.RecallRequest(query="q", fusion=7), "fusion"),  # type: ignore[arg-type]
        (gateway_pb2.RecallRequest(query="q", mode=9), "mode"),  # type: ignore[arg-type]
        (gateway_pb2.RecallRequest(query="q", min_sequence=10**9), "min_sequence"),
        (gateway_pb2.RecallRequest(query="q", recency_bias=8), "recency_bias"),  # type: ignore[arg-type]
        (gateway_pb2.RecallRequest(query="q", profile="chat"), "profile"),
        (gateway_pb2.RecallRequest(query="q", focus=_focus(ids=["nope"])), "focus.ids[0]"),
        (gateway_pb2.RecallRequest(query="q", focus=_focus(ids=["a"] * 101)), "focus.ids"),
        (gateway_pb2.RecallRequest(query="q", focus=_focus(tags=["ok", "a b"])), "focus.tags[1]"),
        (gateway_pb2.RecallRequest(query="q", focus=_focus(types=["Not ok"])), "focus.types[0]"),
        (gateway_pb2.RecallRequest(query="q", focus=_focus(keywords=[" "])), "focus.keywords[0]"),
        (
            gateway_pb2.RecallRequest(query="q", focus=_focus(keywords=["k" * 65])),
            "focus.keywords[0]",
        ),
    ],
)
async def test_recall_names_the_field(client: Any, request_: Any, field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Recall(request_, metadata=client.auth(), timeout=5)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == field
    assert client.harness.vector.calls == []


@pytest.mark.parametrize("profile", ["default", "conversation", ""])
async def test_recall_takes_a_known_profile(client: Any, profile: str) -> None:
    request_ = gateway_pb2.RecallRequest(query="q", profile=profile)
    reply = await client.stub.Recall(request_, metadata=client.auth(), timeout=5)
    assert "vector" in reply.streams


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (gateway_pb2.AssociateRequest(source_id=UUID, target_id=OTHER, type="LIKES"), "type"),
        (gateway_pb2.AssociateRequest(source_id=UUID, target_id=OTHER, type="MENTIONS"), "type"),
        (
            gateway_pb2.AssociateRequest(
                source_id=UUID, target_id=OTHER, type="RELATES_TO", strength=1.5
            ),
            "strength",
        ),
        (
            gateway_pb2.AssociateRequest(
                source_id=UUID, target_id=OTHER, type="RELATES_TO", strength=-0.1
            ),
            "strength",
        ),
        (gateway_pb2.AssociateRequest(source_id="x", target_id=OTHER, type="PART_OF"), "source_id"),
        (gateway_pb2.AssociateRequest(source_id=UUID, target_id=UUID, type="PART_OF"), "target_id"),
    ],
)
async def test_associate_names_the_field(client: Any, request_: Any, field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Associate(request_, metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == field
    assert client.harness.log.events == []


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (gateway_pb2.RelatedRequest(id=UUID, depth=4), "depth"),
        (gateway_pb2.RelatedRequest(id=UUID, types=["NOPE"]), "types[0]"),
        (gateway_pb2.RelatedRequest(id=UUID, limit=1000), "limit"),
        (gateway_pb2.RelatedRequest(id="42"), "id"),
    ],
)
async def test_related_names_the_field(client: Any, request_: Any, field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Related(request_, metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == field


async def test_update_mask_and_values_are_checked_before_anything(client: Any) -> None:
    cases = [
        (gateway_pb2.UpdateRequest(id=UUID, memory=mem()), None),  # valid, but absent
        (
            gateway_pb2.UpdateRequest(
                id=UUID, memory=mem(), update_mask=FieldMask(paths=["content", "tenant"])
            ),
            "update_mask.paths[1]",
        ),
        (gateway_pb2.UpdateRequest(id=UUID, memory=mem(importance=3.0)), "memory.importance"),
        (gateway_pb2.UpdateRequest(id=UUID), "update_mask"),
        (gateway_pb2.UpdateRequest(id="nope", memory=mem()), "id"),
    ]
    for request_, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await client.stub.Update(request_, metadata=client.auth())
        if field is None:
            assert exc.value.code() == grpc.StatusCode.NOT_FOUND
        else:
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert client.field_of(exc.value) == field
    assert client.harness.log.events == []


async def test_unknown_ids_are_not_found(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "exists"))
    for call in (
        client.stub.Get(gateway_pb2.GetRequest(id=OTHER), metadata=client.auth()),
        client.stub.Delete(gateway_pb2.DeleteRequest(id=OTHER), metadata=client.auth()),
        client.stub.Related(gateway_pb2.RelatedRequest(id=OTHER), metadata=client.auth()),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call
        assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Associate(
            gateway_pb2.AssociateRequest(source_id=UUID, target_id=OTHER, type="RELATES_TO"),
            metadata=client.auth(),
        )
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    assert "target_id" in (exc.value.details() or "")
    assert h.log.events == []
    assert (h.tenant, UUID) in h.world.memories


async def test_oversized_messages_are_refused(new_harness: Any) -> None:
    # A separate server with a small message limit: the transport refuses, nothing is read.
    h = new_harness(max_message_bytes=64 * 1024)
    running = await server.start(
        h.settings, h.gateway, Authenticator.from_sources(h.settings.tokens.get_secret_value())
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = gateway_pb2_grpc.MemoryServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await stub.StoreBatch(
                    gateway_pb2.StoreBatchRequest(memories=[mem(content="x" * 10_000)] * 10),
                    metadata=(("authorization", "Bearer rw-token"),),
                )
            assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        await running.stop(None)
    assert h.log.events == []


async def test_an_empty_stream_is_refused(client: Any) -> None:
    async def nothing() -> AsyncIterator[gateway_pb2.StoreRequest]:
        for _ in ():
            yield gateway_pb2.StoreRequest()

    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.StoreStream(nothing(), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == "requests"
