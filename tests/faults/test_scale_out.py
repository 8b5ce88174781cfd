"""Past one replica: three ingest workers on one durable consumer, and two gateways.

Ingest: several tenants store memories under ids of their own and store each id again in
known rounds (each round waits for the one before, so the log holds them in that order).
While they log, the durable is paused; resumed, the backlog is applied by one worker, then
(new ids, the same shape) by three. Afterwards every store holds every id once, at its last
round's content, entity tags and version, however the workers interleaved: what keeps a
memory's order across workers is the stores' version guard (the log sequence), not the
order of delivery. The throughput of each phase (memories applied per second from the
resume) is printed, never asserted: the stores and the workers share two cores.

Gateways: a write through one is read back through the other with its ``min_sequence``
(the watermark is the log's, not a replica's), and a retry with the same idempotency key
through the other stores nothing twice.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import grpc
import nats
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_platform import jetstream as jsm
from engram_testing.devstack import DEV_TOKEN, DevStack, replica
from engram_testing.faults import (
    STORES,
    TENANT_A,
    TENANT_B,
    TOKEN_B,
    Figures,
    Metadata,
    Stub,
    auth,
    scan_store,
    start_fault_stack,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

TENANTS = {TENANT_A: DEV_TOKEN, TENANT_B: TOKEN_B, "tenant-c": "token-c", "tenant-d": "token-d"}
IDS = 250  # per tenant and phase
ROUNDS = 3  # writes of each id, in order
CHUNK = 50  # ids per StoreBatch: a round of them is logged close to the round before
TOOLS = ("Postgres", "Redis", "Kafka")  # one per round: the entity tag moves with it
DRAIN_BOUND_S = 120.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    tokens = ";".join(f"{token}={tenant}:read+write+admin" for tenant, token in TENANTS.items())
    running = start_fault_stack(
        tmp_path_factory.mktemp("scale") / "home", {"ENGRAM_GATEWAY_TOKENS": tokens}
    )
    yield running
    running.stop()


@dataclass
class Expected:
    """Per (tenant, id): the content, the tool and the sequence of its last round."""

    last: dict[tuple[str, str], tuple[str, str, int]] = field(default_factory=dict)
    events: int = 0
    top: int = 0  # the highest sequence logged


def _content(tenant: str, k: int, r: int) -> str:
    return f"{tenant} memory {k}: the service moved to {TOOLS[r]} in round {r}"


async def _log_tenant(gateway: Stub, tenant: str, phase: str, expected: Expected) -> None:
    meta = auth(TENANTS[tenant])
    ids = [str(uuid.uuid4()) for _ in range(IDS)]
    for start in range(0, IDS, CHUNK):
        chunk = list(enumerate(ids))[start : start + CHUNK]
        for r in range(ROUNDS):
            memories = [
                common_pb2.MemoryInput(id=i, content=_content(tenant, k, r), tags=[phase])
                for k, i in chunk
            ]
            reply = await gateway.StoreBatch(
                gateway_pb2.StoreBatchRequest(memories=memories), metadata=meta, timeout=30
            )
            assert reply.failed == 0, [x.message for x in reply.results if x.code]
            for (k, i), result in zip(chunk, reply.results, strict=True):
                expected.last[(tenant, i)] = (_content(tenant, k, r), TOOLS[r], result.sequence)
            expected.events += len(memories)
            expected.top = max(expected.top, reply.sequence)


async def _phase(stack: DevStack, gateway: Stub, phase: str, expected: Expected) -> float:
    """Log the phase's rounds with the durable paused, resume it, and return memories
    applied per second until the watermark passes the last of them."""
    nc = await nats.connect(stack.nats_url)
    try:
        js = nc.jetstream()
        until = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        await js.pause_consumer(jsm.STREAM_MEMORY, jsm.DURABLE_INGEST, until)
        before = expected.events
        await asyncio.gather(*(_log_tenant(gateway, t, phase, expected) for t in TENANTS))
        await js.resume_consumer(jsm.STREAM_MEMORY, jsm.DURABLE_INGEST)
        resumed = time.monotonic()
        while await jsm.watermark(js) < expected.top:
            assert time.monotonic() - resumed < DRAIN_BOUND_S, f"{phase} did not drain"
            await asyncio.sleep(0.05)
        return (expected.events - before) / (time.monotonic() - resumed)
    finally:
        await nc.close()


@dataclass(frozen=True)
class Verdict:
    lost: int  # an id missing from a store
    duplicates: int  # an id a store returns more than once
    out_of_order: int  # an id a store holds at other than its last round


async def _verdict(stack: DevStack, expected: Expected) -> Verdict:
    lost = duplicates = out_of_order = 0
    for tenant in TENANTS:
        wanted = {i: last for (t, i), last in expected.last.items() if t == tenant}
        for store in STORES:
            held = [m for m in await scan_store(stack, store, tenant) if m.id in wanted]
            seen = Counter(m.id for m in held)
            lost += len(wanted) - len(seen)
            duplicates += sum(n - 1 for n in seen.values())
            for m in held:
                content, tool, sequence = wanted[m.id]
                tools = {t for t in TOOLS if f":{t.lower()}" in " ".join(m.tags)}
                if (m.content, tools, m.version) != (content, {tool}, sequence):
                    out_of_order += 1
    return Verdict(lost, duplicates, out_of_order)


def _acked(stack: DevStack) -> int:
    """Events one worker acked, from its /metrics."""
    with urllib.request.urlopen(stack.metrics_url("ingest"), timeout=5) as page:
        text = page.read().decode()
    found = re.search(
        r'^engram_worker_events_total\{[^}]*outcome="acked"[^}]*\} (\S+)$', text, re.M
    )
    return int(float(found.group(1))) if found else 0


async def test_three_ingest_workers_keep_every_memory_once_and_in_order(
    stack: DevStack, figures: Figures
) -> None:
    expected = Expected()
    async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        one = await _phase(stack, gateway, "scale:one", expected)
        with ExitStack() as more:
            workers = [stack, *(more.enter_context(replica(stack, "ingest")) for _ in range(2))]
            shares_before = [_acked(w) for w in workers]
            three = await _phase(stack, gateway, "scale:three", expected)
            shares = [_acked(w) - b for w, b in zip(workers, shares_before, strict=True)]
    verdict = await _verdict(stack, expected)
    figures.record(
        "ingest_three_workers",
        memories=len(expected.last),
        events=expected.events,
        lost=verdict.lost,
        duplicates=verdict.duplicates,
        out_of_order=verdict.out_of_order,
        memories_per_s_1_worker=one,
        memories_per_s_3_workers=three,
        **{f"applied_by_worker_{k}": n for k, n in enumerate(shares, 1)},
    )
    assert verdict == Verdict(0, 0, 0)
    assert all(n > 0 for n in shares), f"a worker applied nothing: {shares}"


async def test_a_write_through_one_gateway_is_read_through_another(
    stack: DevStack, figures: Figures
) -> None:
    meta: Metadata = auth(DEV_TOKEN)
    with replica(stack, "gateway") as other:
        async with (
            grpc.aio.insecure_channel(stack.gateway_address) as a,
            grpc.aio.insecure_channel(other.gateway_address) as b,
        ):
            first, second = (
                gateway_pb2_grpc.MemoryServiceStub(a),
                gateway_pb2_grpc.MemoryServiceStub(b),
            )
            query = "which kettle does the quartermaster descale"
            await second.Recall(gateway_pb2.RecallRequest(query=query), metadata=meta)  # cached
            memory = common_pb2.MemoryInput(content="the quartermaster descales the kettle")
            stored = await first.Store(
                gateway_pb2.StoreRequest(memory=memory, idempotency_key="kettle-1"), metadata=meta
            )
            started = time.monotonic()
            reply = await second.Recall(
                gateway_pb2.RecallRequest(query=query, min_sequence=stored.sequence),
                metadata=meta,
                timeout=30,
            )
            waited = time.monotonic() - started
            again = await second.Store(
                gateway_pb2.StoreRequest(memory=memory, idempotency_key="kettle-1"), metadata=meta
            )
    found = [r.memory.id for r in reply.results]
    figures.record("gateway_two_replicas", ryw_wait_s=waited)
    assert stored.id in found
    assert (again.id, again.sequence, again.duplicate) == (stored.id, stored.sequence, True)
