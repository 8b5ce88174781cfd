"""The latest-state log on a real nats-server: the keeper reads ENGRAM_MEMORY from its
checkpoint and keeps one message per memory and relation in ENGRAM_STATE; the readers page
through it; ids that are not subject tokens survive."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from nats.js import JetStreamContext

from engram.events.v1 import events_pb2
from engram_consolidate.adapters.checkpoints import open_bucket
from engram_consolidate.adapters.state import (
    KvKeeperCheckpoints,
    NatsKeeperSource,
    NatsStateLog,
    NatsStateSink,
    ensure_state_stream,
    token,
)
from engram_consolidate.service.state import KeeperConfig, StateKeeper
from engram_consolidate.service.state_apply import MEMORIES, RELATIONS
from engram_core.model import Memory, Relation
from engram_platform import jetstream as jsm
from engram_platform.convert import memory_to_proto, relation_to_proto
from engram_platform.coordination import MemoryLease
from engram_platform.jetstream import STREAM_STATE
from engram_platform.settings import NatsSettings
from engram_testing.nats_server import NatsServer
from engram_testing.processes import log_connection

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ODD = "note/1 with.dots"  # not a subject token


@pytest.fixture
async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
    async with log_connection(nats_server) as js:
        settings = NatsSettings(url=nats_server.url)
        await jsm.ensure_streams(js, settings)
        await ensure_state_stream(js, settings)
        yield js


async def stored(js: JetStreamContext, tenant: str, id_: str, content: str) -> int:
    memory = Memory(id=id_, tenant=tenant, content=content, timestamp=NOW, updated_at=NOW)
    msg = events_pb2.MemoryStored(
        envelope=events_pb2.Envelope(tenant=tenant), memory=memory_to_proto(memory)
    )
    ack = await js.publish(jsm.subject(tenant, jsm.MEMORY_STORED), msg.SerializeToString())
    return int(ack.seq)


async def deleted(js: JetStreamContext, tenant: str, id_: str) -> int:
    msg = events_pb2.MemoryDeleted(envelope=events_pb2.Envelope(tenant=tenant), id=id_)
    ack = await js.publish(jsm.subject(tenant, jsm.MEMORY_DELETED), msg.SerializeToString())
    return int(ack.seq)


async def related(js: JetStreamContext, tenant: str, source: str, target: str) -> int:
    rel = Relation(source, target, "relates_to", created_at=NOW)
    msg = events_pb2.RelationAdded(
        envelope=events_pb2.Envelope(tenant=tenant), relation=relation_to_proto(rel)
    )
    ack = await js.publish(jsm.subject(tenant, jsm.RELATION_ADDED), msg.SerializeToString())
    return int(ack.seq)


async def keep(js: JetStreamContext, until_seq: int) -> StateKeeper:
    kv = await open_bucket(js, 1)
    keeper = StateKeeper(
        NatsKeeperSource(js, 30.0, 64),
        NatsStateSink(js, 5.0),
        KvKeeperCheckpoints(kv),
        MemoryLease(),
        "k1",
        KeeperConfig(batch_size=7, fetch_wait_s=0.1),
        lambda: NOW,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(keeper.run(stop))
    log = NatsStateLog(js, kv)
    for _ in range(200):
        if await log.keeper_sequence() >= until_seq:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 10)
    return keeper


async def test_keeper_keeps_one_state_per_key_and_readers_page_through(
    js: JetStreamContext,
) -> None:
    for n in range(20):
        await stored(js, "acme", f"m{n % 5}", f"version {n}")
    await stored(js, "acme", ODD, "odd id")
    await stored(js, "beta", "m1", "another tenant's m1")
    await related(js, "acme", "m1", "m2")
    last = await deleted(js, "acme", "m4")
    await keep(js, last)

    kv = await open_bucket(js, 1)
    log = NatsStateLog(js, kv)
    info = await js.stream_info(STREAM_STATE)
    assert info.state.messages == 8  # acme m0-m4 + odd + relation, beta m1
    states = await log.memory_states("acme", ["m0", "m3", "m4", ODD, "nope"])
    assert states["m0"].memory is not None
    assert states["m0"].memory.content == "version 15"
    assert states["m4"].deleted
    assert states["m4"].version == last
    assert states[ODD].memory is not None
    assert states[ODD].id == ODD
    assert "nope" not in states
    assert await log.size("acme", MEMORIES) == 6
    assert await log.size(None, RELATIONS) == 1

    end = await log.last_sequence()
    pages = [p async for p in log.records("acme", MEMORIES, 0, end, 4)]
    assert [len(p) for p in pages] == [4, 2]
    seqs = [x.sequence for p in pages for x in p]
    assert seqs == sorted(seqs)
    assert {x.record.tenant for p in pages for x in p} == {"acme"}
    resumed = [x.sequence async for p in log.records("acme", MEMORIES, seqs[3], end, 4) for x in p]
    assert resumed == seqs[4:]
    assert token(ODD).startswith("~")


async def test_a_tenant_deletion_purges_the_tenants_states_in_nats(js: JetStreamContext) -> None:
    await stored(js, "acme", "m1", "one")
    await stored(js, "beta", "m1", "another tenant's m1")
    await related(js, "acme", "m1", "m1x")
    gone = events_pb2.TenantDeleted(envelope=events_pb2.Envelope(tenant="acme"))
    ack = await js.publish(jsm.subject("acme", jsm.TENANT_DELETED), gone.SerializeToString())
    last = await stored(js, "acme", "m2", "after")
    await keep(js, last)

    log = NatsStateLog(js, await open_bucket(js, 1))
    assert ack.seq < last
    assert await log.size("acme", MEMORIES) == 1
    assert await log.size("acme", RELATIONS) == 0
    assert list(await log.memory_states("acme", ["m1", "m2"])) == ["m2"]
    assert list(await log.memory_states("beta", ["m1"])) == ["m1"]


async def test_keeper_restarted_continues_from_its_checkpoint(js: JetStreamContext) -> None:
    first = await stored(js, "acme", "m1", "one")
    await keep(js, first)
    second = await stored(js, "acme", "m1", "two")
    keeper = await keep(js, second)
    assert keeper.stats.events == 1  # only the new event was read again
    log = NatsStateLog(js, await open_bucket(js, 1))
    state = (await log.memory_states("acme", ["m1"]))["m1"]
    assert state.memory is not None
    assert (state.memory.content, state.version) == ("two", second)


async def removed(js: JetStreamContext, source: str, target: str, origin: str) -> int:
    msg = events_pb2.RelationRemoved(
        envelope=events_pb2.Envelope(tenant="acme"),
        source_id=source,
        target_id=target,
        type="RELATES_TO",
        origin=origin,
    )
    ack = await js.publish(jsm.subject("acme", jsm.RELATION_REMOVED), msg.SerializeToString())
    return int(ack.seq)


async def test_a_system_removal_keeps_a_user_edge_kept_in_an_earlier_batch(
    js: JetStreamContext,
) -> None:
    await keep(js, await related(js, "acme", "m1", "m2"))  # a user edge, kept
    await removed(js, "m1", "m2", "system")  # the graph leaves it: so does the state
    await removed(js, "m3", "m4", "system")  # no edge: a removed state
    last = await removed(js, "m5", "m6", "")  # "" reads as a user removal
    await keep(js, last)

    log = NatsStateLog(js, await open_bucket(js, 1))
    pages = [p async for p in log.records("acme", RELATIONS, 0, await log.last_sequence(), 10)]
    kept = {
        (x.record.relation.source_id, x.record.removed)  # type: ignore[union-attr]
        for p in pages
        for x in p
    }
    assert kept == {("m1", False), ("m3", True), ("m5", True)}
