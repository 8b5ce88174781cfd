"""Get and Related with min_sequence: they wait, as Recall does, until the write is applied,
so what was just stored is found."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2

A = "0190f3a4-7b1c-7d2e-8f00-00000000000a"
B = "0190f3a4-7b1c-7d2e-8f00-00000000000b"


def lagging(h: Any) -> None:
    """Ingest behind: events reach the log but neither the stores nor the watermark."""
    h.log.apply, h.log.auto_watermark = False, False


def ingest(h: Any) -> None:
    """Ingest catches up: every event is applied and the watermark moves to the end."""
    for p in h.log.events:
        if p.event == "stored":
            h.world.put(replace(p.payload[0], version=p.sequence))
        elif p.event == "relation":
            h.world.relations.append((p.env.tenant, p.payload))
    h.log.applied = h.log.last


async def store(client: Any, content: str, token: str = "rw-token") -> Any:
    request = gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content=content))
    return await client.stub.Store(request, metadata=client.auth(token))


async def test_get_with_min_sequence_waits_for_the_write(client: Any) -> None:
    h = client.harness
    lagging(h)
    reply = await store(client, "fresh tea memory")
    with pytest.raises(grpc.aio.AioRpcError) as exc:  # what a read without it sees
        await client.stub.Get(gateway_pb2.GetRequest(id=reply.id), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    pending = asyncio.ensure_future(
        client.stub.Get(
            gateway_pb2.GetRequest(id=reply.id, min_sequence=reply.sequence),
            metadata=client.auth(),
            timeout=5,
        )
    )
    await asyncio.sleep(0.2)
    assert not pending.done()
    ingest(h)
    assert (await pending).memory.id == reply.id


async def test_get_min_sequence_not_reached_is_deadline_exceeded(client: Any) -> None:
    lagging(client.harness)
    reply = await store(client, "x")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Get(
            gateway_pb2.GetRequest(id=reply.id, min_sequence=reply.sequence),
            metadata=client.auth(),
            timeout=0.5,
        )
    assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert f"min_sequence {reply.sequence}" in (exc.value.details() or "")
    assert [op for op, _ in client.harness.vector.calls] == []


async def test_get_min_sequence_past_the_tenants_writes_is_refused(client: Any) -> None:
    mine = await store(client, "acme's note")
    await store(client, "globex's note", "other")  # moves the log's end, not acme's bound
    request = gateway_pb2.GetRequest(id=mine.id, min_sequence=mine.sequence + 1)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Get(request, metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == "min_sequence"


async def test_related_with_min_sequence_waits_for_the_relation(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(A, "Sarah prefers green tea"), h.memory(B, "Sarah's tea order"))
    lagging(h)
    reply = await client.stub.Associate(
        gateway_pb2.AssociateRequest(source_id=A, target_id=B, type="RELATES_TO"),
        metadata=client.auth(),
    )
    before = await client.stub.Related(gateway_pb2.RelatedRequest(id=A), metadata=client.auth())
    assert list(before.related) == []  # what a read without it sees
    pending = asyncio.ensure_future(
        client.stub.Related(
            gateway_pb2.RelatedRequest(id=A, min_sequence=reply.sequence),
            metadata=client.auth(),
            timeout=5,
        )
    )
    await asyncio.sleep(0.2)
    assert not pending.done()
    ingest(h)
    assert [r.memory.id for r in (await pending).related] == [B]


async def test_related_min_sequence_past_the_tenants_writes_is_refused(client: Any) -> None:
    client.harness.world.put(client.harness.memory(A, "a note"))
    mine = await store(client, "acme's note")
    request = gateway_pb2.RelatedRequest(id=A, min_sequence=mine.sequence + 1)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Related(request, metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == "min_sequence"
