"""A store or scoring killed (SIGKILL) or hung (SIGSTOP): every recall during the fault is
answered within its deadline naming the missing stream in `degraded`, or refused with
UNAVAILABLE only when no stream answered.

One stack serves the family: each fault is undone (restart, SIGCONT) before the next."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.faults import AUTH_A, Figures, Stub, read_back_s, start_fault_stack

pytestmark = [pytest.mark.faults]

SERVICES = ("lexical", "graph", "scoring", "vector")
RECALLS = 12
DEADLINE_S = 5.0
PEOPLE = ("Alice", "Bogdan", "Chen", "Dara", "Emeka")
# Default hybrid (graph read for relations and supersession only), rrf and hybrid_graph
# (graph searched as a stream too): a failed graph must be named in each.
# What `degraded` names for each service: default hybrid reads the graph for its
# "relations" and "state" (supersession) steps, not as a stream.
NAMES = {"graph": {"graph", "relations", "state"}}
VARIANTS = (
    (gateway_pb2.FUSION_UNSPECIFIED, gateway_pb2.RECALL_MODE_UNSPECIFIED),
    (gateway_pb2.FUSION_RRF, gateway_pb2.RECALL_MODE_UNSPECIFIED),
    (gateway_pb2.FUSION_UNSPECIFIED, gateway_pb2.RECALL_MODE_HYBRID_GRAPH),
)


@pytest.fixture(scope="module")
def degrade_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    running = start_fault_stack(tmp_path_factory.mktemp("degrade") / "home")
    yield running
    running.stop()


@pytest.fixture
async def gateway(degrade_stack: DevStack) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(degrade_stack.gateway_address) as channel:
        stub = gateway_pb2_grpc.MemoryServiceStub(channel)
        reply = await stub.StoreBatch(
            gateway_pb2.StoreBatchRequest(
                memories=[
                    common_pb2.MemoryInput(content=f"{p} reviewed the release plan number {i}")
                    for i in range(20)
                    for p in PEOPLE
                ]
            ),
            metadata=AUTH_A,
        )
        assert await read_back_s(stub, AUTH_A, reply.ids[0], reply.sequence, 60) is not None
        yield stub


async def _recalls(gateway: Stub, service: str, tally: Counter[str]) -> None:
    for i in range(RECALLS):
        tally["asked"] += 1
        started = time.monotonic()
        try:
            reply = await gateway.Recall(
                gateway_pb2.RecallRequest(
                    query=f"{PEOPLE[i % 5]} release plan {i}",
                    limit=5,
                    fusion=VARIANTS[i % 3][0],
                    mode=VARIANTS[i % 3][1],
                ),
                metadata=AUTH_A,
                timeout=DEADLINE_S,
            )
        except grpc.aio.AioRpcError as err:
            unavailable = err.code() == grpc.StatusCode.UNAVAILABLE
            tally["no_stream" if unavailable else f"failed_{err.code().name}"] += 1
            continue
        late = time.monotonic() - started > DEADLINE_S
        named = bool(NAMES.get(service, {service}) & set(reply.degraded))
        tally["answered" if named and not late else f"unnamed_{'/'.join(reply.degraded)}"] += 1


@pytest.mark.parametrize("fault", ["kill", "hang"])
@pytest.mark.parametrize("service", SERVICES)
async def test_recall_degrades_when_a_service_fails(
    degrade_stack: DevStack, gateway: Stub, figures: Figures, service: str, fault: str
) -> None:
    tally: Counter[str] = Counter()
    if fault == "kill":
        degrade_stack.kill_service(service)
    else:
        degrade_stack.pause_service(service)
    try:
        await _recalls(gateway, service, tally)
    finally:
        if fault == "kill":
            await asyncio.to_thread(degrade_stack.start_service, service)
        else:
            degrade_stack.resume_service(service)
    figures.record(f"degraded_{service}_{fault}", **tally)
    # Only vector + lexical + graph all gone would leave no stream: one down never does.
    assert tally["answered"] == tally["asked"], dict(tally)
