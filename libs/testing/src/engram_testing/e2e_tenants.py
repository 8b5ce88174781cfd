"""Tenant deletion end to end, one check for every stack: a second tenant stores memories and
a relation, a cluster admin deletes it (after a dry run), and once the tombstone is applied
nothing of it is recalled, got or counted, its states are gone from ENGRAM_STATE, and the
dev token's tenant is untouched. tests/e2e runs it on the embedded stack,
tests/integration/e2e on real OpenSearch, Neo4j, Redis and NATS; their gateways know
``GONE_TOKEN`` for the tenant to delete (``tokens``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TypeAlias

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2
from engram_platform import jetstream as jsm
from engram_platform.settings import NatsSettings
from engram_testing.devstack import DEV_ADMIN_TOKEN, DEV_TOKEN, DevStack
from engram_testing.e2e import AUTH, CLUSTER_AUTH, Stub, wait_kept

Metadata = tuple[tuple[str, str], ...]
AdminStub: TypeAlias = "admin_pb2_grpc.AdminServiceAsyncStub"  # exists in the stubs only

GONE_TOKEN = "token-gone"
KEPT_TAG = "suite:tenant-deletion"  # the kept tenant's memory, apart from other suites'
NOTES = [
    "Rosalind keeps the lighthouse logbook in the blue cabinet",
    "The lighthouse lamp was replaced with an LED array in March",
    "Rosalind's lighthouse shift starts at dusk every Tuesday",
]


def gone_tenant(kept: str) -> str:
    """The tenant a stack whose dev token is ``kept``'s deletes (a run of its own)."""
    return f"{kept}-gone"


def with_gone(tokens_setting: str, gone: str) -> str:
    """ENGRAM_GATEWAY_TOKENS ``tokens_setting`` plus GONE_TOKEN for ``gone``."""
    return f"{tokens_setting};{GONE_TOKEN}={gone}:read+write+admin"


def tokens(kept: str, gone: str) -> str:
    """ENGRAM_GATEWAY_TOKENS: the dev token for ``kept``, GONE_TOKEN for ``gone``, and the
    cluster-admin token."""
    return (
        f"{DEV_TOKEN}={kept}:read+write+admin;{GONE_TOKEN}={gone}:read+write+admin;"
        f"{DEV_ADMIN_TOKEN}=*:admin"
    )


@dataclass
class Api:
    memory: Stub
    admin: AdminStub
    stack: DevStack


async def applied(api: Api, who: Metadata, sequence: int) -> dict[str, int]:
    """The tenant's counts once its events up to ``sequence`` are applied."""
    for _ in range(300):
        stats = await api.memory.Stats(gateway_pb2.StatsRequest(), metadata=who)
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


async def check_tenant_deletion(api: Api, gone: str) -> None:
    """Tenant ``gone`` (token GONE_TOKEN) stores and relates, is deleted, leaves nothing;
    the dev token's tenant keeps its memory."""
    gone_auth = (("authorization", f"Bearer {GONE_TOKEN}"),)
    mine, ids, linked, before = await _fill_two_tenants(api, gone, gone_auth)
    done = await _delete_tenant(api, gone, linked.sequence)
    await _check_nothing_left(api, gone, gone_auth, ids, done.sequence)
    await _check_kept(api, mine, before)
    # The tenant can start over.
    again = await api.memory.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content=NOTES[0])),
        metadata=gone_auth,
    )
    assert await applied(api, gone_auth, again.sequence) == {"vector": 1, "lexical": 1, "graph": 1}


async def _fill_two_tenants(
    api: Api, gone: str, gone_auth: Metadata
) -> tuple[gateway_pb2.StoreResponse, list[str], gateway_pb2.AssociateResponse, dict[str, int]]:
    """A memory of the dev token's tenant; three and a relation of ``gone``, all applied."""
    mine = await api.memory.Store(
        gateway_pb2.StoreRequest(
            memory=common_pb2.MemoryInput(
                content="Ottilie keeps the lighthouse keys at home", tags=[KEPT_TAG]
            )
        ),
        metadata=AUTH,
    )
    batch = await api.memory.StoreBatch(
        gateway_pb2.StoreBatchRequest(memories=[common_pb2.MemoryInput(content=n) for n in NOTES]),
        metadata=gone_auth,
    )
    ids = list(batch.ids)
    await applied(api, gone_auth, batch.sequence)  # Associate needs both ends stored
    linked = await api.memory.Associate(
        gateway_pb2.AssociateRequest(source_id=ids[0], target_id=ids[2], type="RELATES_TO"),
        metadata=gone_auth,
    )
    assert await applied(api, gone_auth, linked.sequence) == {"vector": 3, "lexical": 3, "graph": 3}
    before = await applied(api, AUTH, mine.sequence)
    await wait_kept(api.stack.nats_url, linked.sequence)
    assert await states_of(api, gone) == 4  # three memories and the relation
    return mine, ids, linked, before


async def _delete_tenant(api: Api, gone: str, after: int) -> admin_pb2.DeleteTenantResponse:
    """A dry run counts what would go; a tenant token is refused; a cluster admin deletes."""
    request = admin_pb2.DeleteTenantRequest(tenant=gone, dry_run=True)
    dry = await api.admin.DeleteTenant(request, metadata=CLUSTER_AUTH)
    assert {c.store: c.count for c in dry.counts} == {
        "vector": 3,
        "lexical": 3,
        "graph": 3,
        "dead_letters": 0,
    }
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await api.admin.DeleteTenant(admin_pb2.DeleteTenantRequest(tenant=gone), metadata=AUTH)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED

    request = admin_pb2.DeleteTenantRequest(tenant=gone, confirm=gone)
    done = await api.admin.DeleteTenant(request, metadata=CLUSTER_AUTH)
    assert done.sequence > after
    return done


async def _check_nothing_left(
    api: Api, gone: str, gone_auth: Metadata, ids: list[str], sequence: int
) -> None:
    assert await applied(api, gone_auth, sequence) == {"vector": 0, "lexical": 0, "graph": 0}
    status = await api.admin.DeleteTenantStatus(
        admin_pb2.DeleteTenantStatusRequest(tenant=gone, sequence=sequence),
        metadata=CLUSTER_AUTH,
    )
    assert status.applied
    assert {c.store: c.count for c in status.counts if c.store != "dead_letters"} == {
        "vector": 0,
        "lexical": 0,
        "graph": 0,
    }
    recall = gateway_pb2.RecallRequest(query="lighthouse", min_sequence=sequence)
    assert list((await api.memory.Recall(recall, metadata=gone_auth)).results) == []
    for id_ in ids:
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await api.memory.Get(gateway_pb2.GetRequest(id=id_), metadata=gone_auth)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    await wait_kept(api.stack.nats_url, sequence)
    assert await states_of(api, gone) == 0


async def _check_kept(api: Api, mine: gateway_pb2.StoreResponse, before: dict[str, int]) -> None:
    """The other tenant keeps its memory, and its counts."""
    assert await applied(api, AUTH, mine.sequence) == before
    got = await api.memory.Get(gateway_pb2.GetRequest(id=mine.id), metadata=AUTH)
    assert got.memory.content.startswith("Ottilie")
    kept = await api.memory.Recall(
        gateway_pb2.RecallRequest(query="lighthouse keys", tags=[KEPT_TAG]), metadata=AUTH
    )
    assert mine.id in [r.memory.id for r in kept.results]
