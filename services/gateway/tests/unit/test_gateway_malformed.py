"""Malformed input over gRPC is INVALID_ARGUMENT naming the field, never INTERNAL or UNKNOWN:
numbers JSON has no word for, times outside the years 1..9999 once in UTC, time zone names
that are no zone, and bytes that do not decode as the request (invalid UTF-8, nesting past
protobuf's limit, truncated fields)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from google.protobuf import struct_pb2

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_gateway import server
from engram_gateway.auth import Authenticator
from engram_platform.errors import FIELD_KEY

if TYPE_CHECKING:
    from conftest import Harness

UUID = "0190f3a4-7b1c-7d2e-8f00-123456789abc"
OTHER = "0190f3a4-7b1c-7d2e-8f00-0000000000ff"
BAD_UTF8 = b"\xff\xfe\xc0\x80"
MARK = "MARKMARK"  # a placeholder of the same length, replaced in the encoded bytes


@dataclass
class Client:
    """The gateway's stub, and its channel for calls with raw bytes."""

    stub: gateway_pb2_grpc.MemoryServiceStub
    channel: grpc.aio.Channel
    harness: Harness

    @staticmethod
    def auth() -> tuple[tuple[str, str], ...]:
        return (("authorization", "Bearer rw-token"),)

    @staticmethod
    def field_of(err: grpc.aio.AioRpcError) -> str:
        return next((str(v) for k, v in err.trailing_metadata() or () if k == FIELD_KEY), "")


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[Client]:
    auth = Authenticator.from_sources(harness.settings.tokens.get_secret_value())
    running = await server.start(harness.settings, harness.gateway, auth)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield Client(gateway_pb2_grpc.MemoryServiceStub(channel), channel, harness)
    finally:
        await channel.close()
        await harness.gateway.access.drain()
        await running.stop(None)


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def mem(**kw: Any) -> common_pb2.MemoryInput:
    return common_pb2.MemoryInput(**{"content": "valid content", **kw})


async def refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await call
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.value.details()
    return exc.value


NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("number", NON_FINITE)
async def test_a_non_finite_number_in_metadata_is_named_by_its_path(
    client: Any, number: float
) -> None:
    cases = [
        ({"a": {"b": number}}, "memory.metadata.a.b"),
        ({"ok": 1, "list": ["x", number]}, "memory.metadata.list[1]"),
    ]
    for metadata, field in cases:
        request = gateway_pb2.StoreRequest(memory=mem(metadata=struct(metadata)))
        err = await refused(client.stub.Store(request, metadata=client.auth()))
        assert client.field_of(err) == field
        assert "finite" in (err.details() or "")
    batch = [mem(), mem(), mem(metadata=struct({"x": number}))]
    err = await refused(
        client.stub.StoreBatch(
            gateway_pb2.StoreBatchRequest(memories=batch), metadata=client.auth()
        )
    )
    assert client.field_of(err) == "memories[2].metadata.x"
    assert client.harness.log.events == []


async def test_a_non_finite_number_in_an_update_or_relation_is_named(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "one"), h.memory(OTHER, "two"))
    for number in NON_FINITE:
        update = gateway_pb2.UpdateRequest(id=UUID, memory=mem(metadata=struct({"x": number})))
        err = await refused(client.stub.Update(update, metadata=client.auth()))
        assert client.field_of(err) == "memory.metadata.x"
        associate = gateway_pb2.AssociateRequest(
            source_id=UUID,
            target_id=OTHER,
            type="RELATES_TO",
            properties=struct({"w": {"deep": [number]}}),
        )
        err = await refused(client.stub.Associate(associate, metadata=client.auth()))
        assert client.field_of(err) == "properties.w.deep[0]"
    assert h.log.events == []


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (gateway_pb2.RecallRequest(query="q", start="0001-01-01T00:00:00+05:00"), "start"),
        (gateway_pb2.RecallRequest(query="q", end="9999-12-31T23:59:59-05:00"), "end"),
        (gateway_pb2.RecallRequest(query="q", start="0001-01-01T04:59:59+05:00"), "start"),
        (gateway_pb2.RecallRequest(query="q", time_query="today", timezone="America"), "timezone"),
        (gateway_pb2.RecallRequest(query="q", time_query="today", timezone="Etc"), "timezone"),
        (gateway_pb2.RecallRequest(query="q", time_query="today", timezone="Europe"), "timezone"),
        (gateway_pb2.RecallRequest(query="q", time_query="today", timezone="A" * 256), "timezone"),
        (gateway_pb2.RecallRequest(query="q", time_query="today", timezone="Eurépe/X"), "timezone"),
        (gateway_pb2.RecallRequest(query="q", time_query="today", timezone="/etc"), "timezone"),
        (gateway_pb2.RecallRequest(query="q", time_query="today", timezone="a//b"), "timezone"),
        (gateway_pb2.RecallRequest(query="q", timezone="America"), "timezone"),
    ],
)
async def test_times_and_zones_out_of_range_are_named(
    client: Any, request_: Any, field: str
) -> None:
    err = await refused(client.stub.Recall(request_, metadata=client.auth(), timeout=5))
    assert client.field_of(err) == field
    assert client.harness.vector.calls == []


async def test_a_valid_zone_and_the_extreme_valid_times_still_answer(client: Any) -> None:
    ok = gateway_pb2.RecallRequest(
        query="q",
        start="0001-01-01T05:00:00+05:00",
        end="9999-12-31T23:59:59+05:00",
        time_query="today",
        timezone="America/New_York",
    )
    await client.stub.Recall(ok, metadata=client.auth(), timeout=5)


# --- bytes that are not the request ---------------------------------------------------------


def raw_call(client: Any, method: str) -> Any:
    return client.channel.unary_unary(
        f"/engram.gateway.v1.MemoryService/{method}",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )


def with_bad_utf8(message: Any) -> bytes:
    raw: bytes = message.SerializeToString()
    assert raw.count(MARK.encode()) == 1
    return raw.replace(MARK.encode(), BAD_UTF8 * 2)


def delimited(number: int, payload: bytes) -> bytes:
    """One length-delimited field as encoded."""
    size = bytearray()
    n = len(payload)
    while n > 0x7F:
        size.append(n & 0x7F | 0x80)
        n >>= 7
    size.append(n)
    return bytes([number << 3 | 2]) + bytes(size) + payload


def nested_store(depth: int) -> bytes:
    """A StoreRequest whose metadata nests ``depth`` objects under key "a" (built by hand:
    the Python library refuses to build what it cannot parse back)."""
    struct_bytes = struct({"leaf": 1}).SerializeToString()
    for _ in range(depth - 1):
        value = delimited(5, struct_bytes)  # Value.struct_value
        struct_bytes = delimited(1, delimited(1, b"a") + delimited(2, value))  # Struct.fields entry
    memory = delimited(2, b"valid content") + delimited(7, struct_bytes)  # content, metadata
    return delimited(1, memory)


@pytest.mark.parametrize(
    ("method", "raw", "field"),
    [
        ("Recall", with_bad_utf8(gateway_pb2.RecallRequest(query=MARK)), "query"),
        (
            "Recall",
            with_bad_utf8(gateway_pb2.RecallRequest(query="q", tags=["a", MARK])),
            "tags[1]",
        ),
        (
            "Store",
            with_bad_utf8(gateway_pb2.StoreRequest(memory=mem(content=MARK))),
            "memory.content",
        ),
        (
            "StoreBatch",
            with_bad_utf8(gateway_pb2.StoreBatchRequest(memories=[mem(), mem(tags=["ok", MARK])])),
            "memories[1].tags[1]",
        ),
        (
            "Store",
            with_bad_utf8(gateway_pb2.StoreRequest(memory=mem(metadata=struct({"k": MARK})))),
            "memory.metadata.k",
        ),
        (
            "Associate",
            with_bad_utf8(
                gateway_pb2.AssociateRequest(
                    source_id=UUID, target_id=OTHER, type="RELATES_TO", properties=struct({MARK: 1})
                )
            ),
            "properties",
        ),
        ("Get", with_bad_utf8(gateway_pb2.GetRequest(id=MARK)), "id"),
        ("Get", b"\x0a\x05ab", "id"),  # a string that ends before its length
        ("Get", b"\x0a", "id"),  # a tag with no value
        ("Stats", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "request"),  # no tag at all
    ],
)
async def test_undecodable_bytes_are_invalid_argument_naming_the_field(
    client: Any, method: str, raw: bytes, field: str
) -> None:
    err = await refused(raw_call(client, method)(raw, metadata=client.auth(), timeout=5))
    assert client.field_of(err) == field
    assert client.harness.log.events == []


async def test_metadata_nested_past_protobufs_limit_is_invalid_argument(client: Any) -> None:
    assert gateway_pb2.StoreRequest.FromString(nested_store(20)).memory.metadata["a"]
    err = await refused(raw_call(client, "Store")(nested_store(40), metadata=client.auth()))
    field = client.field_of(err)
    assert field.startswith("memory.metadata.a.a.a.a.a")
    assert "nested" in (err.details() or "")
    assert client.harness.log.events == []


async def test_an_undecodable_message_in_a_stream_is_named_by_its_index(client: Any) -> None:
    call = client.channel.stream_unary(
        "/engram.gateway.v1.MemoryService/StoreStream",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )

    async def requests() -> AsyncIterator[bytes]:
        yield gateway_pb2.StoreRequest(memory=mem()).SerializeToString()
        yield with_bad_utf8(gateway_pb2.StoreRequest(memory=mem(), idempotency_key=MARK))

    err = await refused(call(requests(), metadata=client.auth()))
    assert client.field_of(err) == "requests[1].idempotency_key"
    assert client.harness.log.events == []


async def test_the_server_answers_after_undecodable_requests(client: Any) -> None:
    for _ in range(3):
        await refused(raw_call(client, "Store")(b"\x0a\x05ab", metadata=client.auth()))
    reply = await client.stub.Store(gateway_pb2.StoreRequest(memory=mem()), metadata=client.auth())
    assert reply.id
