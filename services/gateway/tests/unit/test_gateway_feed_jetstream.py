"""The change feed's JetStream adapter against a real local nats-server: one ephemeral
consumer per reader on the tenant's subjects, gone when the reader closes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from nats.js import JetStreamContext

from engram_core.log_events import Event, MemoryRemoved, MemoryWritten
from engram_core.model import Memory
from engram_gateway.adapters.feed import JetStreamFeed
from engram_gateway.adapters.log import JetStreamLog
from engram_gateway.service.ports import Envelope
from engram_platform import jetstream
from engram_testing.waiting import until

NOW = datetime(2025, 6, 1, tzinfo=UTC)


async def store(log: JetStreamLog, tenant: str, id: str) -> int:
    memory = Memory(id=id, tenant=tenant, content=f"about {id}", tags=("t",), timestamp=NOW)
    return (await log.stored(Envelope(f"ev-{id}", tenant, NOW), memory)).sequence


async def consumers(js: JetStreamContext) -> int:
    return int((await js.stream_info(jetstream.STREAM_MEMORY)).state.consumer_count)


async def take(events: AsyncIterator[Event], n: int) -> list[Event]:
    out: list[Event] = []
    async with asyncio.timeout(10):
        while len(out) < n:
            out.append(await anext(events))
    return out


async def first(events: AsyncIterator[Event]) -> Event:
    return await anext(events)


async def test_replays_the_tenants_events_after_a_sequence_then_live(js: JetStreamContext) -> None:
    log = JetStreamLog(js, timeout_s=5)
    first = await store(log, "acme", "a1")
    await store(log, "globex", "g1")
    second = await store(log, "acme", "a2")
    events = JetStreamFeed(js, wait_s=0.2).events("acme", first)
    [replayed] = await take(events, 1)
    assert isinstance(replayed, MemoryWritten)
    assert replayed.created
    assert (replayed.sequence, replayed.memory.id, replayed.memory.tenant) == (second, "a2", "acme")
    assert replayed.memory.tags == ("t",)
    await store(log, "globex", "g2")
    gone = (await log.deleted(Envelope("ev-del", "acme", NOW), "a1")).sequence
    [live] = await take(events, 1)
    assert live == MemoryRemoved("acme", "a1", gone)
    assert await consumers(js) == 1
    await events.aclose()  # type: ignore[attr-defined]
    assert await consumers(js) == 0


async def test_without_a_sequence_only_new_events_come(js: JetStreamContext) -> None:
    log = JetStreamLog(js, timeout_s=5)
    await store(log, "acme", "old")
    events = JetStreamFeed(js, wait_s=0.2).events("acme", None)
    pending = asyncio.create_task(first(events))
    await until(lambda: _has_consumer(js))
    seq = await store(log, "acme", "new")
    event = await asyncio.wait_for(pending, 10)
    assert isinstance(event, MemoryWritten)
    assert (event.sequence, event.memory.id) == (seq, "new")
    await events.aclose()  # type: ignore[attr-defined]


async def test_a_cancelled_reader_deletes_its_consumer(js: JetStreamContext) -> None:
    events = JetStreamFeed(js, wait_s=0.2).events("acme", None)
    pending = asyncio.create_task(first(events))
    await until(lambda: _has_consumer(js))
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    await until(lambda: _no_consumer(js))


async def _has_consumer(js: JetStreamContext) -> bool:
    return await consumers(js) == 1


async def _no_consumer(js: JetStreamContext) -> bool:
    return await consumers(js) == 0
