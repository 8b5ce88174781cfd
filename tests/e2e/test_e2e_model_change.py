"""Changing the embedding model without downtime, end to end on the embedded stack:
Rebuild{vector, embedding_model=<next>} replays the latest-state log into a new vector
generation embedded with the next model, swaps it in, and recall answers throughout; a
write that ingest still embeds with the old model is refused by vector (FailedPrecondition)
and waits in the log until ingest is restarted with the new model — then it lands.

The next model is the hashing embedder (the only other one available offline). The
module runs its own stack — vector and the worker configured with it as ``next_embed``
from the start, the worker's schedule off and its pages small and paced so the rebuild
lasts long enough to recall during it — because it leaves the stack on the other model
and restarts ingest: the session's shared stack must stay on the real one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_clients.vector import VectorClient
from engram_platform.grpc_client import open_channel
from engram_testing.devstack import DevStack, start_stack
from engram_testing.e2e import AUTH, CLUSTER_AUTH, model_env, wait_for_watermark, wait_kept

pytestmark = pytest.mark.timeout(600)  # its own stack: start, two rebuilds, an ingest restart
TENANT = "default"
NEXT_MODEL = "hashing-384"
STACK = {
    "ENGRAM_VECTOR_NEXT_EMBED__PROVIDER": "hashing",
    "ENGRAM_CONSOLIDATE_NEXT_EMBED__PROVIDER": "hashing",
    "ENGRAM_CONSOLIDATE_SCHEDULE__DECAY_INTERVAL_S": "0",
    "ENGRAM_CONSOLIDATE_SCHEDULE__ASSOCIATE_INTERVAL_S": "0",
    "ENGRAM_CONSOLIDATE_SCHEDULE__CLUSTER_INTERVAL_S": "0",
    "ENGRAM_CONSOLIDATE_PAGE_SIZE": "4",
    "ENGRAM_CONSOLIDATE_PAGE_PAUSE_S": "0.1",
}
CONTENTS = [  # four notes of each (the same words would be one result: near duplicates)
    f"{subject} {detail} ({week} week)"
    for subject, detail in [
        ("The lighthouse keeper", "logs the fog horn schedule every evening"),
        ("The harbour office", "pays the invoices on the first Monday"),
        ("The ferry timetable", "changes when the tide tables are published"),
        ("The orchard crew", "picks the apples at the autumn harvest"),
        ("The bakery", "delivers rye bread to the island school"),
        ("The museum", "restores the old whaling boat in winter"),
    ]
    for week in ("first", "second", "third", "fourth")
]
QUERY = "lighthouse keeper fog horn schedule"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    models = model_env()
    worker = {"ENGRAM_CONSOLIDATE_EMBED__MODEL_DIR": models["ENGRAM_VECTOR_EMBED__MODEL_DIR"]}
    running = start_stack(
        tmp_path_factory.mktemp("engram-home-model"),
        gateway_port=0,
        extra_env={**models, **worker, **STACK},
    )
    yield running
    running.stop()


@pytest.fixture
async def stubs(
    stack: DevStack,
) -> AsyncIterator[tuple[gateway_pb2_grpc.MemoryServiceStub, admin_pb2_grpc.AdminServiceStub]]:
    async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
        yield gateway_pb2_grpc.MemoryServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)


@pytest.fixture
async def vector(stack: DevStack) -> AsyncIterator[VectorClient]:
    channel = open_channel(f"127.0.0.1:{stack.ports['vector']}")
    yield VectorClient(channel)
    await channel.close()


async def wait_rebuild(admin: admin_pb2_grpc.AdminServiceStub, run_id: str) -> admin_pb2.StoreRun:
    for _ in range(1200):
        got = await admin.RebuildStatus(admin_pb2.RebuildStatusRequest(), metadata=CLUSTER_AUTH)
        run = next(s for s in got.rebuilds if s.store == admin_pb2.STORE_VECTOR).last_run
        if run.run_id == run_id and run.state == admin_pb2.PASS_STATE_SUCCEEDED:
            return run
        if run.run_id == run_id and run.state == admin_pb2.PASS_STATE_FAILED:
            raise AssertionError(f"rebuild {run_id} failed: {run.error}")
        await asyncio.sleep(0.1)
    raise AssertionError(f"rebuild {run_id} did not finish")


async def recall(memory: gateway_pb2_grpc.MemoryServiceStub, query: str) -> list[str]:
    reply = await memory.Recall(
        gateway_pb2.RecallRequest(query=query, mode=gateway_pb2.RECALL_MODE_VECTOR, limit=5),
        metadata=AUTH,
        timeout=10,
    )
    assert not reply.degraded
    return [r.memory.id for r in reply.results]


async def test_rebuild_vector_onto_the_next_model_without_downtime(
    stack: DevStack,
    stubs: tuple[gateway_pb2_grpc.MemoryServiceStub, admin_pb2_grpc.AdminServiceStub],
    vector: VectorClient,
) -> None:
    memory, admin = stubs
    reply = await memory.StoreBatch(
        gateway_pb2.StoreBatchRequest(
            memories=[common_pb2.MemoryInput(content=c) for c in CONTENTS]
        ),
        metadata=AUTH,
    )
    ids = list(reply.ids)
    await wait_for_watermark(memory, reply.sequence)
    await wait_kept(stack.nats_url, reply.sequence)
    [old] = await vector.list_generations()
    assert old.embedding_model != NEXT_MODEL
    keeper_ids = {ids[i] for i, c in enumerate(CONTENTS) if "lighthouse" in c}
    assert set((await recall(memory, QUERY))[:4]) == keeper_ids

    # A model neither vector nor the worker can build: the run fails at its first step
    # (the gateway checks the name's form only), nothing is built, recall is untouched.
    refused = await admin.Rebuild(
        admin_pb2.RebuildRequest(store=admin_pb2.STORE_VECTOR, embedding_model="no-such"),
        metadata=CLUSTER_AUTH,
    )
    with pytest.raises(AssertionError, match="embedding_model"):
        await wait_rebuild(admin, refused.run_id)
    assert [g.name for g in await vector.list_generations()] == [old.name]

    started = await admin.Rebuild(
        admin_pb2.RebuildRequest(store=admin_pb2.STORE_VECTOR, embedding_model=NEXT_MODEL),
        metadata=CLUSTER_AUTH,
    )
    # Recall keeps answering while the new generation is built and swapped in.
    answered: list[list[str]] = []
    finished = asyncio.create_task(wait_rebuild(admin, started.run_id))
    while not finished.done():
        answered.append(await recall(memory, QUERY))
        await asyncio.sleep(0.05)
    run = finished.result()
    assert len(answered) >= 5, "the rebuild was too quick to recall during it"
    assert all(set(a[:4]) == keeper_ids for a in answered)

    assert run.embedding_model == NEXT_MODEL
    assert run.previous_generation == old.name
    assert {c.kind: c.count for c in run.changes}["memories"] >= len(CONTENTS)
    generations = {g.name: g for g in await vector.list_generations()}
    assert generations[run.generation].live
    assert generations[run.generation].embedding_model == NEXT_MODEL
    assert generations[run.generation].count == len(CONTENTS)
    assert not generations[old.name].live  # kept until the next rebuild drops it
    assert set((await recall(memory, QUERY))[:4]) == keeper_ids
    got = await memory.Get(gateway_pb2.GetRequest(id=ids[0]), metadata=AUTH)
    assert got.memory.content == CONTENTS[0]
    [held] = await vector.get(TENANT, [ids[0]])
    assert held.embedding_model == NEXT_MODEL

    # Ingest still embeds with the old model: vector refuses the write, ingest retries it.
    late = await memory.Store(
        gateway_pb2.StoreRequest(
            memory=common_pb2.MemoryInput(content="A zeppelin hangar opened beside the lighthouse")
        ),
        metadata=AUTH,
    )
    await asyncio.sleep(3)
    stats = await memory.Stats(gateway_pb2.StatsRequest(), metadata=AUTH)
    assert stats.watermark < late.sequence <= stats.last_sequence  # waiting in the log
    assert await vector.get(TENANT, [late.id]) == []
    refusals = [
        line
        for line in (stack.home / "logs" / "ingest.log").read_text().splitlines()
        if f"seq {late.sequence} " in line and "FAILED_PRECONDITION" in line
    ]
    assert refusals  # logged and retried, not dropped
    assert "embedding_model" in refusals[0]

    # Rolled with the new model, ingest applies it.
    stack.stop_service("ingest")
    stack.env = {**stack.env, "ENGRAM_INGEST_EMBED__PROVIDER": "hashing"}
    stack.start_service("ingest")
    await wait_for_watermark(memory, late.sequence)
    [landed] = await vector.get(TENANT, [late.id])
    assert landed.embedding_model == NEXT_MODEL
    assert (await recall(memory, "zeppelin hangar"))[:1] == [late.id]
    got = await memory.Get(gateway_pb2.GetRequest(id=late.id), metadata=AUTH)
    assert got.memory.content.startswith("A zeppelin hangar")
