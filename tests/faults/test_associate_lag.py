"""Graph behind vector during Associate (graph killed, or hung): once graph is back, the
acknowledged edge arrives; a late endpoint is waited for, never taken for deleted."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.faults import AUTH_A, Figures, Stub, store_one

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

BEHIND_S = 10.0  # how long graph stays away after the Associate is acknowledged
EDGE_BOUND_S = 30.0  # the edge must be found this long after graph is back


async def _associate(gateway: Stub, source: str, target: str) -> int:
    """Associate once the gateway can see both endpoints (retried while it cannot)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            reply = await gateway.Associate(
                gateway_pb2.AssociateRequest(source_id=source, target_id=target, type="LEADS_TO"),
                metadata=AUTH_A,
                timeout=10,
            )
            return reply.sequence
        except grpc.aio.AioRpcError as err:
            if time.monotonic() > deadline:
                raise AssertionError(f"Associate never accepted: {err.code().name}") from err
            await asyncio.sleep(0.5)


async def _edge_after_s(gateway: Stub, source: str, target: str) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < EDGE_BOUND_S:
        try:
            reply = await gateway.Related(
                gateway_pb2.RelatedRequest(id=source), metadata=AUTH_A, timeout=5
            )
            if any(r.memory.id == target for r in reply.related):
                return time.monotonic() - started
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.5)
    return None


@pytest.mark.parametrize("fault", ["kill", "hang"])
async def test_edge_arrives_when_graph_catches_up(
    fault_stack: DevStack, figures: Figures, fault: str
) -> None:
    async with grpc.aio.insecure_channel(fault_stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        if fault == "kill":
            fault_stack.kill_service("graph")
        else:
            fault_stack.pause_service("graph")
        a, _ = await store_one(gateway, AUTH_A, "Lena adopted a grey cat")
        b, _ = await store_one(gateway, AUTH_A, "Lena named the cat Miso")
        await _associate(gateway, a, b)
        await asyncio.sleep(BEHIND_S)
        if fault == "kill":
            await asyncio.to_thread(fault_stack.start_service, "graph")
        else:
            fault_stack.resume_service("graph")
        after = await _edge_after_s(gateway, a, b)
    figures.record(
        f"associate_graph_{fault}",
        edge_found=int(after is not None),
        edge_after_s=after if after is not None else -1.0,
        lost=int(after is None),
    )
    assert after is not None, f"the acknowledged edge never arrived after graph's {fault}"
