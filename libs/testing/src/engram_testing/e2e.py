"""End to end through the public gRPC API, one suite for every stack.

Subclass `GatewayEndToEnd` in a ``Test*`` class next to a conftest that provides the
fixture ``stack`` (a running `DevStack`, session-scoped; `model_env` points its services
at the model `make models` built). tests/e2e runs it on the embedded stack, tests/integration/e2e
on real OpenSearch, Neo4j, Redis and NATS.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import grpc
import pytest
from nats.js.errors import KeyNotFoundError

from engram.common.v1 import common_pb2
from engram.events.v1 import events_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_platform import jetstream as jsm
from engram_platform.settings import NatsSettings
from engram_testing.devstack import DEV_ADMIN_TOKEN, DEV_TOKEN, DevStack

AUTH = (("authorization", f"Bearer {DEV_TOKEN}"),)
CLUSTER_AUTH = (("authorization", f"Bearer {DEV_ADMIN_TOKEN}"),)  # what spans tenants
# A second tenant's token: what an import goes into, empty until it does.
IMPORT_TOKEN = "e2e-import-token"
IMPORT_AUTH = (("authorization", f"Bearer {IMPORT_TOKEN}"),)


def gateway_tokens(tenant: str, import_tenant: str) -> str:
    """ENGRAM_GATEWAY_TOKENS of a test stack: the dev token's tenant, the import tenant and
    the cluster admin."""
    return (
        f"{DEV_TOKEN}={tenant}:read+write+admin;{IMPORT_TOKEN}={import_tenant}:read+write;"
        f"{DEV_ADMIN_TOKEN}=*:admin"
    )


PEOPLE = ["Alice", "Bogdan", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun"]
TOPICS = [
    "renewed the TLS certificates for the staging cluster",
    "wrote the quarterly OKR summary for the design team",
    "fixed the flaky login test in the mobile app",
    "ordered new ergonomic chairs for the Berlin office",
    "planned the offsite hiking trip in the Alps",
    "reviewed the pull request that adds dark mode",
    "benchmarked the image resizing lambda",
    "updated the onboarding guide for new interns",
    "tuned the autoscaler thresholds for the search API",
    "booked the venue for the winter party",
]
NEEDLE = "Priya migrated the billing ledger from MySQL to Postgres 16 over the weekend"


def corpus() -> list[str]:
    texts = [f"{p} {t}." for p in PEOPLE for t in TOPICS]
    texts[42] = NEEDLE
    return texts


Stub: TypeAlias = "gateway_pb2_grpc.MemoryServiceAsyncStub"  # exists in the stubs only


async def store_corpus(gateway: Stub, tag: str) -> tuple[list[str], int]:
    memories = [common_pb2.MemoryInput(content=t, tags=[tag]) for t in corpus()]
    reply = await gateway.StoreBatch(
        gateway_pb2.StoreBatchRequest(memories=memories), metadata=AUTH
    )
    assert (len(reply.ids), reply.failed) == (100, 0)
    return list(reply.ids), reply.sequence


async def recall(gateway: Stub, **request: Any) -> gateway_pb2.RecallResponse:
    """One Recall with the dev token; ``request`` holds the RecallRequest's fields."""
    reply: gateway_pb2.RecallResponse = await gateway.Recall(
        gateway_pb2.RecallRequest(**request), metadata=AUTH, timeout=30
    )
    return reply


async def wait_for_watermark(gateway: Stub, sequence: int) -> gateway_pb2.StatsResponse:
    for _ in range(300):
        stats = await gateway.Stats(gateway_pb2.StatsRequest(), metadata=AUTH)
        if stats.watermark >= sequence:
            return stats
        await asyncio.sleep(0.1)
    raise AssertionError(f"watermark stuck at {stats.watermark} < {sequence}")


async def wait_kept(
    nats_url: str, sequence: int, timeout_s: float = 60.0, poll_s: float = 0.1
) -> None:
    """Until consolidate's state keeper has the state of every event up to ``sequence``
    (its checkpoint in the consolidate KV bucket)."""
    nc, js = await jsm.connect(NatsSettings(url=nats_url), "e2e")
    try:
        kv = await js.key_value(jsm.CONSOLIDATE_BUCKET)
        for _ in range(max(1, int(timeout_s / poll_s))):
            try:
                entry = await kv.get(jsm.KEEPER_KEY)
                at = events_pb2.StateKeeperCheckpoint.FromString(entry.value or b"").sequence
            except KeyNotFoundError:  # not written yet
                at = 0
            if at >= sequence:
                return
            await asyncio.sleep(poll_s)
    finally:
        await nc.close()
    raise AssertionError(f"the state keeper did not reach {sequence}")


@dataclass(frozen=True)
class ServerStack:
    """A stack on real servers with the tenant and index prefix its run owns."""

    stack: DevStack
    tenant: str
    index_prefix: str


def model_env() -> dict[str, str]:
    """The default model is built once by `make models` into the project's ENGRAM_HOME; a
    test stack's own state goes to a fresh temporary home."""
    from engram_embed.paths import default_model_dir

    model_dir = str(default_model_dir())
    return {
        "ENGRAM_VECTOR_EMBED__MODEL_DIR": model_dir,
        "ENGRAM_INGEST_EMBED__MODEL_DIR": model_dir,
    }


class GatewayFixture:
    """``gateway``: a MemoryService stub on the suite's ``stack`` (a fixture the test module's
    conftest provides: the embedded stack or the server stack)."""

    @pytest.fixture
    async def gateway(self, stack: DevStack) -> AsyncIterator[Stub]:
        async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
            yield gateway_pb2_grpc.MemoryServiceStub(channel)


class GatewayEndToEnd(GatewayFixture):
    """Store, recall, update, delete, associate, degrade: what every stack must do."""

    async def test_store_100_then_recall_finds_the_needle_first(self, gateway: Stub) -> None:
        ids, seq = await store_corpus(gateway, "suite:needle")
        reply = await gateway.Recall(
            gateway_pb2.RecallRequest(
                query="Which database did Priya move the billing ledger to?",
                limit=5,
                tags=["suite:needle"],
                min_sequence=seq,
            ),
            metadata=AUTH,
            timeout=30,
        )
        assert reply.results, "recall returned nothing"
        top = reply.results[0]
        assert top.memory.id == ids[42]
        assert top.memory.content == NEEDLE
        assert set(reply.streams) >= {"vector", "lexical"}
        assert not reply.degraded
        assert top.components["vector"] > 0
        assert top.components["keyword"] > 0

    async def test_recall_by_the_clients_own_embedding(self, gateway: Stub) -> None:
        from engram_embed import EmbedSettings, make_embedder  # the model the stack runs

        ids, seq = await store_corpus(gateway, "suite:embedding")
        model_dir = Path(model_env()["ENGRAM_VECTOR_EMBED__MODEL_DIR"])
        [vector] = await make_embedder(EmbedSettings(model_dir=model_dir)).embed(
            ["Which database did the billing ledger move to?"]
        )
        reply = await recall(
            gateway,
            query="billing ledger",
            embedding=vector,
            limit=5,
            tags=["suite:embedding"],
            min_sequence=seq,
        )
        assert reply.results[0].memory.id == ids[42]
        assert "vector" in reply.streams
        assert not reply.degraded
        # A vector the live model cannot take is the client's error, named.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await recall(gateway, query="billing ledger", embedding=vector[:100])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "embedding" in (err.value.details() or "")

    async def test_delete_removes_from_every_store(self, gateway: Stub) -> None:
        ids, seq = await store_corpus(gateway, "suite:delete")
        before = await wait_for_watermark(gateway, seq)
        deleted = await gateway.Delete(gateway_pb2.DeleteRequest(id=ids[7]), metadata=AUTH)
        assert deleted.sequence > seq
        after = await wait_for_watermark(gateway, deleted.sequence)
        for store in ("vector", "lexical", "graph"):
            assert after.counts[store] == before.counts[store] - 1, store
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gateway.Get(gateway_pb2.GetRequest(id=ids[7]), metadata=AUTH)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        reply = await gateway.Recall(
            gateway_pb2.RecallRequest(query=corpus()[7], limit=10, tags=["suite:delete"]),
            metadata=AUTH,
        )
        assert ids[7] not in [r.memory.id for r in reply.results]

    async def test_recall_degrades_when_lexical_is_down(
        self, stack: DevStack, gateway: Stub
    ) -> None:
        ids, seq = await store_corpus(gateway, "suite:degraded")
        await wait_for_watermark(gateway, seq)
        stack.stop_service("lexical")
        try:
            reply = await gateway.Recall(
                gateway_pb2.RecallRequest(
                    query="Priya billing ledger Postgres", limit=3, tags=["suite:degraded"]
                ),
                metadata=AUTH,
                timeout=30,
            )
            assert "lexical" in reply.degraded
            assert "lexical" not in reply.streams
            assert reply.results[0].memory.id == ids[42]
        finally:
            stack.start_service("lexical")

    async def test_bad_input_names_the_field_and_stores_nothing(self, gateway: Stub) -> None:
        before = await gateway.Stats(gateway_pb2.StatsRequest(), metadata=AUTH)
        bad = [
            common_pb2.MemoryInput(content="fine"),
            common_pb2.MemoryInput(content="too important", importance=1.5),
        ]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gateway.StoreBatch(gateway_pb2.StoreBatchRequest(memories=bad), metadata=AUTH)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "memories[1].importance" in (err.value.details() or "")
        after = await gateway.Stats(gateway_pb2.StatsRequest(), metadata=AUTH)
        assert after.last_sequence == before.last_sequence

    async def test_no_token_is_unauthenticated(self, gateway: Stub) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gateway.Stats(gateway_pb2.StatsRequest())
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

    async def test_update_associate_related_and_access_tracking(self, gateway: Stub) -> None:
        a = await gateway.Store(
            gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="Lena adopted a cat")),
            metadata=AUTH,
        )
        b = await gateway.Store(
            gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="Lena named it Miso")),
            metadata=AUTH,
        )
        await wait_for_watermark(gateway, b.sequence)
        upd = await gateway.Update(
            gateway_pb2.UpdateRequest(
                id=a.id, memory=common_pb2.MemoryInput(content="Lena adopted a grey cat")
            ),
            metadata=AUTH,
        )
        assoc = await gateway.Associate(
            gateway_pb2.AssociateRequest(
                source_id=a.id, target_id=b.id, type="LEADS_TO", strength=0.8
            ),
            metadata=AUTH,
        )
        await wait_for_watermark(gateway, max(upd.sequence, assoc.sequence))
        got = await gateway.Get(gateway_pb2.GetRequest(id=a.id), metadata=AUTH)
        assert got.memory.content == "Lena adopted a grey cat"
        related = await gateway.Related(gateway_pb2.RelatedRequest(id=a.id), metadata=AUTH)
        assert [(r.memory.id, r.type) for r in related.related] == [(b.id, "LEADS_TO")]
        # Get and Recall publish MemoryAccessed; consolidate folds them into access_count.
        for _ in range(50):
            got = await gateway.Get(gateway_pb2.GetRequest(id=b.id), metadata=AUTH)
            if got.memory.access_count >= 1:
                break
            await asyncio.sleep(0.2)
        assert got.memory.access_count >= 1
        assert got.memory.HasField("last_accessed")

    async def test_idempotency_key_returns_the_same_id(self, gateway: Stub) -> None:
        request = gateway_pb2.StoreRequest(
            memory=common_pb2.MemoryInput(content="retry me"), idempotency_key="client-retry-1"
        )
        first = await gateway.Store(request, metadata=AUTH)
        second = await gateway.Store(request, metadata=AUTH)
        assert (first.id, first.sequence) == (second.id, second.sequence)
