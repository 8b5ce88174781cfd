"""The ingest consumer against a real nats-server, with fake stores behind it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from engram.events.v1 import events_pb2
from engram_core.errors import Unavailable
from engram_core.model import Memory, Relation
from engram_ingest.config import Settings
from engram_ingest.consumer import (
    ORIGINAL_SEQUENCE_HEADER,
    ORIGINAL_SUBJECT_HEADER,
    REASON_HEADER,
    STORE_HEADER,
    IngestConsumer,
    backoff_s,
)
from engram_ingest.service import Event, Result
from engram_platform import jetstream as jsm
from engram_platform.convert import memory_to_proto, relation_to_proto
from engram_testing.nats_server import NatsServer
from engram_testing.processes import (
    log_connection,
    ready_then_sigterm,
    running_worker,
    worker_settings,
)
from engram_testing.waiting import until

if TYPE_CHECKING:
    from conftest import Stores

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def mem_id(n: int) -> str:
    return f"0195a000-0000-7000-8000-{n:012d}"


def stored(n: int, tenant: str = "t1", content: str | None = None) -> bytes:
    memory = Memory(
        id=mem_id(n), tenant=tenant, content=content or f"memory number {n}", timestamp=T0
    )
    return events_pb2.MemoryStored(
        envelope=events_pb2.Envelope(event_id=f"e{n}", tenant=tenant),
        memory=memory_to_proto(memory),
    ).SerializeToString()


def settings_for(server: NatsServer, **kw: object) -> Settings:
    ingest: dict[str, object] = {
        "batch_size": 16,
        "batch_wait_s": 0.01,
        "ack_wait_s": 30.0,
        "embed_timeout_s": 5.0,
        "write_timeout_s": 5.0,
    }
    return worker_settings(Settings, server, **(ingest | kw))


async def publish(
    js: JetStreamContext, event: str, payload: bytes, n: int, tenant: str = "t1"
) -> int:
    seq, _ = await jsm.publish(js, jsm.subject(tenant, event), payload, msg_id=f"{event}-{n}")
    return seq


@asynccontextmanager
async def running(settings: Settings, stores: Stores) -> AsyncIterator[IngestConsumer]:
    applier = stores.applier(settings)

    def make(nc: Client, js: JetStreamContext) -> IngestConsumer:
        return IngestConsumer(nc, js, applier, settings)

    async with running_worker(settings.nats, make, "ingest-test") as consumer:
        yield consumer


async def until_watermark(js: JetStreamContext, sequence: int) -> None:
    async def reached() -> bool:
        return await jsm.watermark(js) >= sequence

    await until(reached)


async def test_applied_events_are_acked_and_the_watermark_reaches_the_end(
    nats_server: NatsServer, stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="engram_ingest")
    async with log_connection(nats_server) as js:
        for n in range(1, 41):
            await publish(js, jsm.MEMORY_STORED, stored(n), n)
        rel = Relation(mem_id(1), mem_id(2), "RELATES_TO", created_at=T0)
        payload = events_pb2.RelationAdded(relation=relation_to_proto(rel)).SerializeToString()
        await publish(js, jsm.RELATION_ADDED, payload, 41)
        deleted = events_pb2.MemoryDeleted(id=mem_id(3)).SerializeToString()
        last = await publish(js, jsm.MEMORY_DELETED, deleted, 42)
        assert last == 42

        async with running(settings_for(nats_server), stores) as consumer:
            await until_watermark(js, last)
        assert consumer.counters.applied == 42
        assert consumer.counters.retried == consumer.counters.poisoned == 0
        for store in stores.all():
            assert len(store.live("t1")) == 39
            assert store.memory("t1", mem_id(40)) is not None
            assert store.memory("t1", mem_id(40)).version == 40  # type: ignore[union-attr]
        assert stores.graph.relations[("t1", mem_id(1), mem_id(2), "RELATES_TO")][1] == 41
        # Batched: far fewer embedder calls than events.
        assert len(stores.embedder.calls) < 40
        assert any("ready" in r.getMessage() for r in caplog.records)


async def test_a_poison_event_is_dead_lettered_and_termed(
    nats_server: NatsServer, stores: Stores
) -> None:
    async with log_connection(nats_server) as js:
        dead: list[Msg] = []
        watcher = await nats.connect(nats_server.url)
        sub = await watcher.subscribe(jsm.subject("*", jsm.DEAD_LETTER), cb=_append_to(dead))
        await publish(js, jsm.MEMORY_STORED, stored(1), 1)
        await publish(js, jsm.MEMORY_STORED, b"\xff\xff\xff", 2)
        await publish(js, jsm.MEMORY_STORED, stored(3, content="  "), 3)
        last = await publish(js, jsm.MEMORY_STORED, stored(4), 4)

        async with running(settings_for(nats_server), stores) as consumer:
            await until_watermark(js, last)
            await until(lambda: len(dead) >= 2)
        await sub.unsubscribe()
        await watcher.close()

        assert consumer.counters.poisoned == 2
        assert sorted(stores.vector.live("t1")) == [mem_id(1), mem_id(4)]
        by_seq = {m.headers[ORIGINAL_SEQUENCE_HEADER]: m for m in dead if m.headers}
        assert sorted(by_seq) == ["2", "3"]
        assert by_seq["2"].subject == "engram.t1.dead_letter.v1"
        assert by_seq["2"].data == b"\xff\xff\xff"  # the original payload, untouched
        assert by_seq["2"].headers[ORIGINAL_SUBJECT_HEADER] == "engram.t1.memory_stored.v1"  # type: ignore[index]
        assert "undecodable" in by_seq["2"].headers[REASON_HEADER]  # type: ignore[index]
        assert "empty content" in by_seq["3"].headers[REASON_HEADER]  # type: ignore[index]
        # Termed, not retried: the consumer holds nothing pending.
        info = await js.consumer_info(jsm.STREAM_MEMORY, jsm.DURABLE_INGEST)
        assert info.num_ack_pending == 0
        assert info.num_redelivered == 0


async def test_a_store_refusal_is_dead_lettered_and_the_watermark_moves_on(
    nats_server: NatsServer, stores: Stores
) -> None:
    stores.graph.refused_ids.add(mem_id(2))
    async with log_connection(nats_server) as js:
        dead: list[Msg] = []
        watcher = await nats.connect(nats_server.url)
        sub = await watcher.subscribe(jsm.subject("*", jsm.DEAD_LETTER), cb=_append_to(dead))
        await publish(js, jsm.MEMORY_STORED, stored(1), 1)
        await publish(js, jsm.MEMORY_STORED, stored(2), 2)
        last = await publish(js, jsm.MEMORY_STORED, stored(3, tenant="t2"), 3, tenant="t2")

        async with running(settings_for(nats_server), stores) as consumer:
            await until_watermark(js, last)
            await until(lambda: len(dead) >= 1)
        await sub.unsubscribe()
        await watcher.close()

        assert (consumer.counters.poisoned, consumer.counters.retried) == (1, 0)
        (letter,) = dead
        assert letter.subject == "engram.t1.dead_letter.v1"
        assert letter.headers is not None
        assert letter.headers[STORE_HEADER] == "graph"
        assert letter.headers[ORIGINAL_SEQUENCE_HEADER] == "2"
        assert "INVALID_ARGUMENT" in letter.headers[REASON_HEADER]
        for store in stores.all():
            assert mem_id(1) in store.live("t1")
            assert mem_id(3) in store.live("t2")


def _append_to(box: list[Msg]):  # type: ignore[no-untyped-def]
    async def cb(msg: Msg) -> None:
        box.append(msg)

    return cb


async def test_a_retriable_failure_is_redelivered_then_applied(
    nats_server: NatsServer, stores: Stores
) -> None:
    stores.lexical.fail_next.extend([Unavailable("lexical restarting")] * 2)
    async with log_connection(nats_server) as js:
        for n in range(1, 6):
            last = await publish(js, jsm.MEMORY_STORED, stored(n), n)
        async with running(settings_for(nats_server), stores) as consumer:
            await until_watermark(js, last)
        assert consumer.counters.retried >= 2
        assert consumer.counters.applied == 5
        assert all(len(s.live("t1")) == 5 for s in stores.all())
        info = await js.consumer_info(jsm.STREAM_MEMORY, jsm.DURABLE_INGEST)
        assert info.num_redelivered == 0  # nothing is still waiting for another try
        assert info.num_ack_pending == 0


def added(source: int, target: int) -> bytes:
    rel = Relation(mem_id(source), mem_id(target), "LEADS_TO", created_at=T0)
    return events_pb2.RelationAdded(relation=relation_to_proto(rel)).SerializeToString()


def only_in_vector_and_lexical(stores: Stores, *ns: int) -> None:
    """Memories ingest wrote to vector and lexical while the graph was down."""
    for n in ns:
        memory = Memory(id=mem_id(n), tenant="t1", content=f"memory {n}", timestamp=T0)
        stores.vector._put("t1", memory)
        stores.lexical._put("t1", memory)


async def test_an_associate_waits_for_the_graph_to_catch_up_then_the_edge_arrives(
    nats_server: NatsServer, stores: Stores
) -> None:
    only_in_vector_and_lexical(stores, 1, 2)
    stores.graph._put("t1", Memory(id=mem_id(1), tenant="t1", content="m", timestamp=T0))
    stores.graph.check_ends = True  # memory 2 has not reached the graph yet
    settings = settings_for(nats_server, retry_base_s=0.05, retry_max_s=0.1)
    async with log_connection(nats_server) as js:
        last = await publish(js, jsm.RELATION_ADDED, added(1, 2), 1)
        async with running(settings, stores) as consumer:
            await until(lambda: consumer.counters.retried >= 2)
            assert await jsm.watermark(js) < last  # waiting, not acked and dropped
            stores.graph._put("t1", Memory(id=mem_id(2), tenant="t1", content="m", timestamp=T0))
            await until_watermark(js, last)
        assert consumer.counters.poisoned == 0
        assert ("t1", mem_id(1), mem_id(2), "LEADS_TO") in stores.graph.relations


async def test_an_associate_whose_endpoint_never_arrives_is_dead_lettered_with_why(
    nats_server: NatsServer, stores: Stores
) -> None:
    only_in_vector_and_lexical(stores, 1, 2)
    stores.graph.check_ends = True
    settings = settings_for(nats_server, retry_base_s=0.05, retry_max_s=0.1, endpoint_deliveries=3)
    async with log_connection(nats_server) as js:
        dead: list[Msg] = []
        watcher = await nats.connect(nats_server.url)
        sub = await watcher.subscribe(jsm.subject("*", jsm.DEAD_LETTER), cb=_append_to(dead))
        last = await publish(js, jsm.RELATION_ADDED, added(1, 2), 1)
        async with running(settings, stores) as consumer:
            await until_watermark(js, last)  # decided: the watermark moves on
            await until(lambda: bool(dead))
        await sub.unsubscribe()
        await watcher.close()
        assert (consumer.counters.retried, consumer.counters.poisoned) == (2, 1)
        reason = dead[0].headers[REASON_HEADER]  # type: ignore[index]
        assert f"endpoint {mem_id(1)} not applied" in reason
        assert "gave up after 3 deliveries" in reason


async def test_the_watermark_never_passes_an_unapplied_event(
    nats_server: NatsServer, stores: Stores
) -> None:
    # The lexical store stays down for seq 1's writes: later events wait behind it.
    stores.lexical.fail_next.extend([Unavailable("down")] * 1000)
    async with log_connection(nats_server) as js:
        for n in range(1, 4):
            await publish(js, jsm.MEMORY_STORED, stored(n), n)
        async with running(settings_for(nats_server), stores) as consumer:
            await until(lambda: consumer.counters.retried >= 6)
            assert await jsm.watermark(js) == 0
            stores.lexical.fail_next.clear()
            await until_watermark(js, 3)


async def test_decided_events_are_marked_so_a_tenant_need_not_wait_for_the_ack_floor(
    nats_server: NatsServer, stores: Stores
) -> None:
    stores.lexical.down_for.add("t1")  # t1's event is retried and holds the ack floor
    async with log_connection(nats_server) as js:
        held = await publish(js, jsm.MEMORY_STORED, stored(1, tenant="t1"), 1, tenant="t1")
        mine = await publish(js, jsm.MEMORY_STORED, stored(2, tenant="t2"), 2, tenant="t2")
        dead = await publish(js, jsm.MEMORY_STORED, stored(3, tenant="t2", content=" "), 3, "t2")
        async with running(settings_for(nats_server), stores):

            async def t2_decided() -> bool:
                return await jsm.tenant_decided(js, "t2", 0, dead)

            await until(t2_decided)  # applied (2) and dead-lettered (3) both count
            assert await jsm.watermark(js) < held
            assert not await jsm.tenant_decided(js, "t1", 0, mine)
            stores.lexical.down_for.clear()
            await until_watermark(js, dead)
        assert await jsm.tenant_decided(js, "t1", 0, dead)
        # A range holding none of the tenant's events is decided without a mark.
        assert await jsm.tenant_decided(js, "t3", 0, dead)


async def test_two_replicas_share_the_durable_and_split_the_work(
    nats_server: NatsServer, stores: Stores
) -> None:
    for store in stores.all():
        store.delay_s = 0.002  # give the other replica a chance to fetch
    async with log_connection(nats_server) as js:
        for n in range(1, 301):
            last = await publish(js, jsm.MEMORY_STORED, stored(n), n)
        settings = settings_for(nats_server, batch_size=8)
        async with running(settings, stores) as one, running(settings, stores) as two:
            await until_watermark(js, last)
        assert one.counters.applied > 0
        assert two.counters.applied > 0
        assert one.counters.applied + two.counters.applied == 300
        assert all(len(s.live("t1")) == 300 for s in stores.all())


async def test_stop_finishes_the_batch_in_hand(nats_server: NatsServer, stores: Stores) -> None:
    for store in stores.all():
        store.delay_s = 0.3
    async with log_connection(nats_server) as js:
        for n in range(1, 6):
            last = await publish(js, jsm.MEMORY_STORED, stored(n), n)
        async with running(settings_for(nats_server), stores):
            await until(lambda: bool(stores.vector.calls))  # the batch is being written
        # Leaving the block stopped the consumer; what it held was applied and acked.
        assert await jsm.watermark(js) == last
        assert len(stores.vector.live("t1")) == 5


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_s(n, 0.5, 3.0) for n in (1, 2, 3, 4, 5, 50)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


async def test_the_process_logs_ready_and_stops_on_sigterm(nats_server: NatsServer) -> None:
    env = {
        "ENGRAM_INGEST_NATS__URL": nats_server.url,
        "ENGRAM_INGEST_EMBED__PROVIDER": "hashing",
        "ENGRAM_INGEST_FETCH_TIMEOUT_S": "0.2",
    }
    assert await ready_then_sigterm("engram_ingest", env) == 0


async def test_an_applier_crash_naks_the_batch_for_a_retry(
    nats_server: NatsServer, stores: Stores
) -> None:
    settings = settings_for(nats_server)
    real = stores.applier(settings)

    class CrashOnce:
        embedding_model = real.embedding_model
        crashed = False

        async def apply(self, events: Sequence[Event]) -> list[Result]:
            if not self.crashed:
                self.crashed = True
                raise KeyError("a bug")
            return await real.apply(events)

    async with log_connection(nats_server) as js:
        last = await publish(js, jsm.MEMORY_STORED, stored(1), 1)

        def make(nc: Client, cjs: JetStreamContext) -> IngestConsumer:
            return IngestConsumer(nc, cjs, CrashOnce(), settings)  # type: ignore[arg-type]

        async with running_worker(settings.nats, make, "ingest-test") as consumer:
            await until_watermark(js, last)  # well before ack_wait_s (30 s): it was nak'd
        assert consumer.counters.retried == 1
        assert consumer.counters.applied == 1


async def test_one_tenants_backlog_does_not_hold_another_tenants_write(
    nats_server: NatsServer, stores: Stores
) -> None:
    for store in stores.all():
        store.delay_s = 0.01
    async with log_connection(nats_server) as js:
        for n in range(1, 301):
            await publish(js, jsm.MEMORY_STORED, stored(n, tenant="t1"), n, tenant="t1")
        last = await publish(js, jsm.MEMORY_STORED, stored(301, tenant="t2"), 301, tenant="t2")
        async with running(settings_for(nats_server), stores):
            await until(lambda: any(c.tenant == "t2" for c in stores.vector.calls))
            before = [c for c in stores.vector.calls if c.tenant == "t1"]
            await until_watermark(js, last)
    # Logged behind 300 of t1's, t2's write went out beside them, not after them: only
    # t1's batches started while the worker read ahead came first.
    assert sum(len(c.ids) for c in before) <= 300 // 3
    assert len(stores.vector.live("t1")) == 300
    # t1's writes went out in log order, one batch after another (ids count up with it).
    written = [i for c in stores.vector.calls if c.tenant == "t1" for i in c.ids]
    assert written == sorted(set(written))
