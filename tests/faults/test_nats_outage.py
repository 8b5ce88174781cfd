"""nats-server stopped mid-ingest and started again on the same store: no acknowledged store
is lost, a store while the log is down is refused with UNAVAILABLE (never a false OK), and
recall without min_sequence keeps answering."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.faults import (
    AUTH_A,
    TENANT_A,
    Figures,
    Stub,
    read_back_s,
    settle_counts,
    store_one,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

CLIENTS = 4
RECALLERS = 4
BEFORE_S, DOWN_S, AFTER_S = 5.0, 10.0, 5.0
RECALL_DEADLINE_S = 3.0


@dataclass
class Outage:
    """When the log was down (monotonic), and what the clients saw."""

    down_at: float = float("inf")
    up_at: float = float("inf")
    acked: set[str] = field(default_factory=set)
    codes: Counter[str] = field(default_factory=Counter)
    false_ok: int = 0
    asked: int = 0
    answered: int = 0

    def while_down(self, t0: float, t1: float) -> bool:
        return t0 > self.down_at and t1 < self.up_at


async def _storer(gateway: Stub, client: int, outage: Outage, done: asyncio.Event) -> None:
    n = 0
    while not done.is_set():
        n += 1
        content = f"outage store {n} of client {client}"
        t0 = time.monotonic()
        try:
            await store_one(gateway, AUTH_A, content)
        except grpc.aio.AioRpcError as err:
            outage.codes[err.code().name] += 1
            await asyncio.sleep(0.05)
            continue
        outage.acked.add(content)
        outage.codes["OK"] += 1
        if outage.while_down(t0, time.monotonic()):
            outage.false_ok += 1


async def _recaller(gateway: Stub, who: int, outage: Outage, done: asyncio.Event) -> None:
    n = 0
    while not done.is_set():
        n += 1
        t0 = time.monotonic()
        down = t0 > outage.down_at
        try:  # a new query each time: the recall cache must not answer for the stack
            await gateway.Recall(
                gateway_pb2.RecallRequest(query=f"outage store {n} asked by {who}", limit=5),
                metadata=AUTH_A,
                timeout=RECALL_DEADLINE_S,
            )
            ok = True
        except grpc.aio.AioRpcError:
            ok = False
        if down and outage.while_down(t0, time.monotonic()):
            outage.asked += 1
            outage.answered += ok
        await asyncio.sleep(0.2)


async def _outage(stack: DevStack, outage: Outage) -> None:
    await asyncio.sleep(BEFORE_S)
    await asyncio.to_thread(stack.stop_nats)
    outage.down_at = time.monotonic()  # the server has exited: nothing can be persisted
    await asyncio.sleep(DOWN_S)
    outage.up_at = time.monotonic()
    await asyncio.to_thread(stack.start_nats)
    await asyncio.sleep(AFTER_S)


async def test_nats_stopped_and_restarted_mid_ingest(
    fault_stack: DevStack, figures: Figures
) -> None:
    outage = Outage()
    done = asyncio.Event()
    async with grpc.aio.insecure_channel(fault_stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        load = [asyncio.create_task(_storer(gateway, c, outage, done)) for c in range(CLIENTS)]
        load += [asyncio.create_task(_recaller(gateway, r, outage, done)) for r in range(RECALLERS)]
        await _outage(fault_stack, outage)
        done.set()
        await asyncio.gather(*load)
        memory_id, seq = await store_one(gateway, AUTH_A, "after the outage")
        stall = await read_back_s(gateway, AUTH_A, memory_id, seq, 120.0)
        counts = await settle_counts(fault_stack, TENANT_A, outage.acked, timeout_s=120)
    lost = max(len(outage.acked) - c.found for c in counts.values())
    refused = sum(n for code, n in outage.codes.items() if code != "OK")
    wrong_codes = refused - outage.codes["UNAVAILABLE"]
    figures.record(
        "nats_outage",
        acked=len(outage.acked),
        refused=refused,
        not_unavailable=wrong_codes,
        false_ok=outage.false_ok,
        lost=lost,
        duplicates=sum(c.duplicates for c in counts.values()),
        wedged=int(stall is None),
        recall_answered_down=outage.answered,
        recall_asked_down=outage.asked,
        ryw_after_restart_s=stall if stall is not None else -1.0,
    )
    assert lost == 0, f"{lost} acknowledged stores missing: {counts}"
    assert outage.false_ok == 0
    assert refused > 0, "no store was refused while the log was down"
    assert wrong_codes == 0, f"refusals other than UNAVAILABLE: {dict(outage.codes)}"
    assert outage.asked > 0
    assert outage.answered == outage.asked, (
        f"recall without min_sequence answered {outage.answered} of {outage.asked} "
        "while the log was down"
    )
    assert stall is not None
