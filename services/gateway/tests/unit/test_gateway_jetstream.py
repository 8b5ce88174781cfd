"""The log adapter and the write path against a real local nats-server (JetStream on disk)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from nats.js import JetStreamContext
from opentelemetry.sdk.trace import TracerProvider

from engram.events.v1 import events_pb2
from engram_core.errors import DeadlineExceeded, Unavailable
from engram_core.model import Memory, Relation
from engram_core.validation import MemoryInput
from engram_gateway.adapters.log import JetStreamLog
from engram_gateway.bootstrap import Backends, build_gateway
from engram_gateway.service import Deadline, RecallRequest, StoreItem
from engram_gateway.service.ports import Ack, Envelope
from engram_platform import jetstream
from engram_platform.cache import MemoryCache
from engram_testing.metrics import ServiceMetrics

NOW = datetime(2025, 6, 1, tzinfo=UTC)


async def test_events_carry_envelope_msg_id_and_trace(js: Any) -> None:
    ctx = js
    log = JetStreamLog(ctx, timeout_s=5)
    memory = Memory(id="m1", tenant="acme", content="hello", timestamp=NOW, updated_at=NOW)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("engram.gateway/Store"):
        ack = await log.stored(Envelope("ev-1", "acme", NOW), memory)
    assert (ack.sequence, ack.duplicate) == (1, False)
    raw = await ctx.get_msg(jetstream.STREAM_MEMORY, 1)
    assert raw.subject == "engram.acme.memory_stored.v1"
    assert raw.headers is not None
    assert raw.headers["Nats-Msg-Id"] == "ev-1"
    assert raw.headers[jetstream.EVENT_HEADER] == jetstream.MEMORY_STORED
    event = events_pb2.MemoryStored.FromString(raw.data or b"")
    assert event.envelope.event_id == "ev-1"
    assert event.envelope.tenant == "acme"
    assert event.envelope.occurred_at.ToDatetime(tzinfo=UTC) == NOW
    assert event.envelope.trace_context["traceparent"].startswith("00-")
    assert event.memory.content == "hello"

    again = await log.stored(Envelope("ev-1", "acme", NOW), memory)
    assert (again.sequence, again.duplicate) == (1, True)
    assert await log.stored_memory_id(1) == "m1"
    assert await log.stored_memory_id(99) is None

    rel = await log.relation_added(Envelope("ev-2", "acme", NOW), Relation("m1", "m2", "LEADS_TO"))
    deleted = await log.deleted(Envelope("ev-3", "acme", NOW), "m1")
    accessed = await log.accessed(Envelope("ev-4", "acme", NOW), ["m1"], NOW)
    assert (rel.sequence, deleted.sequence) == (2, 3)
    assert accessed.sequence == 1  # its own stream, ENGRAM_ACCESS
    assert await log.last_sequence() == 3
    assert await log.watermark() == 0  # no ingest consumer yet


def _gateway(ctx: JetStreamContext, cache: MemoryCache, new_harness: Any, **kw: Any) -> Any:
    h = new_harness(**kw)  # fakes for the stores; the real log
    return build_gateway(
        h.settings,
        _backends(h),
        JetStreamLog(ctx, timeout_s=5),
        cache,
    )


def _backends(h: Any) -> Backends:
    return Backends(h.vector, h.lexical, h.graph, h.ranker)


async def test_a_retry_after_a_lost_cache_writes_nothing(js: Any, new_harness: Any) -> None:
    ctx = js
    cache = MemoryCache()
    gateway = _gateway(ctx, cache, new_harness)
    item = StoreItem(MemoryInput(content="pay the invoice"), idempotency_key="req-77")
    first = await gateway.writer.store("acme", [item], Deadline.within(5.0))
    await cache.delete_prefix("")  # Redis flushed, or another replica without the entry
    again = await gateway.writer.store("acme", [item], Deadline.within(5.0))
    assert (again.ids, again.sequence) == (first.ids, first.sequence)
    assert again.results[0].duplicate
    assert await jetstream.last_sequence(ctx) == 1


class _InFlightLog(JetStreamLog):
    """The real log, counting the publishes awaiting their ack at once."""

    def __init__(self, js: JetStreamContext, timeout_s: float) -> None:
        super().__init__(js, timeout_s)
        self.in_flight = 0
        self.most_in_flight = 0

    async def stored(
        self,
        env: Envelope,
        memory: Memory,
        timeout: float | None = None,
        embedding: Sequence[float] = (),
    ) -> Ack:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await super().stored(env, memory, timeout, embedding)
        finally:
            self.in_flight -= 1


async def test_a_batch_is_published_pipelined(js: Any, new_harness: Any) -> None:
    ctx = js
    h = new_harness()
    log = _InFlightLog(ctx, timeout_s=5)
    gateway = build_gateway(h.settings, _backends(h), log, MemoryCache())
    items = [StoreItem(MemoryInput(content=f"m {i}"), path=f"memories[{i}]") for i in range(300)]
    out = await gateway.writer.store("acme", items, Deadline.within(5.0))
    assert out.sequence == 300
    assert len(set(out.ids)) == 300
    # Pipelined: the batch's publishes wait for their acks together, not one after another.
    assert log.most_in_flight > 1
    raw = await ctx.get_msg(jetstream.STREAM_MEMORY, 300)
    assert events_pb2.MemoryStored.FromString(raw.data or b"").memory.id in out.ids


async def test_min_sequence_against_the_real_watermark(js: Any, new_harness: Any) -> None:
    ctx = js
    gateway = _gateway(ctx, MemoryCache(), new_harness)
    out = await gateway.writer.store(
        "acme", [StoreItem(MemoryInput(content="x"))], Deadline.within(5.0)
    )
    with pytest.raises(DeadlineExceeded, match=f"min_sequence {out.sequence}"):
        await gateway.reader.recall(
            "acme", RecallRequest(query="x", min_sequence=out.sequence), Deadline.within(0.3)
        )


class _SilentJetStream:
    """Takes every publish and never acknowledges it."""

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[Any]] = []

    async def publish_async(self, *args: Any, **kw: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        return future


async def test_a_publish_waits_for_its_ack_no_longer_than_it_was_given() -> None:
    log = JetStreamLog(_SilentJetStream(), timeout_s=30)  # type: ignore[arg-type]
    memory = Memory(id="m1", tenant="acme", content="hello", timestamp=NOW, updated_at=NOW)
    with pytest.raises(Unavailable, match=r"not acknowledged within 0\.050s.*same idempotency"):
        await log.stored(Envelope("ev-1", "acme", NOW), memory, timeout=0.05)


async def test_published_events_are_counted_by_event_and_outcome(
    js: Any, service_metrics: ServiceMetrics
) -> None:
    ctx = js
    m, name = service_metrics, "engram.events.published"
    log = JetStreamLog(ctx, timeout_s=5)
    memory = Memory(id="m1", tenant="acme", content="hello", timestamp=NOW, updated_at=NOW)
    stored = m.value(name, event=jetstream.MEMORY_STORED, outcome="ok")
    again = m.value(name, event=jetstream.MEMORY_STORED, outcome="duplicate")
    accessed = m.value(name, event=jetstream.MEMORY_ACCESSED, outcome="ok")
    await log.stored(Envelope("ev-m1", "acme", NOW), memory)
    await log.stored(Envelope("ev-m1", "acme", NOW), memory)
    await log.accessed(Envelope("ev-a1", "acme", NOW), ["m1"], NOW)
    assert m.value(name, event=jetstream.MEMORY_STORED, outcome="ok") == stored + 1
    assert m.value(name, event=jetstream.MEMORY_STORED, outcome="duplicate") == again + 1
    assert m.value(name, event=jetstream.MEMORY_ACCESSED, outcome="ok") == accessed + 1
