"""kill -9 of the ingest worker during a stream of stores: every acknowledged memory ends up
once in every store, and read-your-writes stalls for seconds, not a whole ack_wait.

The load is paced below ingest's throughput, so a probe's wait is what the crash adds.
Two probes write and read back while it runs: one in another tenant (the promise, at most
RYW_TARGET_S) and one in the loaded tenant (printed). A load faster than ingest would make
the loaded tenant's probe wait for its own backlog too: that is throughput, which this
scenario does not measure (another tenant's backlog is test_backlog's)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.faults import (
    AUTH_A,
    AUTH_B,
    TENANT_A,
    Figures,
    Metadata,
    Stub,
    read_back_s,
    settle_counts,
    store_one,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

TOTAL = 10_000
CLIENTS = 4
BATCH = 100
KILLS = 3
RATE = 250.0  # stores per second over all clients
RYW_TARGET_S = 10.0  # the promise: a crash delays read-your-writes by seconds
RYW_BOUND_S = 120.0  # a probe gives up here (and counts as wedged)


async def _client(gateway: Stub, client: int, acked: set[str], failed: list[int]) -> None:
    began = time.monotonic()
    for k, start in enumerate(range(client * BATCH, TOTAL, CLIENTS * BATCH)):
        # Paced below ingest's throughput: what a probe then waits for is the crash, not a
        # backlog the load would build anyway.
        await asyncio.sleep(max(0.0, began + k * CLIENTS * BATCH / RATE - time.monotonic()))
        contents = [f"crash-load item {i} of client {client}" for i in range(start, start + BATCH)]
        request = gateway_pb2.StoreBatchRequest(
            memories=[common_pb2.MemoryInput(content=c, tags=["fault:crash"]) for c in contents]
        )
        try:
            await gateway.StoreBatch(request, metadata=AUTH_A, timeout=30)
            acked.update(contents)
        except grpc.aio.AioRpcError:  # not acknowledged: not counted as lost if missing
            failed.append(start)


async def _kill_ingest(stack: DevStack, done: asyncio.Event) -> int:
    kills = 0
    while kills < KILLS and not done.is_set():
        await asyncio.sleep(4.0)
        stack.kill_service("ingest")
        kills += 1
        await asyncio.sleep(1.0)
        await asyncio.to_thread(stack.start_service, "ingest")
    return kills


async def _probe_ryw(
    gateway: Stub, auth: Metadata, done: asyncio.Event, stalls: list[float | None]
) -> None:
    """A write then its read-back, over and over while the load and the kills run."""
    n = 0
    while not done.is_set():
        n += 1
        memory_id, seq = await store_one(gateway, auth, f"ryw probe {n}")
        stalls.append(await read_back_s(gateway, auth, memory_id, seq, RYW_BOUND_S))


async def test_kill_ingest_three_times_during_stores(
    fault_stack: DevStack, figures: Figures
) -> None:
    acked: set[str] = set()
    failed: list[int] = []
    stalls: list[float | None] = []
    own: list[float | None] = []  # the loaded tenant's probe: behind its own backlog too
    done = asyncio.Event()
    started = time.monotonic()
    async with grpc.aio.insecure_channel(fault_stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        killer = asyncio.create_task(_kill_ingest(fault_stack, done))
        probes = [
            asyncio.create_task(_probe_ryw(gateway, AUTH_B, done, stalls)),
            asyncio.create_task(_probe_ryw(gateway, AUTH_A, done, own)),
        ]
        await asyncio.gather(*(_client(gateway, c, acked, failed) for c in range(CLIENTS)))
        kills = await killer
        done.set()
        await asyncio.gather(*probes)
        load_s = time.monotonic() - started
        counts = await settle_counts(fault_stack, TENANT_A, acked, timeout_s=180)
    lost = max(len(acked) - c.found for c in counts.values())
    duplicates = sum(c.duplicates for c in counts.values())
    wedged = sum(1 for s in [*stalls, *own] if s is None)
    stall = max((s for s in stalls if s is not None), default=0.0)
    own_stall = max((s for s in own if s is not None), default=0.0)
    figures.record(
        "ingest_kill9",
        acked=len(acked),
        failed_batches=len(failed),
        kills=kills,
        **{f"in_{c.store}": c.found for c in counts.values()},
        lost=lost,
        duplicates=duplicates,
        wedged=wedged,
        ryw_probes=len(stalls),
        ryw_stall_s=stall,
        ryw_stall_with_own_backlog_s=own_stall,
        load_s=load_s,
    )
    assert kills == KILLS
    assert (lost, duplicates, wedged) == (0, 0, 0)
    assert stall <= RYW_TARGET_S, f"read-your-writes stalled {stall:.1f}s after a crash"
