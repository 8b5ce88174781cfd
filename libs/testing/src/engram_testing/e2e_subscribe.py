"""End to end through the public API: Subscribe, the change feed. One agent sees what
another stores, with its sequence; a subscriber that resumes from a sequence gets what came
after it, in order.

Mix `SubscribeEndToEnd` into a ``Test*`` class next to a conftest that provides ``stack``
(as for `GatewayEndToEnd`). Each test uses a tag of its own, so the tests share a tenant.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.e2e import AUTH, Stub, wait_for_watermark

Kind = gateway_pb2.SubscribeResponse.Kind


async def store(agent: Stub, content: str, tag: str) -> gateway_pb2.StoreResponse:
    memory = common_pb2.MemoryInput(content=content, tags=[tag])
    reply: gateway_pb2.StoreResponse = await agent.Store(
        gateway_pb2.StoreRequest(memory=memory), metadata=AUTH, timeout=30
    )
    return reply


async def next_event(call: Any) -> gateway_pb2.SubscribeResponse:
    event = await call.read()
    assert isinstance(event, gateway_pb2.SubscribeResponse), "the stream ended"
    return event


class SubscribeEndToEnd:
    @pytest.fixture
    async def agents(self, stack: DevStack) -> AsyncIterator[tuple[Stub, Stub]]:
        """Two clients on channels of their own, as two agents of one tenant would be."""
        async with (
            grpc.aio.insecure_channel(stack.gateway_address) as one,
            grpc.aio.insecure_channel(stack.gateway_address) as two,
        ):
            yield gateway_pb2_grpc.MemoryServiceStub(one), gateway_pb2_grpc.MemoryServiceStub(two)

    async def test_one_agent_sees_what_another_stores(self, agents: tuple[Stub, Stub]) -> None:
        watcher, writer = agents
        tag = f"feed:{uuid.uuid4().hex[:8]}"
        before = await store(writer, "stored before anyone listened", tag)
        call = watcher.Subscribe(gateway_pb2.SubscribeRequest(tags=[tag]), metadata=AUTH)
        stored: dict[int, str] = {}
        seen = asyncio.Event()

        async def keep_storing() -> None:
            # The subscription starts listening once its consumer exists, which the client
            # cannot see: store until the watcher has seen one.
            for i in range(100):
                if seen.is_set():
                    return
                reply = await store(writer, f"the tide tables are in the red binder ({i})", tag)
                stored[reply.sequence] = reply.id
                await asyncio.sleep(0.2)

        storing = asyncio.create_task(keep_storing())
        try:
            async with asyncio.timeout(30):
                event = await next_event(call)
                while not event.HasField("memory"):  # a background pass's link passes the filter
                    event = await next_event(call)
                seen.set()
                await storing  # its last reply names the event's memory too
        finally:
            storing.cancel()
            call.cancel()
        assert event.kind == Kind.MEMORY_STORED
        assert event.sequence > before.sequence  # new only: the earlier one is not replayed
        assert stored[event.sequence] == event.memory_id == event.memory.id
        assert event.memory.content.startswith("the tide tables are in the red binder")
        assert list(event.memory.tags) == [tag]

    async def test_resuming_from_a_sequence_replays_what_came_after(
        self,
        agents: tuple[Stub, Stub],
    ) -> None:
        watcher, writer = agents
        tag = f"feed:{uuid.uuid4().hex[:8]}"
        first, second, third = [await store(writer, f"harbour note {i}", tag) for i in range(3)]
        await wait_for_watermark(writer, third.sequence)  # Update and Delete read the stores
        updated = await writer.Update(
            gateway_pb2.UpdateRequest(
                id=second.id, memory=common_pb2.MemoryInput(content="harbour note 1, corrected")
            ),
            metadata=AUTH,
            timeout=30,
        )
        deleted = await writer.Delete(gateway_pb2.DeleteRequest(id=third.id), metadata=AUTH)
        ours = {first.id, second.id, third.id}
        call = watcher.Subscribe(
            gateway_pb2.SubscribeRequest(after_sequence=first.sequence, tags=[tag]), metadata=AUTH
        )
        seen: list[tuple[int, int, str]] = []
        try:
            async with asyncio.timeout(30):
                while len(seen) < 4:
                    event = await next_event(call)
                    if event.memory_id in ours:  # other events pass the tag filter (deletes, links)
                        seen.append((event.sequence, event.kind, event.memory_id))
        finally:
            call.cancel()
        assert seen == [
            (second.sequence, Kind.MEMORY_STORED, second.id),
            (third.sequence, Kind.MEMORY_STORED, third.id),
            (updated.sequence, Kind.MEMORY_UPDATED, second.id),
            (deleted.sequence, Kind.MEMORY_DELETED, third.id),
        ]
