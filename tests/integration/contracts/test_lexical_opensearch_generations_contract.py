"""Generations on a real OpenSearch pass the generations contract: an index per generation,
the alias swapped atomically, read back by a second adapter (another replica, a restart).

Each test gets its own index prefix (template, indices, alias), deleted afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from opensearchpy import AsyncOpenSearch

from engram_lexical.adapters import opensearch_schema as schema
from engram_lexical.adapters.opensearch_generations import OpenSearchGenerations
from engram_lexical.adapters.opensearch_index import (
    OpenSearchOptions,
    OpenSearchTextIndex,
    opensearch_client,
)
from engram_testing.contracts.generations import Reopen, TextGenerationsContract
from engram_testing.contracts.lexical import T, mem


def _open(url: str, prefix: str) -> OpenSearchGenerations:
    options = OpenSearchOptions(index_prefix=prefix, number_of_shards=1, number_of_replicas=0)
    return OpenSearchGenerations(opensearch_client(url), options)


class TestOpenSearchGenerations(TextGenerationsContract):
    @pytest.fixture
    async def store(
        self, opensearch_url: str, prefix: str, admin: AsyncOpenSearch
    ) -> AsyncIterator[OpenSearchGenerations]:
        store = _open(opensearch_url, prefix)
        yield store
        await store.close()

    @pytest.fixture
    async def reopen(
        self, store: OpenSearchGenerations, opensearch_url: str, prefix: str
    ) -> AsyncIterator[Reopen]:
        opened: list[OpenSearchGenerations] = []

        async def again() -> OpenSearchGenerations:
            await store.close()
            opened.append(_open(opensearch_url, prefix))
            return opened[-1]

        yield again
        for s in opened:
            await s.close()


async def test_the_index_from_before_generations_is_v1_and_the_alias_moves(
    opensearch_url: str, prefix: str, admin: AsyncOpenSearch
) -> None:
    options = OpenSearchOptions(index_prefix=prefix, number_of_shards=1, number_of_replicas=0)
    legacy = OpenSearchTextIndex(opensearch_client(opensearch_url), options)
    await legacy.upsert(T, [mem("old", "orchard from before")])
    await legacy.close()
    store = _open(opensearch_url, prefix)
    [v1] = await store.list_generations()
    assert (v1.name, v1.live, v1.count) == ("v1", True, 1)
    created = await store.create_generation("")
    await store.swap_generation(created.name)
    alias = schema.alias_name(prefix)
    assert list(await admin.indices.get_alias(name=alias)) == [f"{alias}-{created.name}"]
    # Another replica that never saw the swap writes through the alias into the new one.
    other = _open(opensearch_url, prefix)
    await (await other.index()).upsert(T, [mem("after", "orchard after the swap")])
    assert await (await store.index(created.name)).count(T) == 1
    assert await (await store.index("v1")).count(T) == 1
    await other.close()
    await store.close()
