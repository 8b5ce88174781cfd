"""Retry-safe writes: per-item results of a batch, keys per item or derived from a batch key,
and publishes bounded by the caller's deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_core.errors import DeadlineExceeded, Unavailable
from engram_core.validation import MemoryInput
from engram_gateway.service import Deadline, StoreItem

UUID = "0190f3a4-7b1c-7d2e-8f00-123456789abc"
OTHER = "0190f3a4-7b1c-7d2e-8f00-0000000000ff"


def batch(n: int, key: str = "", keys: tuple[str, ...] = ()) -> gateway_pb2.StoreBatchRequest:
    return gateway_pb2.StoreBatchRequest(
        memories=[common_pb2.MemoryInput(content=f"memory {i}") for i in range(n)],
        idempotency_key=key,
        idempotency_keys=list(keys),
    )


def content_is(text: str) -> Callable[[str, Any], bool]:
    return lambda event, payload: event == "stored" and payload[0].content == text


def refuse(text: str) -> Callable[[str, Any], Exception | None]:
    hit = content_is(text)
    return lambda event, payload: Unavailable("log down") if hit(event, payload) else None


def stored_ids(h: Any) -> dict[str, str]:
    """content → id of every MemoryStored event in the log."""
    return {p.payload[0].content: p.payload[0].id for p in h.log.of("stored")}


async def test_a_failed_item_does_not_fail_the_items_stored_beside_it(client: Any) -> None:
    h = client.harness
    h.log.refuse = refuse("memory 3")
    reply = await client.stub.StoreBatch(batch(6, key="b-1"), metadata=client.auth())
    assert reply.failed == 1
    failed = reply.results[3]
    assert (failed.id, failed.sequence, failed.code) == ("", 0, "UNAVAILABLE")
    assert "log down" in failed.message
    ids = stored_ids(h)
    assert len(ids) == 5
    for i in (0, 1, 2, 4, 5):
        r = reply.results[i]
        assert (r.id, r.code, r.duplicate) == (ids[f"memory {i}"], "", False)
        assert reply.ids[i] == r.id
    assert reply.ids[3] == ""
    assert reply.sequence == max(r.sequence for r in reply.results) == 5


async def test_a_retry_with_the_batch_key_publishes_only_the_failed_item(client: Any) -> None:
    h = client.harness
    h.log.refuse = refuse("memory 3")
    first = await client.stub.StoreBatch(batch(6, key="b-1"), metadata=client.auth())
    h.log.refuse = None
    again = await client.stub.StoreBatch(batch(6, key="b-1"), metadata=client.auth())
    assert again.failed == 0
    assert len(h.log.of("stored")) == 6
    for i in (0, 1, 2, 4, 5):
        was, now = first.results[i], again.results[i]
        assert (now.id, now.sequence, now.duplicate) == (was.id, was.sequence, True)
    third = again.results[3]
    assert (third.id, third.sequence, third.duplicate) == (stored_ids(h)["memory 3"], 6, False)


async def test_an_item_whose_ack_was_lost_is_stored_once(client: Any) -> None:
    """The log kept item 2 but its ack never came: reported failed, and the retry finds it in
    the log (same event id) instead of storing it again."""
    h = client.harness
    h.log.lose_ack = content_is("memory 2")
    first = await client.stub.StoreBatch(batch(4, key="b-2"), metadata=client.auth())
    assert first.results[2].code == "UNAVAILABLE"
    assert len(h.log.of("stored")) == 4
    h.log.lose_ack = None
    await h.cache.delete_prefix("")  # even with the key→id entries lost
    again = await client.stub.StoreBatch(batch(4, key="b-2"), metadata=client.auth())
    assert len(h.log.of("stored")) == 4
    assert [r.duplicate for r in again.results] == [True] * 4
    assert again.results[2].id == stored_ids(h)["memory 2"]
    assert [again.results[i].id for i in (0, 1, 3)] == [first.results[i].id for i in (0, 1, 3)]


async def test_a_batch_without_keys_is_not_deduplicated(client: Any) -> None:
    await client.stub.StoreBatch(batch(2), metadata=client.auth())
    again = await client.stub.StoreBatch(batch(2), metadata=client.auth())
    assert not any(r.duplicate for r in again.results)
    assert len(client.harness.log.of("stored")) == 4


async def test_item_keys_win_and_the_others_derive_from_the_batch_key(client: Any) -> None:
    request = batch(3, key="b-3", keys=("own", "", ""))
    reply = await client.stub.StoreBatch(request, metadata=client.auth())
    # A Store with an item's key is that item: "own" for item 0, "b-3:<i>" for the others.
    for key, i in (("own", 0), ("b-3:1", 1), ("b-3:2", 2)):
        one = await client.stub.Store(
            gateway_pb2.StoreRequest(
                memory=common_pb2.MemoryInput(content="x"), idempotency_key=key
            ),
            metadata=client.auth(),
        )
        assert (one.id, one.sequence, one.duplicate) == (
            reply.results[i].id,
            reply.results[i].sequence,
            True,
        )
    assert len(client.harness.log.of("stored")) == 3


async def test_per_item_keys_alone(client: Any) -> None:
    h = client.harness
    h.log.refuse = refuse("memory 0")
    request = batch(2, keys=("k-a", "k-b"))
    first = await client.stub.StoreBatch(request, metadata=client.auth())
    assert [r.code for r in first.results] == ["UNAVAILABLE", ""]
    h.log.refuse = None
    again = await client.stub.StoreBatch(request, metadata=client.auth())
    assert [r.duplicate for r in again.results] == [False, True]
    assert again.results[1].id == first.results[1].id
    assert len(h.log.of("stored")) == 2


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (batch(3, keys=("a", "b")), "idempotency_keys"),
        (batch(11, key="k" * 254), "idempotency_key"),  # "<key>:10" would be 257 characters
        (batch(2, keys=("a", "k" * 257)), "idempotency_keys[1]"),
    ],
)
async def test_bad_keys_are_refused_before_anything_is_published(
    client: Any, request_: gateway_pb2.StoreBatchRequest, field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.StoreBatch(request_, metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == field
    assert client.harness.log.events == []


async def test_a_batch_key_that_fits_with_every_index_is_taken(client: Any) -> None:
    reply = await client.stub.StoreBatch(batch(11, key="k" * 253), metadata=client.auth())
    assert reply.failed == 0


async def test_a_batch_nothing_of_which_was_stored_fails(client: Any) -> None:
    client.harness.log.fail = Unavailable("log down")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.StoreBatch(batch(3, key="b-4"), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_stream_reports_each_message_and_a_retry_stores_the_failed_one(
    client: Any,
) -> None:
    h = client.harness

    async def requests() -> AsyncIterator[gateway_pb2.StoreRequest]:
        for i in range(4):
            yield gateway_pb2.StoreRequest(
                memory=common_pb2.MemoryInput(content=f"memory {i}"), idempotency_key=f"s-{i}"
            )

    h.log.refuse = refuse("memory 1")
    first = await client.stub.StoreStream(requests(), metadata=client.auth())
    assert first.failed == 1
    assert [r.code for r in first.results] == ["", "UNAVAILABLE", "", ""]
    h.log.refuse = None
    again = await client.stub.StoreStream(requests(), metadata=client.auth())
    assert [r.duplicate for r in again.results] == [True, False, True, True]
    assert again.results[1].id == stored_ids(h)["memory 1"]
    assert len(h.log.of("stored")) == 4


async def test_store_marks_a_retry_as_duplicate(client: Any) -> None:
    request = gateway_pb2.StoreRequest(
        memory=common_pb2.MemoryInput(content="once"), idempotency_key="k-dup"
    )
    first = await client.stub.Store(request, metadata=client.auth())
    again = await client.stub.Store(request, metadata=client.auth())
    assert (first.duplicate, again.duplicate) == (False, True)
    assert (again.id, again.sequence) == (first.id, first.sequence)


# --- publishes within the caller's deadline ---------------------------------------------


async def test_writes_publish_within_the_callers_deadline(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "a"), h.memory(OTHER, "b"))
    mem = common_pb2.MemoryInput(content="x")
    auth = {"metadata": client.auth(), "timeout": 1}
    await client.stub.Store(gateway_pb2.StoreRequest(memory=mem), **auth)
    await client.stub.StoreBatch(batch(2), **auth)
    await client.stub.Update(gateway_pb2.UpdateRequest(id=UUID, memory=mem), **auth)
    await client.stub.Associate(
        gateway_pb2.AssociateRequest(source_id=UUID, target_id=OTHER, type="leads_to"), **auth
    )
    await client.stub.Delete(gateway_pb2.DeleteRequest(id=UUID), **auth)
    assert len(h.log.timeouts) == 6
    assert all(t is not None and 0 < t <= 1.0 for t in h.log.timeouts)


async def test_without_a_deadline_a_publish_waits_the_publish_timeout(client: Any) -> None:
    h = client.harness
    await client.stub.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="x")),
        metadata=client.auth(),
    )
    # The call's default deadline (10 s) is longer than the cap.
    assert h.log.timeouts == [h.settings.publish_timeout_s]


async def test_an_item_left_without_time_is_not_published(harness: Any) -> None:
    with pytest.raises(DeadlineExceeded):
        await harness.gateway.writer.store(
            harness.tenant, [StoreItem(MemoryInput(content="late"))], Deadline.within(-1.0)
        )
    assert harness.log.events == []
