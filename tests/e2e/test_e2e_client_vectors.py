"""A memory stored with the client's own vector, end to end on the embedded stack: ingest
writes that vector (not the model's), a recall by the same vector finds it first, the
memory is stamped with the live model, and a Sync of vector leaves it as it is."""

from __future__ import annotations

import math
import random

import grpc

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_clients.vector import VectorClient
from engram_platform.grpc_client import open_channel
from engram_testing.devstack import DevStack
from engram_testing.e2e import AUTH, wait_for_watermark, wait_kept

TAG = "suite:client-vectors"


def unit_vector(dimension: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 1.0) for _ in range(dimension)]
    norm = math.sqrt(sum(x * x for x in values))
    return [x / norm for x in values]


async def test_a_memory_stored_with_its_own_vector_is_recalled_by_it(stack: DevStack) -> None:
    channel = open_channel(f"127.0.0.1:{stack.ports['vector']}")
    try:
        [live] = [g for g in await VectorClient(channel).list_generations() if g.live]
    finally:
        await channel.close()
    own = unit_vector(live.dimension, seed=7)
    # The query's words are in none of the contents: the vector alone brings it first.
    memories = [
        common_pb2.MemoryInput(content="Crates of figs arrive on Thursdays", embedding=own),
        common_pb2.MemoryInput(content="The violin lesson moved to the blue room"),
        common_pb2.MemoryInput(content="Quarterly harbour fees are due in April"),
    ]
    async with grpc.aio.insecure_channel(stack.gateway_address) as gateway:
        memory = gateway_pb2_grpc.MemoryServiceStub(gateway)
        for m in memories:
            m.tags.append(TAG)
        stored = await memory.StoreBatch(
            gateway_pb2.StoreBatchRequest(memories=memories), metadata=AUTH
        )
        assert stored.failed == 0
        await wait_for_watermark(memory, stored.sequence)
        mine = stored.ids[0]

        recalled = await memory.Recall(
            gateway_pb2.RecallRequest(
                query="weekly deliveries",
                embedding=own,
                tags=[TAG],
                limit=3,
                min_sequence=stored.sequence,
            ),
            metadata=AUTH,
        )
        assert recalled.results[0].memory.id == mine
        assert recalled.results[0].memory.embedding_model == live.embedding_model
        vectors = await memory.Recall(
            gateway_pb2.RecallRequest(
                query="weekly deliveries",
                embedding=own,
                tags=[TAG],
                mode=gateway_pb2.RECALL_MODE_VECTOR,
            ),
            metadata=AUTH,
        )
        assert vectors.results[0].memory.id == mine
        assert vectors.results[0].streams["vector"].score > 0.99  # the vector as sent

        await wait_kept(stack.nats_url, stored.sequence)
        admin = admin_pb2_grpc.AdminServiceStub(gateway)
        dry = await admin.Sync(
            admin_pb2.SyncRequest(stores=[admin_pb2.STORE_VECTOR], dry_run=True),
            metadata=AUTH,
            timeout=300,
        )
        [report] = dry.reports
        assert report.state == admin_pb2.PASS_STATE_SUCCEEDED, report
        flagged = {i for c in report.changes for i in c.sample_ids}
        assert not flagged & set(stored.ids)  # held at their version: nothing to repair
