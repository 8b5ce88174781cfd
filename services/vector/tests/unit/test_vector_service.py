"""VectorService over the fake index, the hashing embedder and the in-process cache."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from engram_core.errors import InvalidArgument, Unavailable
from engram_core.model import AccessUpdate, Filter, Memory
from engram_embed.hashing import HashingEmbedder
from engram_platform.cache import MemoryCache
from engram_testing.fakes.generations import fake_vector_generations
from engram_vector.service import VectorService

DIM = 32
T = "tenant-a"


class CountingEmbedder(HashingEmbedder):
    def __init__(self, dimension: int = DIM, name: str = "", instruction: str = "") -> None:
        super().__init__(dimension)
        self.calls: list[list[str]] = []
        self.failure: Exception | None = None
        self._name = name
        self._instruction = instruction

    @property
    def model_name(self) -> str:
        return self._name or super().model_name

    @property
    def query_instruction(self) -> str:
        return self._instruction

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.failure is not None:
            raise self.failure
        self.calls.append(list(texts))
        return await super().embed(texts)


def memory(id_: str, content: str) -> Memory:
    return Memory(id=id_, tenant=T, content=content, version=1)


async def service_with(
    embedder: CountingEmbedder | None = None, cache: MemoryCache | None = None
) -> tuple[VectorService, CountingEmbedder, MemoryCache]:
    embedder = embedder or CountingEmbedder()
    cache = cache or MemoryCache()
    generations = fake_vector_generations({embedder.model_name: DIM}, embedder.model_name)
    service = VectorService(generations, [embedder], cache)
    docs = ["the deploy pipeline runs on fridays", "lunch is at noon", "sarah prefers rust"]
    items = [(memory(f"m{i}", d), embedder.embed_one(d)) for i, d in enumerate(docs)]
    await service.upsert(T, items)
    return service, embedder, cache


async def test_search_by_text_embeds_the_query_once_then_uses_the_cache() -> None:
    service, embedder, _ = await service_with()
    first = await service.search(T, Filter(), 2, query="when does the deploy pipeline run")
    assert first[0].id == "m0"
    second = await service.search(T, Filter(), 2, query="when does the deploy pipeline run")
    assert second == first  # scores identical: both went through float32
    assert embedder.calls == [["when does the deploy pipeline run"]]


async def test_search_many_embeds_once_and_answers_each_filter() -> None:
    service, embedder, _ = await service_with()
    query = "who prefers rust"
    flts = [Filter(), Filter(tags=("nothing-has-it",)), Filter()]
    found = await service.search_many(T, flts, 1, query=query)
    assert embedder.calls == [[query]]
    assert [[h.id for h in hits] for hits in found] == [["m2"], [], ["m2"]]


async def test_cache_key_holds_the_model_name_and_the_tenant() -> None:
    cache = MemoryCache()
    service, embedder, _ = await service_with(cache=cache)
    await service.search(T, Filter(), 2, query="rust")
    await service.search("tenant-b", Filter(), 2, query="rust")
    assert len(embedder.calls) == 2  # another tenant does not share the entry

    other_model = CountingEmbedder(name="another-model")
    other, _, _ = await service_with(embedder=other_model, cache=cache)
    await other.search(T, Filter(), 2, query="rust")
    assert other_model.calls[-1] == ["rust"]  # same cache, another model: a miss
    assert all(k.startswith("vector:qemb:") for k in cache._data)
    assert any("another-model" in k for k in cache._data)


async def test_a_query_is_embedded_behind_the_models_query_instruction() -> None:
    cache = MemoryCache()
    plain, plain_embedder, _ = await service_with(cache=cache)
    await plain.search(T, Filter(), 2, query="rust")
    instructed = CountingEmbedder(instruction="Represent this for search: ")
    service, embedder, _ = await service_with(embedder=instructed, cache=cache)
    await service.search(T, Filter(), 2, query="rust")
    # Same model name and cache: the instruction is part of the key, so no stale hit.
    assert embedder.calls == [["Represent this for search: rust"]]
    assert plain_embedder.calls == [["rust"]]


async def test_a_cached_entry_of_the_wrong_size_is_ignored() -> None:
    service, embedder, cache = await service_with()
    await service.search(T, Filter(), 1, query="noon")
    [key] = list(cache._data)
    await cache.set(key, b"\x00" * 8, 60)
    hits = await service.search(T, Filter(), 1, query="noon")
    assert hits[0].id == "m1"
    assert len(embedder.calls) == 2


async def test_search_by_vector_skips_the_embedder() -> None:
    service, embedder, _ = await service_with()
    hits = await service.search(T, Filter(), 1, vector=embedder.embed_one("lunch is at noon"))
    assert hits[0].id == "m1"
    assert hits[0].score == pytest.approx(1.0)
    assert embedder.calls == []


@pytest.mark.parametrize(
    ("vector", "reason"),
    [
        ([1.0] * (DIM - 1), "expected 32 dimensions, got 31"),
        ([float("nan")] * DIM, "finite"),
        ([0.0] * DIM, "all zeros"),
    ],
)
async def test_bad_vectors_are_invalid_arguments(vector: list[float], reason: str) -> None:
    service, _, _ = await service_with()
    with pytest.raises(InvalidArgument, match=reason) as err:
        await service.search(T, Filter(), 1, vector=vector)
    assert err.value.field == "vector"
    with pytest.raises(InvalidArgument, match=reason) as err:
        await service.upsert(T, [(memory("ok", "x"), [1.0] * DIM), (memory("bad", "y"), vector)])
    assert err.value.field == "points[1].vector"
    assert await service.count(T) == 3  # nothing of the batch was written


async def test_search_needs_a_query_or_a_vector() -> None:
    service, _, _ = await service_with()
    with pytest.raises(InvalidArgument) as err:
        await service.search(T, Filter(), 1, query="   ")
    assert err.value.field == "query"


async def test_an_unavailable_embedder_is_reported_not_replaced() -> None:
    service, embedder, _ = await service_with()
    embedder.failure = Unavailable("model not loaded")
    with pytest.raises(Unavailable):
        await service.search(T, Filter(), 1, query="anything new")


async def test_embedder_and_index_must_agree_on_the_dimension() -> None:
    embedder = HashingEmbedder(16)
    generations = fake_vector_generations({embedder.model_name: DIM}, embedder.model_name)
    service = VectorService(generations, [embedder], MemoryCache())
    with pytest.raises(ValueError, match="16-d vectors, the index holds 32-d"):
        await service.check_live_model()


async def test_get_delete_access_and_count_reach_the_index() -> None:
    service, _, _ = await service_with()
    assert [m.id for m in await service.get(T, ["m2", "m0"])] == ["m2", "m0"]
    seen = datetime(2024, 1, 1, tzinfo=UTC)
    assert await service.update_access(T, [AccessUpdate("m0", seen, 3)]) == 1
    assert [m.access_count for m in await service.get(T, ["m0"])] == [3]
    assert await service.delete(T, ["m2"], version=2) == 1
    assert await service.count(T) == 2
    await service.close()
