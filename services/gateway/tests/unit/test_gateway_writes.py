"""The write path through gRPC with a fake log: events, ids, sequences, idempotency."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.field_mask_pb2 import FieldMask

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_core.errors import Unavailable

UUID = "0190f3a4-7b1c-7d2e-8f00-123456789abc"
OTHER = "0190f3a4-7b1c-7d2e-8f00-0000000000ff"


def store(content: str, key: str = "", **kw: Any) -> gateway_pb2.StoreRequest:
    return gateway_pb2.StoreRequest(
        memory=common_pb2.MemoryInput(content=content, **kw), idempotency_key=key
    )


async def test_store_publishes_one_event_and_replies_with_its_sequence(client: Any) -> None:
    h = client.harness
    reply = await client.stub.Store(
        store("Sarah prefers tea", tags=["Person/Sarah"], importance=0.8), metadata=client.auth()
    )
    assert uuid.UUID(reply.id).version == 7
    [event] = h.log.events
    assert event.event == "stored"
    assert reply.sequence == event.sequence == 1
    m = event.payload[0]
    assert (m.id, m.tenant, m.type) == (reply.id, h.tenant, "Memory")
    assert m.content == "Sarah prefers tea"
    assert m.tags == ("person:sarah",)
    assert m.tag_prefixes == ("person", "person:sarah")
    assert (m.importance, m.confidence) == (0.8, 0.9)
    assert event.env.tenant == h.tenant
    assert event.env.event_id != reply.id
    assert abs((event.env.occurred_at - datetime.now(UTC)).total_seconds()) < 5


async def test_client_given_id_is_kept(client: Any) -> None:
    reply = await client.stub.Store(store("x", id=UUID.upper()), metadata=client.auth())
    assert reply.id == UUID


async def test_idempotency_key_gives_the_same_id_and_sequence_once(client: Any) -> None:
    h = client.harness
    first = await client.stub.Store(store("once", "k-1"), metadata=client.auth())
    again = await client.stub.Store(store("once", "k-1"), metadata=client.auth())
    assert (again.id, again.sequence) == (first.id, first.sequence)
    assert len(h.log.of("stored")) == 1
    other = await client.stub.Store(store("once", "k-2"), metadata=client.auth())
    assert other.id != first.id
    assert other.sequence == 2


async def test_idempotency_survives_a_lost_cache(client: Any) -> None:
    """The cache forgets key→id; the same event id makes the log drop the republish, and the
    gateway answers with the id the log holds."""
    h = client.harness
    first = await client.stub.Store(store("once", "k-lost"), metadata=client.auth())
    await h.cache.delete_prefix("")
    again = await client.stub.Store(store("once", "k-lost"), metadata=client.auth())
    assert (again.id, again.sequence) == (first.id, first.sequence)
    assert len(h.log.of("stored")) == 1


async def test_idempotency_keys_are_per_tenant(client: Any) -> None:
    a = await client.stub.Store(store("x", "shared"), metadata=client.auth("rw-token"))
    b = await client.stub.Store(store("x", "shared"), metadata=client.auth("other"))
    assert a.id != b.id
    assert len(client.harness.log.of("stored")) == 2


async def test_concurrent_retries_write_once(client: Any) -> None:
    h = client.harness
    h.log.publish_delay = 0.05
    replies = await asyncio.gather(
        *(client.stub.Store(store("race", "k-race"), metadata=client.auth()) for _ in range(5))
    )
    assert len({(r.id, r.sequence) for r in replies}) == 1
    assert len(h.log.of("stored")) == 1


async def test_batch_is_pipelined_and_replies_with_the_highest_sequence(client: Any) -> None:
    h = client.harness
    h.log.publish_delay = 0.02
    memories = [common_pb2.MemoryInput(content=f"memory {i}") for i in range(50)]
    reply = await client.stub.StoreBatch(
        gateway_pb2.StoreBatchRequest(memories=memories), metadata=client.auth()
    )
    assert len(reply.ids) == len(set(reply.ids)) == 50
    assert reply.sequence == 50
    assert h.log.max_in_flight > 1
    stored = {p.payload[0].id: p.payload[0].content for p in h.log.of("stored")}
    assert [stored[i] for i in reply.ids] == [f"memory {i}" for i in range(50)]


async def test_stream_stores_every_message(client: Any) -> None:
    async def requests() -> AsyncIterator[gateway_pb2.StoreRequest]:
        for i in range(3):
            yield store(f"streamed {i}", key=f"s-{i}")

    reply = await client.stub.StoreStream(requests(), metadata=client.auth())
    assert len(reply.ids) == 3
    assert reply.sequence == 3
    again = await client.stub.StoreStream(requests(), metadata=client.auth())
    assert list(again.ids) == list(reply.ids)
    assert len(client.harness.log.of("stored")) == 3


async def test_log_down_is_unavailable(client: Any) -> None:
    client.harness.log.fail = Unavailable("log publish failed")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Store(store("x"), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_update_merges_the_masked_fields(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "old text", tags=("a",), importance=0.3, access_count=4))
    reply = await client.stub.Update(
        gateway_pb2.UpdateRequest(
            id=UUID,
            memory=common_pb2.MemoryInput(content="ignored", tags=["b"], importance=0.9),
            update_mask=FieldMask(paths=["tags", "importance"]),
        ),
        metadata=client.auth(),
    )
    [event] = h.log.of("updated")
    assert (reply.id, reply.sequence) == (UUID, event.sequence)
    m, mask = event.payload
    assert mask == ("tags", "importance")
    assert (m.content, m.tags, m.importance, m.access_count) == ("old text", ("b",), 0.9, 4)
    assert m.updated_at > m.timestamp


async def test_update_without_mask_takes_the_fields_set(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "old", importance=0.3))
    meta = struct_pb2.Struct()
    meta.update({"source": "chat"})
    await client.stub.Update(
        gateway_pb2.UpdateRequest(id=UUID, memory=common_pb2.MemoryInput(metadata=meta)),
        metadata=client.auth(),
    )
    m, mask = h.log.of("updated")[0].payload
    assert mask == ("metadata",)
    assert (m.content, m.importance, dict(m.metadata)) == ("old", 0.3, {"source": "chat"})


async def test_delete_publishes_the_id(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "bye"))
    reply = await client.stub.Delete(gateway_pb2.DeleteRequest(id=UUID), metadata=client.auth())
    [event] = h.log.of("deleted")
    assert (reply.id, reply.sequence, event.payload) == (UUID, event.sequence, UUID)


async def test_associate_publishes_a_user_relation(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "a"), h.memory(OTHER, "b"))
    reply = await client.stub.Associate(
        gateway_pb2.AssociateRequest(source_id=UUID, target_id=OTHER, type="leads_to"),
        metadata=client.auth(),
    )
    [event] = h.log.of("relation")
    r = event.payload
    assert reply.sequence == event.sequence
    assert (r.source_id, r.target_id, r.type, r.strength, r.origin) == (
        UUID,
        OTHER,
        "LEADS_TO",
        0.5,
        "user",
    )


async def test_get_falls_back_to_lexical_for_a_memory_vector_has_not_applied(
    client: Any,
) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "in lexical already"))
    h.vector.behind.add(UUID)  # say vector was down while ingest wrote the memory
    got = await client.stub.Get(gateway_pb2.GetRequest(id=UUID), metadata=client.auth())
    assert got.memory.content == "in lexical already"
    # Associate's check reads the same way: the memory exists.
    h.world.put(h.memory(OTHER, "other"))
    await client.stub.Associate(
        gateway_pb2.AssociateRequest(source_id=UUID, target_id=OTHER, type="LEADS_TO"),
        metadata=client.auth(),
    )
    h.lexical.behind.add(UUID)  # in neither store: NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Get(gateway_pb2.GetRequest(id=UUID), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND


async def test_reads_fall_back_to_lexical_when_vector_is_down(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "still here"))
    h.vector.fail = Unavailable("vector down")
    got = await client.stub.Get(gateway_pb2.GetRequest(id=UUID), metadata=client.auth())
    assert got.memory.content == "still here"
    await client.stub.Delete(gateway_pb2.DeleteRequest(id=UUID), metadata=client.auth())
    assert len(h.log.of("deleted")) == 1
    h.lexical.fail = Unavailable("lexical down")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Get(gateway_pb2.GetRequest(id=UUID), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
