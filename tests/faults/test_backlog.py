"""One tenant's write backlog and another's single write: the other's read-your-writes
waits for its own write, not for the backlog logged ahead of it.

Tenant A logs BACKLOG stores as fast as the gateway takes them (unpaced, far faster than
ingest applies them), then tenant B stores one memory (or a batch) and reads the last back
with its ``min_sequence``. Ingest applies each tenant's events in order on lanes of their
own, so B's write is taken up beside A's backlog. The bound: B's write is a batch or a few
on a free lane (a few hundred milliseconds), plus the gateway's walk of B's events above
the ack floor (64 a poll), plus the read-back's Recall and Get on a stack busy with A's
backlog; STALL_BOUND_S leaves room for that on a loaded 2-core machine, under the seconds
the backlog takes to drain (printed too, for comparison)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.faults import AUTH_A, AUTH_B, Figures, Stub, read_back_s, store_one

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

BACKLOG = 6_000
BATCH = 100
CLIENTS = 6
STALL_BOUND_S = 3.0
READ_BOUND_S = 120.0  # a read-back gives up here (and counts as wedged)


async def _flood(gateway: Stub) -> tuple[str, int]:
    """A's BACKLOG stores, CLIENTS batches at a time: the id and sequence of its last."""
    last: list[tuple[str, int]] = []

    async def client(c: int) -> None:
        for start in range(c * BATCH, BACKLOG, CLIENTS * BATCH):
            memories = [
                common_pb2.MemoryInput(content=f"backlog item {i} about ledger {i % 7}")
                for i in range(start, start + BATCH)
            ]
            reply = await gateway.StoreBatch(
                gateway_pb2.StoreBatchRequest(memories=memories), metadata=AUTH_A, timeout=30
            )
            last.append((reply.ids[-1], reply.sequence))

    await asyncio.gather(*(client(c) for c in range(CLIENTS)))
    return max(last, key=lambda x: x[1])


async def _b_writes(gateway: Stub, count: int) -> tuple[str, int]:
    if count == 1:
        return await store_one(gateway, AUTH_B, "bravo's one note about the ledger")
    memories = [common_pb2.MemoryInput(content=f"bravo note {i}") for i in range(count)]
    reply = await gateway.StoreBatch(
        gateway_pb2.StoreBatchRequest(memories=memories), metadata=AUTH_B, timeout=30
    )
    return reply.ids[-1], reply.sequence


# One write, and a batch of more events than the gateway's walk looks up in one poll.
@pytest.mark.parametrize("b_count", [1, 200])
async def test_another_tenants_backlog_does_not_hold_a_read_your_writes_wait(
    fault_stack: DevStack, figures: Figures, b_count: int
) -> None:
    async with grpc.aio.insecure_channel(fault_stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        started = time.monotonic()
        a_id, a_seq = await _flood(gateway)
        flood_s = time.monotonic() - started
        b_id, b_seq = await _b_writes(gateway, b_count)
        stall = await read_back_s(gateway, AUTH_B, b_id, b_seq, READ_BOUND_S)
        drained = await read_back_s(gateway, AUTH_A, a_id, a_seq, READ_BOUND_S)
        drain_s = time.monotonic() - started
    figures.record(
        f"tenant_backlog_b{b_count}",
        backlog=BACKLOG,
        b_writes=b_count,
        flood_s=flood_s,
        ryw_stall_s=stall if stall is not None else READ_BOUND_S,
        backlog_drained_s=drain_s,
        wedged=int(stall is None) + int(drained is None),
    )
    assert stall is not None, "B's read-back never came"
    assert drained is not None, "A's backlog never drained"
    assert stall <= STALL_BOUND_S, f"B's write waited {stall:.1f}s behind A's backlog"
