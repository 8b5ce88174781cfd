"""Tenant deletion end to end on the embedded stack: a second tenant stores memories and a
relation, a cluster admin deletes it (after a dry run), and once the tombstone is applied
nothing of it is recalled, got, related or counted, its states are gone from ENGRAM_STATE,
and the first tenant is untouched.

The module restarts the stack's gateway with a token for the second tenant beside the dev
tokens, so the other modules' calls keep working.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_platform import jetstream as jsm
from engram_platform.devstack import DEV_ADMIN_TOKEN, DEV_TOKEN, DevStack
from engram_platform.settings import NatsSettings
from engram_testing.e2e import AUTH, CLUSTER_AUTH, wait_kept

GONE = "tenant-gone"
GONE_AUTH = (("authorization", "Bearer token-gone"),)
TOKENS = (
    f"{DEV_TOKEN}=default:read+write+admin;token-gone={GONE}:read+write+admin;"
    f"{DEV_ADMIN_TOKEN}=*:admin"
)
NOTES = [
    "Rosalind keeps the lighthouse logbook in the blue cabinet",
    "The lighthouse lamp was replaced with an LED array in March",
    "Rosalind's lighthouse shift starts at dusk every Tuesday",
]


@pytest.fixture(scope="module")
def gateway(stack: DevStack) -> DevStack:
    if stack.env.get("ENGRAM_GATEWAY_TOKENS") != TOKENS:
        stack.stop_service("gateway")
        stack.env = {**stack.env, "ENGRAM_GATEWAY_TOKENS": TOKENS}
        stack.start_service("gateway")
    return stack


@dataclass
class Api:
    memory: gateway_pb2_grpc.MemoryServiceStub
    admin: admin_pb2_grpc.AdminServiceStub
    stack: DevStack


@pytest.fixture
async def api(gateway: DevStack) -> AsyncIterator[Api]:
    async with grpc.aio.insecure_channel(gateway.gateway_address) as channel:
        yield Api(
            gateway_pb2_grpc.MemoryServiceStub(channel),
            admin_pb2_grpc.AdminServiceStub(channel),
            gateway,
        )


async def applied(api: Api, auth: tuple[tuple[str, str], ...], sequence: int) -> dict[str, int]:
    """The tenant's counts once its events up to ``sequence`` are applied."""
    for _ in range(300):
        stats = await api.memory.Stats(gateway_pb2.StatsRequest(), metadata=auth)
        if stats.watermark >= sequence:
            return dict(stats.counts)
        await asyncio.sleep(0.1)
    raise AssertionError(f"the watermark did not reach {sequence}")


async def states_of(api: Api, tenant: str) -> int:
    nc, js = await jsm.connect(NatsSettings(url=api.stack.nats_url), "e2e-delete")
    try:
        subjects = f"engram.{tenant}.state.>"
        info = await js.stream_info(jsm.STREAM_STATE, subjects_filter=subjects)
        return sum((info.state.subjects or {}).values())
    finally:
        await nc.close()


async def test_a_deleted_tenant_leaves_nothing_and_the_other_is_untouched(api: Api) -> None:
    mine = await api.memory.Store(
        gateway_pb2.StoreRequest(
            memory=common_pb2.MemoryInput(content="Ottilie keeps the lighthouse keys at home")
        ),
        metadata=AUTH,
    )
    batch = await api.memory.StoreBatch(
        gateway_pb2.StoreBatchRequest(memories=[common_pb2.MemoryInput(content=n) for n in NOTES]),
        metadata=GONE_AUTH,
    )
    ids = list(batch.ids)
    await applied(api, GONE_AUTH, batch.sequence)  # Associate needs both ends stored
    linked = await api.memory.Associate(
        gateway_pb2.AssociateRequest(source_id=ids[0], target_id=ids[2], type="RELATES_TO"),
        metadata=GONE_AUTH,
    )
    assert await applied(api, GONE_AUTH, linked.sequence) == {"vector": 3, "lexical": 3, "graph": 3}
    before = await applied(api, AUTH, mine.sequence)
    await wait_kept(api.stack.nats_url, linked.sequence)
    assert await states_of(api, GONE) == 4  # three memories and the relation

    request = admin_pb2.DeleteTenantRequest(tenant=GONE, dry_run=True)
    dry = await api.admin.DeleteTenant(request, metadata=CLUSTER_AUTH)
    assert {c.store: c.count for c in dry.counts} == {
        "vector": 3,
        "lexical": 3,
        "graph": 3,
        "dead_letters": 0,
    }
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await api.admin.DeleteTenant(admin_pb2.DeleteTenantRequest(tenant=GONE), metadata=AUTH)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED

    request = admin_pb2.DeleteTenantRequest(tenant=GONE, confirm=GONE)
    done = await api.admin.DeleteTenant(request, metadata=CLUSTER_AUTH)
    assert done.sequence > linked.sequence

    assert await applied(api, GONE_AUTH, done.sequence) == {"vector": 0, "lexical": 0, "graph": 0}
    recall = gateway_pb2.RecallRequest(query="lighthouse", min_sequence=done.sequence)
    assert list((await api.memory.Recall(recall, metadata=GONE_AUTH)).results) == []
    for id_ in ids:
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await api.memory.Get(gateway_pb2.GetRequest(id=id_), metadata=GONE_AUTH)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    await wait_kept(api.stack.nats_url, done.sequence)
    assert await states_of(api, GONE) == 0

    # The first tenant keeps its memory, and its counts.
    assert await applied(api, AUTH, mine.sequence) == before
    got = await api.memory.Get(gateway_pb2.GetRequest(id=mine.id), metadata=AUTH)
    assert got.memory.content.startswith("Ottilie")
    kept = await api.memory.Recall(
        gateway_pb2.RecallRequest(query="lighthouse keys"), metadata=AUTH
    )
    assert mine.id in [r.memory.id for r in kept.results]

    # The tenant can start over.
    again = await api.memory.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content=NOTES[0])),
        metadata=GONE_AUTH,
    )
    assert await applied(api, GONE_AUTH, again.sequence) == {"vector": 1, "lexical": 1, "graph": 1}
