"""Two tenants on one stack: no read path or mode of B returns A's memories, B's admin
cannot read A's status, and nothing B sees moves with A's write volume."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterator

import grpc
import pytest
from google.protobuf.message import Message

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.faults import (
    AUTH_A,
    AUTH_B,
    TENANT_A,
    Figures,
    Stub,
    read_back_s,
    start_fault_stack,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

MARK = "ALPHAONLY"  # in every one of A's memories, in none of B's
TOPICS = ("billing ledger Postgres migration", "Alps hiking trip", "Berlin office chairs")
PEOPLE = ("Priya", "Lena", "Goran")


@pytest.fixture(scope="module")
def tenant_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    running = start_fault_stack(tmp_path_factory.mktemp("tenants") / "home")
    yield running
    running.stop()


async def _store_both(gateway: Stub) -> list[str]:
    """The same people and topics for both tenants, related within each; A's ids."""
    ids: dict[str, list[str]] = {}
    for meta, who in ((AUTH_A, "a"), (AUTH_B, "b")):
        mark = MARK if who == "a" else "bravo"
        memories = [
            common_pb2.MemoryInput(
                content=f"{p} {t} {mark} note {i}",
                tags=["project:atlas", f"person:{p.lower()}"],
            )
            for i, (p, t) in enumerate(itertools.product(PEOPLE, TOPICS))
        ]
        reply = await gateway.StoreBatch(
            gateway_pb2.StoreBatchRequest(memories=memories), metadata=meta
        )
        ids[who] = list(reply.ids)
        assert await read_back_s(gateway, meta, reply.ids[1], reply.sequence, 60) is not None
        assoc = await gateway.Associate(
            gateway_pb2.AssociateRequest(
                source_id=reply.ids[0], target_id=reply.ids[1], type="RELATES_TO"
            ),
            metadata=meta,
        )
        assert await read_back_s(gateway, meta, reply.ids[0], assoc.sequence, 60) is not None
    return ids["a"]


def _recalls(a_ids: list[str]) -> Iterator[gateway_pb2.RecallRequest]:
    """Every mode × fusion, with and without expansion; pinned focus on A's ids; trending
    in each sort; several queries; decomposition; every state mode."""
    modes = gateway_pb2.RecallMode.values()
    fusions = gateway_pb2.Fusion.values()
    for mode, fusion, expand in itertools.product(modes, fusions, (False, True)):
        yield gateway_pb2.RecallRequest(
            query=f"{MARK} Priya billing ledger Postgres",
            limit=50,
            mode=mode,
            fusion=fusion,
            expansion=gateway_pb2.Expansion(relations=expand, entities=expand),
            include_archived=expand,
        )
    yield gateway_pb2.RecallRequest(
        query="Priya billing", limit=50, focus=common_pb2.Focus(ids=a_ids[:5], pinned=True)
    )
    for sort in ("", "importance", "recency", "relevance", "access_count"):
        yield gateway_pb2.RecallRequest(query="", limit=100, sort=sort)
    yield gateway_pb2.RecallRequest(
        query="Priya", queries=["Lena Alps", "Goran Berlin", MARK], limit=50, decompose=True
    )
    for state in common_pb2.StateMode.values():
        yield gateway_pb2.RecallRequest(query=MARK, limit=50, state_mode=state)


def _leaks(reply: Message, a_ids: list[str]) -> int:
    data = reply.SerializeToString()
    return int(MARK.encode() in data or any(i.encode() in data for i in a_ids))


def _read_paths(gateway: Stub, a_ids: list[str]) -> Iterator[Awaitable[Message]]:
    """Each read of B, started when the consumer takes it."""
    for request in _recalls(a_ids):
        yield gateway.Recall(request, metadata=AUTH_B, timeout=10)
    for memory_id in a_ids[:3]:
        yield gateway.Get(gateway_pb2.GetRequest(id=memory_id), metadata=AUTH_B, timeout=10)
        for depth in (1, 2, 3):
            rel = gateway_pb2.RelatedRequest(id=memory_id, depth=depth, limit=100)
            yield gateway.Related(rel, metadata=AUTH_B, timeout=10)
    yield gateway.Stats(gateway_pb2.StatsRequest(), metadata=AUTH_B)


async def test_no_read_path_returns_another_tenants_memory(
    tenant_stack: DevStack, figures: Figures
) -> None:
    leaks, asked, refused = 0, 0, 0
    async with grpc.aio.insecure_channel(tenant_stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        a_ids = await _store_both(gateway)
        control = gateway_pb2.RecallRequest(query=f"{MARK} Priya", limit=5)
        # The detector sees A's memories where they belong: A's own recall.
        assert _leaks(await gateway.Recall(control, metadata=AUTH_A), a_ids)
        for call in _read_paths(gateway, a_ids):
            asked += 1
            try:
                leaks += _leaks(await call, a_ids)
            except grpc.aio.AioRpcError:
                refused += 1  # NOT_FOUND for A's ids is the promise, not a leak
        stats = await gateway.Stats(gateway_pb2.StatsRequest(), metadata=AUTH_B)
    counted_a = int(any(n != len(PEOPLE) * len(TOPICS) for n in stats.counts.values()))
    figures.record("cross_tenant_reads", reads=asked, refused=refused, leaks=leaks + counted_a)
    assert leaks == 0, f"{leaks} replies to B held A's memories"
    assert counted_a == 0, f"B's Stats counts {dict(stats.counts)} include A's memories"


async def test_tenant_admin_cannot_read_or_act_on_another_tenant(
    tenant_stack: DevStack, figures: Figures
) -> None:
    """Other tenants' status and cluster-wide operations need a cluster-admin token."""
    allowed: list[str] = []
    async with grpc.aio.insecure_channel(tenant_stack.gateway_address) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        calls: dict[str, Callable[[], Awaitable[Message]]] = {
            "ConsolidationStatus": lambda: admin.ConsolidationStatus(
                admin_pb2.ConsolidationStatusRequest(tenant=TENANT_A), metadata=AUTH_B
            ),
            "RebuildStatus": lambda: admin.RebuildStatus(
                admin_pb2.RebuildStatusRequest(tenant=TENANT_A), metadata=AUTH_B
            ),
            "Sync": lambda: admin.Sync(
                admin_pb2.SyncRequest(tenant=TENANT_A, dry_run=True), metadata=AUTH_B
            ),
            "Rebuild": lambda: admin.Rebuild(
                admin_pb2.RebuildRequest(store=admin_pb2.STORE_LEXICAL), metadata=AUTH_B
            ),
        }
        for name, call in calls.items():
            try:
                await call()
                allowed.append(name)
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.PERMISSION_DENIED:
                    allowed.append(f"{name}:{err.code().name}")
    figures.record("cross_tenant_admin", admin_allowed=len(allowed))
    assert not allowed, f"tenant B's admin was not refused: {allowed}"


async def test_sequences_do_not_reveal_another_tenants_volume(
    tenant_stack: DevStack, figures: Figures
) -> None:
    async with grpc.aio.insecure_channel(tenant_stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        before = await gateway.Stats(gateway_pb2.StatsRequest(), metadata=AUTH_B)
        batch = [common_pb2.MemoryInput(content=f"A's volume {i}") for i in range(50)]
        await gateway.StoreBatch(gateway_pb2.StoreBatchRequest(memories=batch), metadata=AUTH_A)
        after = await gateway.Stats(gateway_pb2.StatsRequest(), metadata=AUTH_B)
    moved = after.last_sequence - before.last_sequence
    figures.record("cross_tenant_volume", b_sequence_moved_by_a=moved)
    assert moved == 0, f"B's last_sequence moved by {moved} with A's 50 writes"
