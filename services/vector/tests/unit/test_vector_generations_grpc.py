"""Generations through the vector service's gRPC surface (VectorClient against the in-process
server over fake generations): routing by `generation`, the embedding-model rules, and the
status codes of the generation RPCs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from engram_clients.vector import VectorClient
from engram_core.errors import FailedPrecondition, InvalidArgument, NotFound
from engram_core.model import Filter, Memory
from engram_embed.hashing import HashingEmbedder
from engram_platform.grpc_client import open_channel
from engram_testing.fakes.generations import fake_vector_generations
from engram_vector import server
from engram_vector.bootstrap import build_service
from engram_vector.config import Settings

T = "tenant-a"
OLD, NEW = HashingEmbedder(16), HashingEmbedder(8)  # two models, two dimensions
ALL = Filter(include_archived=True)


class Counting(HashingEmbedder):
    def __init__(self, dimension: int) -> None:
        super().__init__(dimension)
        self.seen: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.seen += texts
        return await super().embed(texts)


def memory(n: int, content: str, model: str = "") -> Memory:
    return Memory(
        id=f"00000000-0000-0000-0000-{n:012d}",
        tenant=T,
        content=content,
        version=1,
        embedding_model=model,
    )


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[VectorClient, Counting, Counting]]:
    old, new = Counting(16), Counting(8)
    models = {old.model_name: 16, new.model_name: 8}
    settings = Settings(port=0, data_dir=tmp_path, dimension=16)
    service = await build_service(
        settings,
        generations=fake_vector_generations(models, old.model_name),
        embedder=old,
        next_embedder=new,
    )
    running = await server.start(settings, service)
    channel = open_channel(f"127.0.0.1:{running.port}")
    try:
        yield VectorClient(channel), old, new
    finally:
        await channel.close()
        await running.stop(None)
        await service.close()


async def test_a_rebuild_onto_the_next_model(
    client: tuple[VectorClient, Counting, Counting],
) -> None:
    live, old, new = client
    a = memory(1, "apples in the orchard", OLD.model_name)
    await live.upsert(T, [(a, OLD.embed_one(a.content))])
    created = await live.create_generation(NEW.model_name)
    assert (created.name, created.embedding_model, created.count) == ("v2", NEW.model_name, 0)
    staged = live.in_generation("v2")
    b = memory(2, "bananas in the orchard", NEW.model_name)
    assert (await staged.upsert(T, [(b, NEW.embed_one(b.content))])).applied == 1
    assert await staged.count(T) == 1
    assert await live.count(T) == 1
    # Search reads the live generation, embedding the query with its model.
    assert [h.id for h in await live.search(T, ALL, 5, query="orchard")] == [a.id]
    assert old.seen == ["orchard"]
    previous = await live.swap_generation("v2")
    assert (previous.name, previous.live, previous.count) == ("v1", False, 1)
    assert [h.id for h in await live.search(T, ALL, 5, query="orchard")] == [b.id]
    assert new.seen == ["orchard"]
    listed = await live.list_generations()
    assert {g.name: (g.live, g.dimension) for g in listed} == {"v1": (False, 16), "v2": (True, 8)}
    await live.drop_generation("v1")
    assert [g.name for g in await live.list_generations()] == ["v2"]


async def test_an_upsert_of_another_model_waits(
    client: tuple[VectorClient, Counting, Counting],
) -> None:
    live, _, _ = client
    await live.create_generation(NEW.model_name)
    stale = memory(3, "embedded with the old model", OLD.model_name)
    with pytest.raises(FailedPrecondition) as err:
        await live.in_generation("v2").upsert(T, [(stale, NEW.embed_one(stale.content))])
    assert err.value.field == "points[0].memory.embedding_model"
    fresh = replace(stale, embedding_model=NEW.model_name)
    with pytest.raises(FailedPrecondition):
        await live.upsert(T, [(fresh, OLD.embed_one(fresh.content))])
    # A memory that names no model is taken at the vector's word (the dimension is checked).
    unnamed = replace(stale, embedding_model="")
    with pytest.raises(InvalidArgument) as bad:
        await live.in_generation("v2").upsert(T, [(unnamed, OLD.embed_one(unnamed.content))])
    assert bad.value.field == "points[0].vector"
    assert (await live.in_generation("v2").upsert(T, [(unnamed, NEW.embed_one("x"))])).applied == 1


async def test_generation_errors_name_their_field(
    client: tuple[VectorClient, Counting, Counting],
) -> None:
    live, _, _ = client
    with pytest.raises(InvalidArgument) as err:
        await live.create_generation("a-model-nobody-serves")
    assert err.value.field == "embedding_model"
    with pytest.raises(InvalidArgument) as err:
        await live.swap_generation("")
    assert err.value.field == "name"
    with pytest.raises(NotFound):
        await live.swap_generation("v7")
    with pytest.raises(NotFound):
        await live.in_generation("v7").count(T)
    with pytest.raises(NotFound):
        await live.in_generation("v7").scan(T, None, 10)
    with pytest.raises(FailedPrecondition) as failed:
        await live.drop_generation("v1")
    assert failed.value.field == "name"
    same = await live.create_generation("")
    assert same.embedding_model == OLD.model_name
