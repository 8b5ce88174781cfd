"""Subscribe (the change feed) over a fake feed: filters, tenant isolation, the bounds on
open subscriptions and the slot a cancelled stream gives back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_core.errors import ResourceExhausted
from engram_core.log_events import (
    Event,
    MemoryRemoved,
    MemoryWritten,
    RelationLinked,
    TenantErased,
)
from engram_core.model import Memory, Relation
from engram_gateway import server
from engram_gateway.auth import Authenticator
from engram_gateway.mapping import event_to_proto
from engram_gateway.service import FeedConfig, FeedQuery, Subscriptions
from engram_platform.errors import FIELD_KEY, RETRY_AFTER_KEY
from engram_testing.metrics import ServiceMetrics
from engram_testing.waiting import until

if TYPE_CHECKING:
    from conftest import Harness

Kind = gateway_pb2.SubscribeResponse.Kind
RW = (("authorization", "Bearer rw-token"),)
GLOBEX = (("authorization", "Bearer other"),)
REJECTED = "engram.admission.rejections"
OPEN = "engram.subscriptions.open"


class FakeFeed:
    """The ChangeFeed port over a list: a reader sees its tenant's events (as the real one's
    subject filter does), those after `after` or, with None, those published from now."""

    def __init__(self) -> None:
        self.log: list[Event] = []
        self.readers = 0  # open readers: each must be closed when its subscriber goes
        self._changed = asyncio.Condition()

    async def publish(self, *events: Event) -> None:
        async with self._changed:
            self.log.extend(events)
            self._changed.notify_all()

    async def events(self, tenant: str, after: int | None) -> AsyncIterator[Event]:
        seen = len(self.log) if after is None else 0
        self.readers += 1
        try:
            while True:
                while seen < len(self.log):
                    event = self.log[seen]
                    seen += 1
                    if event.tenant == tenant and event.sequence > (after or 0):
                        yield event
                async with self._changed:
                    while seen >= len(self.log):
                        await self._changed.wait()
        finally:
            self.readers -= 1


def written(seq: int, tenant: str = "acme", created: bool = True, **kw: Any) -> MemoryWritten:
    memory = Memory(id=f"m{seq}", tenant=tenant, content=f"memory {seq}", **kw)
    return MemoryWritten(memory, seq, created=created)


async def take(events: AsyncIterator[Event], n: int) -> list[int]:
    out = []
    async with asyncio.timeout(5):
        async for event in events:
            out.append(event.sequence)
            if len(out) == n:
                break
    return out


@pytest.fixture
def feed() -> FakeFeed:
    return FakeFeed()


def subs(feed: FakeFeed, per_tenant: int = 2, total: int = 3) -> Subscriptions:
    return Subscriptions(feed, FeedConfig(per_tenant=per_tenant, total=total, retry_after_s=2.0))


async def test_tags_and_types_filter_written_memories_and_let_the_rest_through(
    feed: FakeFeed,
) -> None:
    await feed.publish(
        written(1, tags=("work",)),
        written(2, tags=("home",)),
        written(3, type="fact", tags=("work",)),
        MemoryRemoved("acme", "m2", 4),
        RelationLinked("acme", Relation("m1", "m3", "RELATES_TO"), 5),
        written(6, tags=("work", "x")),
    )
    s = subs(feed)
    assert await take(s.subscribe("acme", FeedQuery(after=0, tags=("work",))), 5) == [1, 3, 4, 5, 6]
    query = FeedQuery(after=0, tags=("work",), types=("fact",))
    assert await take(s.subscribe("acme", query), 3) == [3, 4, 5]


async def test_replays_after_a_sequence_then_goes_on_live(feed: FakeFeed) -> None:
    await feed.publish(written(1), written(2), written(3))
    stream = subs(feed).subscribe("acme", FeedQuery(after=1))
    assert await take(stream, 2) == [2, 3]
    await feed.publish(written(4))
    assert await take(stream, 1) == [4]
    await stream.aclose()  # type: ignore[attr-defined]
    assert feed.readers == 0


async def test_a_tenant_sees_none_of_another_tenants_events(feed: FakeFeed) -> None:
    await feed.publish(written(1, tenant="globex"), written(2), written(3, tenant="globex"))
    assert await take(subs(feed).subscribe("acme", FeedQuery(after=0)), 1) == [2]


async def test_a_tenant_over_its_bound_is_refused_until_one_ends(
    feed: FakeFeed, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    refusals = m.value(REJECTED, reason="tenant_subscriptions")
    open_before = m.value(OPEN)
    s = subs(feed, per_tenant=2, total=3)
    await feed.publish(written(1))
    first, second = (s.subscribe("acme", FeedQuery(after=0)) for _ in range(2))
    assert await take(first, 1) == [1]
    assert await take(second, 1) == [1]
    with pytest.raises(ResourceExhausted) as refused:
        await take(s.subscribe("acme", FeedQuery(after=0)), 1)
    assert refused.value.retry_after_s == 2.0
    assert s.held("acme") == 2
    assert m.value(REJECTED, reason="tenant_subscriptions") == refusals + 1
    assert m.value(OPEN) == open_before + 2
    # Another tenant still gets in, up to the gateway's total.
    await feed.publish(written(2, tenant="globex"))
    other = s.subscribe("globex", FeedQuery(after=0))
    assert await take(other, 1) == [2]
    with pytest.raises(ResourceExhausted, match="gateway"):
        await take(s.subscribe("initech", FeedQuery()), 1)
    await first.aclose()  # type: ignore[attr-defined]
    assert s.held("acme") == 1
    assert m.value(OPEN) == open_before + 2  # globex's one opened, acme's first one closed
    assert await take(s.subscribe("acme", FeedQuery(after=0)), 1) == [1]


# --- over gRPC ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def serve(harness: Harness, feed: FakeFeed, **config: Any) -> AsyncIterator[Any]:
    gateway = replace(harness.gateway, feed=Subscriptions(feed, FeedConfig(**config)))
    auth = Authenticator.from_sources(harness.settings.tokens.get_secret_value())
    running = await server.start(harness.settings, gateway, auth)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield gateway_pb2_grpc.MemoryServiceStub(channel), gateway.feed
    finally:
        await channel.close()
        await running.stop(None)


async def test_events_arrive_with_sequence_kind_and_memory(
    harness: Harness, feed: FakeFeed
) -> None:
    async with serve(harness, feed) as (stub, _):
        call = stub.Subscribe(gateway_pb2.SubscribeRequest(after_sequence=0), metadata=RW)
        await feed.publish(
            written(7, tenant="globex"),
            written(8, tags=("a",)),
            written(9, created=False),
            MemoryRemoved("acme", "m8", 10),
            RelationLinked("acme", Relation("m8", "m9", "RELATES_TO"), 11),
        )
        got = [await call.read() for _ in range(4)]
        call.cancel()
        assert [(r.sequence, r.kind, r.memory_id) for r in got] == [
            (8, Kind.MEMORY_STORED, "m8"),
            (9, Kind.MEMORY_UPDATED, "m9"),
            (10, Kind.MEMORY_DELETED, "m8"),
            (11, Kind.RELATION_ADDED, "m8"),
        ]
        assert list(got[0].memory.tags) == ["a"]
        assert got[0].memory.content == "memory 8"
        assert got[3].relation.target_id == "m9"


async def test_a_cancelled_stream_gives_its_slot_back(harness: Harness, feed: FakeFeed) -> None:
    async with serve(harness, feed, per_tenant=1, total=4) as (stub, subscriptions):
        call = stub.Subscribe(gateway_pb2.SubscribeRequest(), metadata=RW)
        await until(lambda: subscriptions.held("acme") == 1)
        refused = stub.Subscribe(gateway_pb2.SubscribeRequest(), metadata=RW)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await refused.read()
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert dict(err.value.trailing_metadata() or ())[RETRY_AFTER_KEY] == "5000"
        # Another tenant's bound is its own.
        other = stub.Subscribe(gateway_pb2.SubscribeRequest(), metadata=GLOBEX)
        await until(lambda: subscriptions.held("globex") == 1)
        call.cancel()
        other.cancel()
        await until(lambda: subscriptions.held("acme") == 0 and feed.readers == 0)
        again = stub.Subscribe(gateway_pb2.SubscribeRequest(), metadata=RW)
        await until(lambda: subscriptions.held("acme") == 1)
        await feed.publish(written(1))
        assert (await again.read()).sequence == 1
        again.cancel()


async def test_bad_filters_and_missing_scope_are_refused(harness: Harness, feed: FakeFeed) -> None:
    async with serve(harness, feed) as (stub, _):
        bad = stub.Subscribe(gateway_pb2.SubscribeRequest(types=[""]), metadata=RW)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await bad.read()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(err.value.trailing_metadata() or ())[FIELD_KEY] == "types[0]"
        huge = stub.Subscribe(
            gateway_pb2.SubscribeRequest(after_sequence=2**64 - 1), metadata=RW, timeout=5
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await huge.read()
        assert dict(err.value.trailing_metadata() or ())[FIELD_KEY] == "after_sequence"
        write_only = (("authorization", "Bearer w-token"),)
        denied = stub.Subscribe(gateway_pb2.SubscribeRequest(), metadata=write_only)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await denied.read()
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_tenant_deletion_reaches_subscribers_as_its_own_kind() -> None:
    reply = event_to_proto(TenantErased("acme", 42))
    assert (reply.sequence, reply.kind) == (42, gateway_pb2.SubscribeResponse.TENANT_DELETED)
    assert not reply.memory_id
