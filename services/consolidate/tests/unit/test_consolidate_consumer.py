"""The access consumer against a real nats-server, with fake stores behind it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from engram.events.v1 import events_pb2
from engram_consolidate.bootstrap import build
from engram_consolidate.config import Settings
from engram_consolidate.consumer import ORIGINAL_SEQUENCE_HEADER, REASON_HEADER, AccessConsumer
from engram_core.errors import Unavailable
from engram_core.model import Memory
from engram_platform import jetstream as jsm
from engram_platform.convert import ts_to_proto
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
A, B, C = (f"0195a000-0000-7000-8000-00000000000{c}" for c in "abc")


def accessed(ids: tuple[str, ...], minute: int, tenant: str = "t1") -> bytes:
    return events_pb2.MemoryAccessed(
        envelope=events_pb2.Envelope(event_id=f"a{minute}", tenant=tenant),
        ids=list(ids),
        accessed_at=ts_to_proto(T0 + timedelta(minutes=minute)),
    ).SerializeToString()


def settings_for(server: NatsServer) -> Settings:
    return worker_settings(Settings, server, batch_wait_s=0.05)


@asynccontextmanager
async def running(settings: Settings, stores: Stores) -> AsyncIterator[AccessConsumer]:
    tracker = build(
        settings,
        vector=stores.vector,
        lexical=stores.lexical,
        graph=stores.graph,
        **stores.plumbing(),
    ).tracker

    def make(nc: Client, js: JetStreamContext) -> AccessConsumer:
        return AccessConsumer(nc, js, tracker, settings)

    async with running_worker(settings.nats, make, "consolidate-test") as consumer:
        yield consumer


async def until_acked(js: JetStreamContext, sequence: int) -> None:
    async def reached() -> bool:
        info = await js.consumer_info(jsm.STREAM_ACCESS, jsm.DURABLE_ACCESS)
        return (info.ack_floor.stream_seq if info.ack_floor else 0) >= sequence

    await until(reached)


async def publish_all(js: JetStreamContext, payloads: list[bytes]) -> int:
    last = 0
    for n, payload in enumerate(payloads):
        last, _ = await jsm.publish(
            js, jsm.subject("t1", jsm.MEMORY_ACCESSED), payload, msg_id=f"acc-{n}"
        )
    return last


async def test_100_access_events_for_3_memories_make_3_writes_per_store(
    nats_server: NatsServer, stores: Stores
) -> None:
    stores.hold(*(Memory(id=i, tenant="t1", content="x", timestamp=T0) for i in (A, B, C)))
    # A in every event, B in every 4th, C only in the last.
    payloads = [
        accessed((A,) + ((B,) if m % 4 == 0 else ()) + ((C,) if m == 99 else ()), m)
        for m in range(100)
    ]
    async with log_connection(nats_server) as js:
        last = await publish_all(js, payloads)
        async with running(settings_for(nats_server), stores) as consumer:
            await until_acked(js, last)
        assert consumer.counters.acked == 100
        for store in stores.all():
            assert len(store.updates) == 3, store.name
            counts = {u.id: (u.access_count, u.last_accessed) for _, u in store.updates}
            assert counts == {
                A: (100, T0 + timedelta(minutes=99)),
                B: (25, T0 + timedelta(minutes=96)),
                C: (1, T0 + timedelta(minutes=99)),
            }


async def test_store_down_is_retried_and_poison_is_dead_lettered(
    nats_server: NatsServer, stores: Stores
) -> None:
    stores.hold(Memory(id=A, tenant="t1", content="x", timestamp=T0))
    stores.lexical.fail_next.append(Unavailable("lexical restarting"))
    async with log_connection(nats_server) as js:
        dead: list[Msg] = []
        watcher = await nats.connect(nats_server.url)

        async def collect(msg: Msg) -> None:
            dead.append(msg)

        await watcher.subscribe(jsm.subject("*", jsm.DEAD_LETTER), cb=collect)
        last = await publish_all(js, [accessed((A,), 1), b"\xff\xff", accessed((A,), 2)])
        async with running(settings_for(nats_server), stores) as consumer:
            await until_acked(js, last)
            await until(lambda: len(dead) == 1)
        await watcher.close()
        assert consumer.counters.retried >= 1
        assert consumer.counters.poisoned == 1
        assert dead[0].headers is not None
        assert dead[0].headers[ORIGINAL_SEQUENCE_HEADER] == "2"
        assert "undecodable" in dead[0].headers[REASON_HEADER]
        for store in stores.all():
            assert store.memories[("t1", A)].access_count == 2


async def test_the_process_logs_ready_and_stops_on_sigterm(nats_server: NatsServer) -> None:
    env = {
        "ENGRAM_CONSOLIDATE_NATS__URL": nats_server.url,
        "ENGRAM_CONSOLIDATE_FETCH_TIMEOUT_S": "0.2",
    }
    assert await ready_then_sigterm("engram_consolidate", env) == 0
