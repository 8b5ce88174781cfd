"""Consolidation end to end on the embedded stack: AdminService → the log → the consolidate
worker → the three stores, and a worker killed in the middle of a pass.

The module restarts the stack's consolidate worker with its schedule off, so only the
runs these tests ask for happen, and leaves it so: restarted with its schedule on, the
worker would at once run the passes due for this tenant (cluster had never run) and
write MetaPatterns under the suites that follow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.vector import VectorClient
from engram_core import relevance
from engram_core.model import Memory
from engram_platform.convert import memory_from_proto, ts_from_proto
from engram_platform.grpc_client import open_channel
from engram_testing.devstack import DevStack
from engram_testing.e2e import AUTH, wait_for_watermark

TENANT = "default"  # the dev token's
QUIET = {  # no scheduled runs: the tests decide what runs
    "ENGRAM_CONSOLIDATE_SCHEDULE__DECAY_INTERVAL_S": "0",
    "ENGRAM_CONSOLIDATE_SCHEDULE__ASSOCIATE_INTERVAL_S": "0",
    "ENGRAM_CONSOLIDATE_SCHEDULE__CLUSTER_INTERVAL_S": "0",
}
DECAY = admin_pb2.CONSOLIDATION_MODE_DECAY


def restart_worker(stack: DevStack, env: dict[str, str]) -> None:
    stack.stop_service("consolidate")
    stack.env = env
    stack.start_service("consolidate")


@pytest.fixture(scope="module")
def quiet_worker(stack: DevStack) -> DevStack:
    if any(stack.env.get(k) != v for k, v in QUIET.items()):
        restart_worker(stack, {**stack.env, **QUIET})
    return stack


@dataclass
class Api:
    memory: gateway_pb2_grpc.MemoryServiceStub
    admin: admin_pb2_grpc.AdminServiceStub


@pytest.fixture
async def api(quiet_worker: DevStack) -> AsyncIterator[Api]:
    async with grpc.aio.insecure_channel(quiet_worker.gateway_address) as channel:
        yield Api(
            gateway_pb2_grpc.MemoryServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        )


def ts(dt: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(dt)
    return out


async def store_aged(api: Api, tag: str, days: list[float]) -> list[str]:
    """One memory per age, stored now with a timestamp that many days back; applied."""
    now = datetime.now(UTC)
    memories = [
        common_pb2.MemoryInput(
            content=f"{tag}: note number {n} about the quarterly report",
            tags=[tag],
            importance=0.5,
            timestamp=ts(now - timedelta(days=d)),
        )
        for n, d in enumerate(days)
    ]
    reply = await api.memory.StoreBatch(
        gateway_pb2.StoreBatchRequest(memories=memories), metadata=AUTH
    )
    await wait_for_watermark(api.memory, reply.sequence)
    return list(reply.ids)


async def pass_status(api: Api, mode: int = DECAY) -> admin_pb2.PassStatus:
    reply = await api.admin.ConsolidationStatus(
        admin_pb2.ConsolidationStatusRequest(), metadata=AUTH
    )
    return next(p for p in reply.passes if p.mode == mode)


async def wait_run(
    api: Api, run_id: str, state: int = admin_pb2.PASS_STATE_SUCCEEDED, mode: int = DECAY
) -> admin_pb2.PassRun:
    for _ in range(600):
        run = (await pass_status(api, mode)).last_run
        if run.run_id == run_id and run.state == state:
            return run
        if run.run_id == run_id and run.state == admin_pb2.PASS_STATE_FAILED:
            raise AssertionError(f"run {run_id} failed: {run.error}")
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} not in state {state}: {run}")


async def scores_via_get(api: Api, ids: list[str]) -> list[float]:
    out = []
    for id_ in ids:
        got = await api.memory.Get(gateway_pb2.GetRequest(id=id_), metadata=AUTH)
        out.append(got.memory.relevance_score)
    return out


async def scores_in_stores(stack: DevStack, ids: list[str]) -> dict[str, dict[str, float]]:
    """relevance_score of ``ids`` as each store holds it (a scan of the tenant)."""
    out: dict[str, dict[str, float]] = {}
    for name, make in (
        ("vector", VectorClient),
        ("lexical", LexicalClient),
        ("graph", GraphClient),
    ):
        channel = open_channel(f"127.0.0.1:{stack.ports[name]}")
        client = make(channel)
        found: dict[str, float] = {}
        cursor: str | None = None
        try:
            while True:
                page = await client.scan(TENANT, cursor, 200)
                found.update((m.id, m.relevance_score) for m in page.memories if m.id in ids)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
        finally:
            await channel.close()
        out[name] = found
    return out


async def test_decay_orders_relevance_by_age_in_every_store(
    api: Api, quiet_worker: DevStack
) -> None:
    ids = await store_aged(api, "suite:decay", [1, 60, 400])
    # Ingest gives each new memory the score of age 0 (same importance → same score).
    initial = await scores_via_get(api, ids)
    assert initial[0] > 0
    assert initial == [initial[0]] * 3

    dry = await api.admin.Consolidate(
        admin_pb2.ConsolidateRequest(mode=DECAY, dry_run=True), metadata=AUTH, timeout=60
    )
    [report] = dry.reports
    assert report.state == admin_pb2.PASS_STATE_SUCCEEDED
    assert {c.kind: c.count for c in report.changes}["relevance"] >= 3
    assert await scores_via_get(api, ids) == initial  # a dry run changes nothing

    started = await api.admin.Consolidate(admin_pb2.ConsolidateRequest(mode=DECAY), metadata=AUTH)
    run = await wait_run(api, started.run_id)
    assert {c.kind: c.count for c in run.changes}["relevance"] >= 3

    new, middle, old = await scores_via_get(api, ids)
    assert new > middle > old > 0
    stores = await scores_in_stores(quiet_worker, ids)
    for name, held in stores.items():
        assert [held[i] for i in ids] == pytest.approx([new, middle, old]), name

    status = await pass_status(api)
    assert status.last_dry_run.run_id == dry.run_id


async def test_associate_links_near_duplicates_through_the_log(api: Api) -> None:
    texts = [
        "Mira fixed the flaky checkout test by pinning the browser version.",
        "Mira fixed the flaky checkout test by pinning the browser version again.",
    ]
    reply = await api.memory.StoreBatch(
        gateway_pb2.StoreBatchRequest(
            memories=[common_pb2.MemoryInput(content=t, tags=["suite:assoc"]) for t in texts]
        ),
        metadata=AUTH,
    )
    await wait_for_watermark(api.memory, reply.sequence)
    mode = admin_pb2.CONSOLIDATION_MODE_ASSOCIATE
    started = await api.admin.Consolidate(admin_pb2.ConsolidateRequest(mode=mode), metadata=AUTH)
    run = await wait_run(api, started.run_id, mode=mode)
    assert {c.kind: c.count for c in run.changes}.get("similar_to_created", 0) >= 1

    # The edges are events: ingest applies them like a client's Associate.
    stats = await api.memory.Stats(gateway_pb2.StatsRequest(), metadata=AUTH)
    await wait_for_watermark(api.memory, stats.last_sequence)
    a, b = reply.ids
    related = await api.memory.Related(gateway_pb2.RelatedRequest(id=a), metadata=AUTH)
    assert (b, "SIMILAR_TO") in [(r.memory.id, r.type) for r in related.related]


async def test_scheduled_associate_runs_skip_an_unchanged_tenant_and_read_only_what_changed(
    api: Api, quiet_worker: DevStack
) -> None:
    stack = quiet_worker
    calm = dict(stack.env)
    mode = admin_pb2.CONSOLIDATION_MODE_ASSOCIATE
    every_2s = {
        **calm,
        "ENGRAM_CONSOLIDATE_SCHEDULE__ASSOCIATE_INTERVAL_S": "2",
        "ENGRAM_CONSOLIDATE_SCHEDULE__TICK_S": "0.5",
    }
    before = (await pass_status(api, mode)).last_run.run_id
    restart_worker(stack, every_2s)
    try:
        skipped = None
        for _ in range(300):  # a run or two (the tenant moved since), then skips
            run = (await pass_status(api, mode)).last_run
            if run.run_id != before and run.HasField("unchanged_checked_at"):
                skipped = run
                break
            await asyncio.sleep(0.1)
        assert skipped is not None, "no scheduled associate run was skipped"
        assert skipped.state == admin_pb2.PASS_STATE_SUCCEEDED
        assert ts_from_proto(skipped.unchanged_checked_at) > ts_from_proto(skipped.finished_at)

        # A new memory moves the tenant: the next due run runs.
        reply = await api.memory.Store(
            gateway_pb2.StoreRequest(
                memory=common_pb2.MemoryInput(content="Mira pinned the browser version.")
            ),
            metadata=AUTH,
        )
        await wait_for_watermark(api.memory, reply.sequence)
        for _ in range(300):
            run = (await pass_status(api, mode)).last_run
            if run.run_id != skipped.run_id and run.state == admin_pb2.PASS_STATE_SUCCEEDED:
                break
            await asyncio.sleep(0.1)
        assert run.run_id != skipped.run_id
        assert ts_from_proto(run.started_at) > ts_from_proto(skipped.unchanged_checked_at)
        # Within a day of the last full run: it read only what was written since.
        assert run.incremental_after > 0
    finally:
        restart_worker(stack, calm)


async def test_a_worker_killed_mid_pass_resumes_without_double_effects(
    api: Api, quiet_worker: DevStack
) -> None:
    stack = quiet_worker
    ids = await store_aged(api, "suite:crash", [float(d) for d in range(0, 400, 10)])  # 40
    calm = dict(stack.env)
    slow = {**calm, "ENGRAM_CONSOLIDATE_PAGE_SIZE": "5", "ENGRAM_CONSOLIDATE_PAGE_PAUSE_S": "0.4"}
    restart_worker(stack, slow)
    try:
        started = await api.admin.Consolidate(
            admin_pb2.ConsolidateRequest(mode=DECAY), metadata=AUTH
        )
        for _ in range(300):  # two pages checkpointed, more to go
            run = (await pass_status(api)).last_run
            if run.run_id == started.run_id and run.done >= 10:
                break
            await asyncio.sleep(0.05)
        assert run.state == admin_pb2.PASS_STATE_RUNNING
        assert run.done < run.total

        proc = stack.processes["consolidate"]
        proc.popen.kill()  # SIGKILL: no goodbye, no lease release, no last checkpoint
        proc.popen.wait()
        stack.stop_service("consolidate")
        left = (await pass_status(api)).last_run
        assert (left.run_id, left.state) == (started.run_id, admin_pb2.PASS_STATE_RUNNING)

        stack.start_service("consolidate")
        done = await wait_run(api, started.run_id)
    finally:
        restart_worker(stack, calm)

    assert done.resumes == 1
    assert done.done == done.total  # every memory once: finished pages were not read again
    changed = {c.kind: c.count for c in done.changes}["relevance"]
    assert len(ids) <= changed <= done.total
    # Every score is the formula at the run's clock, written once whatever the crash; a
    # score already within epsilon of it (the newest memories' from ingest) is left alone.
    now = ts_from_proto(done.started_at)
    epsilon = relevance.DecaySettings().epsilon
    for id_ in ids:
        got = await api.memory.Get(gateway_pb2.GetRequest(id=id_), metadata=AUTH)
        memory: Memory = memory_from_proto(got.memory)
        # As the run saw it: before these Gets counted as accesses.
        unread = replace(memory, last_accessed=None, access_count=0)
        expected = relevance.relevance_score(unread, 0, now)
        assert memory.relevance_score == pytest.approx(expected, abs=epsilon)
