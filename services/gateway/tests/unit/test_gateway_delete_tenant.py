"""AdminService.DeleteTenant in-process over the fake stores and log: who may, the dry run,
the confirmation, and what the tenant has left afterwards (nothing) beside another tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from nats.js import JetStreamContext

from engram.common.v1 import common_pb2
from engram.events.v1 import events_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_gateway import server
from engram_gateway.adapters.dead_letters import JetStreamDeadLetters
from engram_gateway.adapters.log import JetStreamLog
from engram_gateway.adapters.tenant_purge import NatsTenantPurge
from engram_gateway.auth import Authenticator
from engram_gateway.bootstrap import build_admin
from engram_gateway.service.admin import PASSES, PassStatus
from engram_gateway.service.ports import Envelope
from engram_platform import jetstream as jsm
from engram_platform.errors import FIELD_KEY

if TYPE_CHECKING:
    from conftest import Harness

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TOKENS = "admin=acme:admin;rw=acme:read+write;beta=beta:read+write;root=*:admin"
ADMIN = (("authorization", "Bearer admin"),)
RW = (("authorization", "Bearer rw"),)
BETA = (("authorization", "Bearer beta"),)
ROOT = (("authorization", "Bearer root"),)


class NoControl:
    async def request(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no consolidation here")

    async def status(self, tenant: str, passes: Sequence[str] = PASSES) -> list[PassStatus]:
        raise AssertionError("no consolidation here")


@dataclass
class Stack:
    admin: admin_pb2_grpc.AdminServiceStub
    memory: gateway_pb2_grpc.MemoryServiceStub
    harness: Harness


@pytest.fixture
async def stack(new_harness: Callable[..., Harness]) -> AsyncIterator[Stack]:
    harness = new_harness(tokens=TOKENS)
    # AdminService is served beside an Admin; its consolidation calls are not used here.
    gateway = replace(harness.gateway, admin=build_admin(harness.settings, NoControl()))
    running = await server.start(harness.settings, gateway, Authenticator.from_sources(TOKENS))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield Stack(
            admin_pb2_grpc.AdminServiceStub(channel),
            gateway_pb2_grpc.MemoryServiceStub(channel),
            harness,
        )
    finally:
        await channel.close()
        await running.stop(None)


async def refused(call: Any, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    return err.value


def field_of(err: grpc.aio.AioRpcError) -> str:
    return next((str(v) for k, v in err.trailing_metadata() or () if k == FIELD_KEY), "")


async def store(stack: Stack, content: str, token: Any, key: str = "") -> gateway_pb2.StoreResponse:
    request = gateway_pb2.StoreRequest(
        memory=common_pb2.MemoryInput(content=content), idempotency_key=key
    )
    reply: gateway_pb2.StoreResponse = await stack.memory.Store(request, metadata=token)
    return reply


def deletion(tenant: str = "acme", confirm: str = "acme", dry_run: bool = False) -> Any:
    return admin_pb2.DeleteTenantRequest(tenant=tenant, confirm=confirm, dry_run=dry_run)


@pytest.mark.parametrize(("token", "why"), [(ADMIN, "cluster-admin"), (RW, "'admin' scope")])
async def test_only_a_cluster_admin_may_delete_a_tenant(stack: Stack, token: Any, why: str) -> None:
    await store(stack, "kept", RW)
    err = await refused(
        stack.admin.DeleteTenant(deletion(), metadata=token), grpc.StatusCode.PERMISSION_DENIED
    )
    assert why in (err.details() or "")
    assert stack.harness.log.of("tenant_deleted") == []
    assert len(stack.harness.world.of("acme")) == 1


async def test_the_tenant_is_required_and_must_be_a_tenant(stack: Stack) -> None:
    for tenant in ("", "*", "no.dots"):
        err = await refused(
            stack.admin.DeleteTenant(deletion(tenant, tenant), metadata=ROOT),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert field_of(err) == "tenant"


@pytest.mark.parametrize("confirm", ["", "acm", "beta", "ACME"])
async def test_confirm_must_repeat_the_tenant(stack: Stack, confirm: str) -> None:
    await store(stack, "kept", RW)
    err = await refused(
        stack.admin.DeleteTenant(deletion(confirm=confirm), metadata=ROOT),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert field_of(err) == "confirm"
    assert stack.harness.log.of("tenant_deleted") == []
    assert len(stack.harness.world.of("acme")) == 1


async def test_a_dry_run_counts_per_store_and_changes_nothing(stack: Stack) -> None:
    for n in range(3):
        await store(stack, f"acme note {n}", RW)
    await store(stack, "beta note", BETA)
    reply = await stack.admin.DeleteTenant(deletion(confirm="", dry_run=True), metadata=ROOT)
    assert (reply.tenant, reply.dry_run, reply.sequence) == ("acme", True, 0)
    assert {c.store: c.count for c in reply.counts} == {
        "vector": 3,
        "lexical": 3,
        "graph": 3,
        "dead_letters": 0,
    }
    assert stack.harness.log.of("tenant_deleted") == []
    assert len(stack.harness.world.of("acme")) == 3


async def test_deletion_leaves_nothing_of_the_tenant_and_the_other_untouched(stack: Stack) -> None:
    first = await store(stack, "acme remembers the launch date", RW, key="k1")
    kept = await store(stack, "beta remembers the launch date", BETA, key="k1")
    reply = await stack.admin.DeleteTenant(deletion(), metadata=ROOT)
    [tombstone] = stack.harness.log.of("tenant_deleted")
    assert tombstone.env.tenant == "acme"
    assert reply.sequence == tombstone.sequence > first.sequence
    assert {c.store: c.count for c in reply.counts}["vector"] == 1

    read = gateway_pb2.RecallRequest(query="launch date", min_sequence=reply.sequence)
    assert list((await stack.memory.Recall(read, metadata=RW)).results) == []
    await refused(
        stack.memory.Get(gateway_pb2.GetRequest(id=first.id), metadata=RW),
        grpc.StatusCode.NOT_FOUND,
    )
    stats = await stack.memory.Stats(gateway_pb2.StatsRequest(), metadata=RW)
    assert dict(stats.counts) == {"vector": 0, "lexical": 0, "graph": 0}
    # The other tenant keeps its memory and its idempotency key.
    other = await stack.memory.Recall(gateway_pb2.RecallRequest(query="launch"), metadata=BETA)
    assert [r.memory.id for r in other.results] == [kept.id]
    assert (await store(stack, "beta again", BETA, key="k1")).duplicate
    # The deleted tenant's idempotency key is gone with it: the same key stores anew.
    again = await store(stack, "acme starts over", RW, key="k1")
    assert not again.duplicate
    assert again.id != first.id


async def test_the_status_says_when_the_deletion_is_applied(stack: Stack) -> None:
    await store(stack, "acme note", RW)
    log = stack.harness.log
    log.auto_watermark = False  # ingest holds the tombstone back
    done = await stack.admin.DeleteTenant(deletion(), metadata=ROOT)
    status = admin_pb2.DeleteTenantStatusRequest(tenant="acme", sequence=done.sequence)
    pending = await stack.admin.DeleteTenantStatus(status, metadata=ROOT)
    assert (pending.tenant, pending.sequence, pending.applied) == ("acme", done.sequence, False)
    log.applied = done.sequence  # ingest applied it
    applied = await stack.admin.DeleteTenantStatus(status, metadata=ROOT)
    assert applied.applied
    assert {c.store: c.count for c in applied.counts}["vector"] == 0

    await refused(
        stack.admin.DeleteTenantStatus(status, metadata=ADMIN), grpc.StatusCode.PERMISSION_DENIED
    )
    err = await refused(
        stack.admin.DeleteTenantStatus(
            admin_pb2.DeleteTenantStatusRequest(tenant="acme"), metadata=ROOT
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert field_of(err) == "sequence"


# --- the NATS side: the tombstone's subject, the purge of letters and run records -------


async def test_the_tombstone_goes_on_the_tenants_memory_subject(js: JetStreamContext) -> None:
    ack = await JetStreamLog(js, 5.0).tenant_deleted(Envelope("e1", "acme", NOW))
    raw = await js.get_msg(jsm.STREAM_MEMORY, ack.sequence)
    assert raw.subject == "engram.acme.tenant_deleted.v1"
    assert events_pb2.TenantDeleted.FromString(raw.data or b"").envelope.tenant == "acme"


async def test_the_purge_drops_the_tenants_letters_and_run_records_only(
    js: JetStreamContext,
) -> None:
    for tenant in ("acme", "beta"):
        await js.publish(jsm.subject(tenant, jsm.DEAD_LETTER), b"letter")
    purge = NatsTenantPurge(js)
    await purge.purge("acme")  # no bucket yet: nothing of the worker's to drop
    await js.publish(jsm.subject("acme", jsm.DEAD_LETTER), b"letter")
    kv = await js.create_key_value(bucket=jsm.CONSOLIDATE_BUCKET)
    for key in ("run.acme.decay", "dry.acme.sync_vector", "run.beta.decay", "run.acmex.decay"):
        await kv.put(key, b"record")
    await purge.purge("acme")

    letters = JetStreamDeadLetters(js, 5.0)
    assert (await letters.dead_letters("acme"), await letters.dead_letters("beta")) == (0, 1)
    assert sorted(await kv.keys()) == ["run.acmex.decay", "run.beta.decay"]
