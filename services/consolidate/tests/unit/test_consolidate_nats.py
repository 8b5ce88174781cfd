"""The worker's NATS adapters against a real nats-server: checkpoints in KV with
compare-and-set, the tenants of the log, the events it publishes, and a request that
travels from the log to a finished run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from engram.common.v1 import common_pb2
from engram.events.v1 import events_pb2
from engram_consolidate.adapters.checkpoints import KvCheckpoints, open_bucket
from engram_consolidate.adapters.log import (
    STREAM_CONSOLIDATE,
    LogEvents,
    LogMarks,
    LogTenants,
    ensure_request_stream,
)
from engram_consolidate.bootstrap import build
from engram_consolidate.config import Settings
from engram_consolidate.consumer import REASON_HEADER, RequestConsumer
from engram_consolidate.mapping import CONSOLIDATE_EVENT
from engram_consolidate.service import FenceLost, Key, PassName, RunRecord, RunState
from engram_core.errors import FailedPrecondition
from engram_core.model import Memory, Relation
from engram_platform import jetstream as jsm
from engram_platform.convert import ts_to_proto
from engram_platform.settings import NatsSettings
from engram_testing.nats_server import NatsServer
from engram_testing.processes import log_connection, running_worker, worker_settings
from engram_testing.waiting import until

if TYPE_CHECKING:
    from conftest import World

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def js(nats_server: NatsServer) -> AsyncIterator[JetStreamContext]:
    async with log_connection(nats_server) as js:
        await ensure_request_stream(js, NatsSettings(url=nats_server.url))
        yield js


async def test_checkpoints_compare_and_set(js: JetStreamContext) -> None:
    checkpoints = KvCheckpoints(await open_bucket(js, 1))
    key = Key("acme", PassName.DECAY)
    assert await checkpoints.get(key) is None
    assert await checkpoints.keys() == set()

    record = RunRecord(
        key,
        "r1",
        RunState.RUNNING,
        now=NOW,
        started_at=NOW,
        cursor="c",
        input_mark=41,
        checked_at=NOW - timedelta(hours=1),
        full_at=NOW - timedelta(hours=20),
    )
    first = await checkpoints.put(record, None)
    with pytest.raises(FenceLost):
        await checkpoints.put(record, None)  # created by someone else meanwhile
    second = await checkpoints.put(record, first)
    with pytest.raises(FenceLost):
        await checkpoints.put(record, first)  # a stale holder

    got = await checkpoints.get(key)
    assert got == (record, second)
    dry = Key("acme", PassName.CLUSTER, dry_run=True)
    await checkpoints.put(RunRecord(dry), None)
    assert await checkpoints.keys() == {key, dry}
    # The bucket is opened, not created, the second time.
    assert await KvCheckpoints(await open_bucket(js, 1)).get(key) == (record, second)


async def test_a_bucket_replica_count_the_server_refuses_names_the_setting(
    js: JetStreamContext,
) -> None:
    # This server is not clustered: three replicas are refused, for a new bucket and for
    # one that exists, whose records stay.
    with pytest.raises(FailedPrecondition, match=r"NATS__STREAM_REPLICAS: .*3 replica.*clustered"):
        await open_bucket(js, 3)
    checkpoints = KvCheckpoints(await open_bucket(js, 1))
    record = RunRecord(Key("acme", PassName.DECAY), "r1", RunState.RUNNING, now=NOW)
    revision = await checkpoints.put(record, None)
    with pytest.raises(FailedPrecondition, match=r"NATS__STREAM_REPLICAS: .*KV_"):
        await open_bucket(js, 3)
    assert await KvCheckpoints(await open_bucket(js, 1)).get(record.key) == (record, revision)


async def test_tenants_come_from_the_memory_stream(js: JetStreamContext) -> None:
    for n, tenant in enumerate(["acme", "globex", "acme"]):
        await jsm.publish(js, jsm.subject(tenant, jsm.MEMORY_STORED), b"", msg_id=f"m{n}")
    await jsm.publish(js, jsm.subject("initech", jsm.MEMORY_DELETED), b"", msg_id="d")
    assert await LogTenants(js).tenants() == {"acme", "globex"}


async def test_a_tenants_mark_is_its_newest_event_once_ingest_applied_it(
    js: JetStreamContext,
) -> None:
    marks = LogMarks(js)
    assert await marks.applied_mark("acme") == 0  # no event yet
    sub = await js.pull_subscribe(
        "",
        durable=jsm.DURABLE_INGEST,
        stream=jsm.STREAM_MEMORY,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT),
    )
    await jsm.publish(js, jsm.subject("acme", jsm.MEMORY_STORED), b"", msg_id="m1")
    await jsm.publish(js, jsm.subject("globex", jsm.MEMORY_STORED), b"", msg_id="m2")
    await jsm.publish(js, jsm.subject("acme", jsm.RELATION_ADDED), b"", msg_id="r3")
    assert await marks.applied_mark("acme") == 0  # logged, not applied
    first, second, third = await sub.fetch(3, timeout=5)
    await first.ack_sync()
    await second.ack_sync()
    # Ingest has applied globex's only event, but not acme's newest (a relation).
    assert (await marks.applied_mark("globex"), await marks.applied_mark("acme")) == (2, 0)
    await third.ack_sync()
    assert await marks.applied_mark("acme") == 3


def _written(event: str, id_: str) -> bytes:
    memory = events_pb2.MemoryStored(memory=common_pb2.Memory(id=id_, content="x"))
    if event == jsm.MEMORY_STORED:
        return memory.SerializeToString()
    return events_pb2.MemoryUpdated(memory=memory.memory).SerializeToString()


async def test_the_memories_written_between_two_positions_of_a_tenant(
    js: JetStreamContext,
) -> None:
    log = [
        ("acme", jsm.MEMORY_STORED, _written(jsm.MEMORY_STORED, "a1")),  # 1
        ("acme", jsm.MEMORY_STORED, _written(jsm.MEMORY_STORED, "a2")),  # 2
        ("globex", jsm.MEMORY_STORED, _written(jsm.MEMORY_STORED, "g1")),  # 3
        ("acme", jsm.RELATION_ADDED, b""),  # 4
        ("acme", jsm.MEMORY_UPDATED, _written(jsm.MEMORY_UPDATED, "a1")),  # 5
        ("acme", jsm.MEMORY_STORED, _written(jsm.MEMORY_STORED, "a3")),  # 6
        ("acme", jsm.MEMORY_DELETED, b""),  # 7
        ("acme", jsm.MEMORY_STORED, _written(jsm.MEMORY_STORED, "a4")),  # 8
    ]
    for n, (tenant, event, data) in enumerate(log, start=1):
        await jsm.publish(js, jsm.subject(tenant, event), data, msg_id=f"e{n}")
    marks = LogMarks(js)
    assert await marks.written_ids("acme", 1, 6, 100) == ["a2", "a1", "a3"]
    assert await marks.written_ids("acme", 0, 8, 100) == ["a1", "a2", "a3", "a4"]
    assert await marks.written_ids("acme", 6, 6, 100) == []
    assert await marks.written_ids("acme", 7, 100, 100) == ["a4"]  # to the end
    assert await marks.written_ids("globex", 3, 8, 100) == []
    assert await marks.written_ids("acme", 0, 8, 4) is None  # five events: over the limit
    assert await marks.written_ids("acme", 0, 8, 5) == ["a1", "a2", "a3", "a4"]
    consumers = await js.consumers_info(jsm.STREAM_MEMORY)
    assert not consumers  # each read's consumer is gone
    await js.purge_stream(jsm.STREAM_MEMORY, seq=3)  # a retention limit dropped 1 and 2
    assert await marks.written_ids("acme", 0, 8, 100) is None  # not all there: full run
    assert await marks.written_ids("acme", 2, 8, 100) == ["a1", "a3", "a4"]


async def test_events_are_the_gateways_and_a_repeated_id_is_dropped(js: JetStreamContext) -> None:
    events = LogEvents(js, 5.0)
    edge = Relation("a", "b", "SIMILAR_TO", 0.9, origin="system", created_at=NOW)
    assert await events.relation_added("acme", edge, "11111111-1111-5111-8111-111111111111")
    assert not await events.relation_added("acme", edge, "11111111-1111-5111-8111-111111111111")
    memory = Memory(id="m", tenant="acme", content="x", archived=True)
    assert await events.updated("acme", memory, ["archived"], "22222222-2222-5222-8222-2222")
    info = await js.stream_info(jsm.STREAM_MEMORY)
    assert info.state.messages == 2
    raw = await js.get_msg(jsm.STREAM_MEMORY, info.state.first_seq)
    added = events_pb2.RelationAdded.FromString(raw.data or b"")
    assert raw.subject == "engram.acme.relation_added.v1"
    assert (added.envelope.event_id, added.relation.origin) == (
        "11111111-1111-5111-8111-111111111111",
        "system",
    )


def request(tenant: str, run_id: str, passes: list[str], dry_run: bool = False) -> bytes:
    return events_pb2.ConsolidateRequested(
        envelope=events_pb2.Envelope(event_id=run_id, tenant=tenant, occurred_at=ts_to_proto(NOW)),
        passes=passes,
        dry_run=dry_run,
    ).SerializeToString()


async def test_a_request_on_the_log_becomes_a_finished_run(
    nats_server: NatsServer, js: JetStreamContext, world: World
) -> None:
    for n in range(5):
        await world.put(
            Memory(
                id=f"00000000-0000-7000-8000-{n:012d}",
                tenant=world.tenant,
                content=f"m{n}",
                timestamp=NOW - timedelta(days=30 * n),
            )
        )
    settings = worker_settings(Settings, nats_server, page_size=2)
    # Only the request runs: scheduled passes would take the two slots first and hold the
    # request back for as long as they take (at half duty, on a busy disk, seconds).
    off = dict.fromkeys(
        ("decay_interval_s", "associate_interval_s", "cluster_interval_s", "forget_interval_s"),
        0.0,
    )
    settings = settings.model_copy(update={"schedule": settings.schedule.model_copy(update=off)})
    kv = KvCheckpoints(await open_bucket(js, 1))
    consolidate = build(
        settings,
        vector=world.vector,
        lexical=world.lexical,
        graph=world.graph,
        events=LogEvents(js, 5.0),
        checkpoints=kv,
        tenants=LogTenants(js),
    )
    subject = jsm.subject(world.tenant, CONSOLIDATE_EVENT)
    await jsm.publish(js, subject, request(world.tenant, "run-7", ["decay"]), msg_id="run-7")
    await jsm.publish(js, subject, b"\xff", msg_id="junk")
    stop = asyncio.Event()
    scheduler = asyncio.create_task(consolidate.scheduler.run(stop))
    try:

        def make(nc: object, js_: JetStreamContext) -> RequestConsumer:
            return RequestConsumer(nc, js_, consolidate.scheduler, settings)  # type: ignore[arg-type]

        async with running_worker(settings.nats, make, "consolidate-requests-test"):

            async def finished() -> bool:
                got = await kv.get(Key(world.tenant, PassName.DECAY))
                return got is not None and got[0].state is RunState.SUCCEEDED

            await until(finished)
    finally:
        stop.set()
        await asyncio.wait_for(scheduler, 10)
        await consolidate.close()

    got = await kv.get(Key(world.tenant, PassName.DECAY))
    assert got is not None
    record = got[0]
    assert (record.run_id, record.done, record.total) == ("run-7", 5, 5)
    assert {c.kind: c.count for c in record.changes} == {"relevance": 5}
    assert len(world.vector.written) == 5
    # The request is consumed (a work queue); the junk went to the dead letters.
    info = await js.stream_info(STREAM_CONSOLIDATE)
    assert info.state.messages == 0
    dead = await js.get_msg(jsm.STREAM_DEADLETTER, 1)
    assert dead.headers is not None
    assert "undecodable" in dead.headers[REASON_HEADER]
