"""The OpenSearch text index passes the TextIndex contract against a real server, plus what only
makes sense there: the alias, concurrent start-up, the server-side version guard, retries.

Each test gets its own index prefix (so its own template, index and alias), deleted afterwards.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opensearchpy import AsyncOpenSearch

from engram_core.errors import Unavailable
from engram_core.model import AccessUpdate, Filter, Memory, RelevanceUpdate, UpsertResult
from engram_core.ordering import Sort, best
from engram_lexical.adapters import opensearch_schema as schema
from engram_lexical.adapters.opensearch_generations import OpenSearchGenerations
from engram_lexical.adapters.opensearch_index import (
    OpenSearchOptions,
    OpenSearchTextIndex,
    opensearch_client,
)
from engram_testing.contracts.lexical import BASE, T, TextIndexContract, full_memory, ids, mem

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def _options(prefix: str, **overrides: object) -> OpenSearchOptions:
    base = OpenSearchOptions(
        index_prefix=prefix, number_of_shards=1, number_of_replicas=0, timeout_s=10.0
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


Make = Callable[..., OpenSearchTextIndex]


@pytest.fixture
async def make(opensearch_url: str, prefix: str, admin: AsyncOpenSearch) -> AsyncIterator[Make]:
    """Adapters on the test's prefix (options overridable), all closed after the test."""
    made: list[OpenSearchTextIndex] = []

    def build(**overrides: object) -> OpenSearchTextIndex:
        client = opensearch_client(opensearch_url, timeout_s=10.0)
        made.append(OpenSearchTextIndex(client, _options(prefix, **overrides)))
        return made[-1]

    yield build
    for index in made:
        await index.close()


class TestOpenSearchTextIndex(TextIndexContract):
    @pytest.fixture
    async def index(self, make: Make) -> OpenSearchTextIndex:
        return await make().open()


# -- what only makes sense on the server -------------------------------------------------------


async def test_alias_points_at_the_versioned_index_with_strict_mappings(
    make: Make, prefix: str, admin: AsyncOpenSearch
) -> None:
    await make().open()
    alias = schema.alias_name(prefix)
    aliases = await admin.indices.get_alias(name=alias)
    assert list(aliases) == [f"{alias}-v1"]
    assert aliases[f"{alias}-v1"]["aliases"][alias].get("is_write_index") is True
    mapping = (await admin.indices.get_mapping(index=alias))[f"{alias}-v1"]["mappings"]
    assert mapping["dynamic"] == "strict"
    assert mapping["_routing"] == {"required": True}
    assert mapping["properties"]["content"]["analyzer"] == "english"
    assert mapping["properties"]["memory"]["enabled"] is False
    settings = (await admin.indices.get_settings(index=alias))[f"{alias}-v1"]["settings"]
    assert settings["index"]["refresh_interval"] == "200ms"
    template = await admin.indices.get_index_template(name=schema.template_name(prefix))
    assert template["index_templates"][0]["index_template"]["index_patterns"] == [f"{alias}-v*"]


async def test_two_adapters_starting_at_once_both_succeed(
    make: Make, prefix: str, admin: AsyncOpenSearch
) -> None:
    adapters = [make() for _ in range(4)]
    await asyncio.gather(*(a.open() for a in adapters))
    # Both write and read the same index.
    await adapters[0].upsert(T, [mem("a", "started together")])
    assert ids(await adapters[3].search(T, "together", Filter(), 5)) == ["a"]
    assert len(await admin.indices.get(index=f"{schema.alias_name(prefix)}-v*")) == 1


@pytest.mark.parametrize("refresh", ["wait_for", "true"])
async def test_writes_are_searchable_when_they_return(make: Make, refresh: str) -> None:
    # Read-your-writes: ingest acks after upsert returns, recall searches right after.
    index = await make(refresh=refresh, refresh_interval_s=1.0).open()
    for i in range(3):
        await index.upsert(T, [mem(f"m{i}", f"round {i} marmalade", version=i + 1)])
        assert len(await index.search(T, "marmalade", Filter(), 10)) == i + 1
        assert await index.count(T) == i + 1
    await index.delete(T, ["m0"], version=10)
    assert "m0" not in ids(await index.search(T, "marmalade", Filter(), 10))
    assert await index.count(T) == 2


async def test_setup_happens_on_first_use_and_survives_an_existing_alias(make: Make) -> None:
    first = make()  # never opened explicitly
    assert await first.upsert(T, [mem("a", "lazy")]) == UpsertResult(1, 0)
    second = await make().open()
    assert await second.count(T) == 1


async def test_a_stale_bulk_version_is_skipped_by_the_server(
    make: Make, prefix: str, admin: AsyncOpenSearch
) -> None:
    index = await make().open()
    await index.upsert(T, [mem("a", "newest", version=5), mem("b", "bee", version=1)])
    # Two writers racing: the older one arrives last and loses, whatever the interleaving.
    results = await asyncio.gather(
        *(index.upsert(T, [mem("a", f"v{v}", version=v)]) for v in (3, 7, 4, 6))
    )
    assert sum(r.applied for r in results) <= 2
    assert [(m.content, m.version) for m in await index.get(T, ["a"])] == [("v7", 7)]
    doc = await admin.get(index=schema.alias_name(prefix), id=schema.doc_id(T, "a"), routing=T)
    assert doc["_version"] == 7


async def test_a_stale_tombstone_and_stale_access_are_refused(
    make: Make, prefix: str, admin: AsyncOpenSearch
) -> None:
    index = await make().open()
    await index.upsert(T, [mem("a", "kept", version=4)])
    assert await index.delete(T, ["a"], version=4) == 0
    late = AccessUpdate(id="a", last_accessed=NOW, access_count=9)
    early = AccessUpdate(id="a", last_accessed=NOW - timedelta(days=1), access_count=3)
    # The same access twice at once: a tie replaces (the incoming wins), so both apply.
    both = await asyncio.gather(index.update_access(T, [late]), index.update_access(T, [late]))
    assert both == [1, 1]
    assert await index.update_access(T, [early]) == 0
    [got] = await index.get(T, ["a"])
    assert (got.content, got.version, got.access_count) == ("kept", 4, 9)
    # The access statistics never touched the memory's version.
    doc = await admin.get(index=schema.alias_name(prefix), id=schema.doc_id(T, "a"), routing=T)
    assert doc["_version"] == 4


async def test_a_recreated_memory_starts_with_its_own_access_statistics(make: Make) -> None:
    index = await make().open()
    await index.upsert(T, [mem("a", "first life")])
    await index.update_access(T, [AccessUpdate(id="a", last_accessed=NOW, access_count=5)])
    await index.delete(T, ["a"], version=2)
    await index.upsert(T, [mem("a", "second life", version=3)])
    [got] = await index.get(T, ["a"])
    assert (got.content, got.last_accessed, got.access_count) == ("second life", None, 0)


async def test_time_filters_are_exact_to_the_microsecond(make: Make) -> None:
    index = await make().open()
    at = BASE + timedelta(microseconds=500)
    await index.upsert(T, [replace(mem("a", "tick"), timestamp=at)])
    us = timedelta(microseconds=1)
    assert ids(await index.search(T, "tick", Filter(start=at, end=at), 5)) == ["a"]
    assert ids(await index.search(T, "tick", Filter(start=at + us), 5)) == []
    assert ids(await index.search(T, "tick", Filter(end=at - us), 5)) == []


async def test_long_ids_and_odd_tenants_stay_apart(make: Make) -> None:
    index = await make().open()
    long_id = "x" * 600
    # (tenant "a:b", id "c") and (tenant "a", id "b:c") must not share a document.
    await index.upsert("a:b", [mem("c", "colon tenant", tenant="a:b")])
    await index.upsert("a", [mem("b:c", "colon id", tenant="a"), mem(long_id, "long id")])
    assert [m.content for m in await index.get("a:b", ["c"])] == ["colon tenant"]
    assert [m.content for m in await index.get("a", ["b:c", long_id])] == ["colon id", "long id"]
    assert await index.count("a") == 2


async def test_search_hits_carry_access_statistics(make: Make) -> None:
    index = await make().open()
    await index.upsert(T, [full_memory()])
    m = full_memory()
    await index.update_access(T, [AccessUpdate(id=m.id, last_accessed=NOW, access_count=30)])
    [hit] = await index.search(T, "friday", Filter(include_archived=True), 5)
    assert hit.memory == replace(m, last_accessed=NOW, access_count=30)


async def test_a_server_that_does_not_answer_is_unavailable(prefix: str) -> None:
    # Nothing listens on port 9 (discard); connection refused is retried, then Unavailable.
    index = OpenSearchTextIndex(
        opensearch_client("http://127.0.0.1:9", timeout_s=1.0),
        _options(prefix, max_retries=2, retry_backoff_s=0.01, timeout_s=1.0),
    )
    with pytest.raises(Unavailable, match="opensearch"):
        await index.count(T)
    await index.close()
    with pytest.raises(Unavailable):
        await index.count(T)


@pytest.mark.parametrize("refresh", ["wait_for", "true"])
async def test_top_by_score_or_count_sees_writes_when_they_return(make: Make, refresh: str) -> None:
    # A refresh only every 5 s: what `top` finds right after a write, the write waited for.
    index = await make(refresh=refresh, refresh_interval_s=5.0).open()
    await index.upsert(T, [mem("a", minutes=1), mem("b", minutes=2)])
    await index.update_access(T, [AccessUpdate("a", NOW, 4)])
    assert [m.id for m in await index.top(T, Filter(), Sort.ACCESS_COUNT, 1)] == ["a"]
    await index.update_relevance(T, [RelevanceUpdate("a", 0.25)])
    assert [m.id for m in await index.top(T, Filter(), Sort.RELEVANCE, 1)] == ["a"]
    # An upsert raising an existing score, its memory applied in a first request.
    await index.upsert(T, [replace(mem("b", minutes=2, version=2), relevance_score=0.5)])
    listed = await index.top(T, Filter(), Sort.RELEVANCE, 2)
    assert [(m.id, m.relevance_score) for m in listed] == [("b", 0.5), ("a", 0.25)]
    # Memories applied alone after the scored one in the batch was refused still show.
    stale = replace(mem("b", minutes=2, version=2), relevance_score=0.9)
    assert await index.upsert(T, [stale, mem("c", minutes=3)]) == UpsertResult(1, 1)
    assert [m.id for m in await index.top(T, Filter(), Sort.ACCESS_COUNT, 3)][1:] == ["c", "b"]


def _layout_1(prefix: str) -> dict[str, Any]:
    """The mappings of an index made before layout 2: no join field, 32-bit floats."""
    template = schema.index_template(prefix, shards=1, replicas=0, refresh_interval_s=0.2)
    mappings = copy.deepcopy(template["template"]["mappings"])
    del mappings["_meta"]
    del mappings["properties"][schema.JOIN]
    for field in ("importance", "relevance_score"):
        mappings["properties"][field] = {"type": "float"}
    return mappings


def _without_join(source: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in source.items() if k != schema.JOIN}


async def _write_layout_1(admin: AsyncOpenSearch, prefix: str, memories: list[Memory]) -> None:
    """An index of layout 1 holding ``memories`` with access and relevance documents beside
    them, as the adapter wrote them before."""
    alias = schema.alias_name(prefix)
    body = {"mappings": _layout_1(prefix), "aliases": {alias: {"is_write_index": True}}}
    await admin.indices.create(index=f"{alias}-v1", body=body)
    for k, m in enumerate(memories):
        doc = schema.memory_source(T, m, ())
        await admin.index(
            index=alias,
            id=schema.doc_id(T, m.id),
            body=_without_join(doc),
            routing=T,
            version=m.version,
            version_type="external",
        )
        if k % 2:
            access = schema.access_source(T, m.id, NOW, k)
            await admin.index(
                index=alias,
                id=schema.access_id(T, m.id),
                body=_without_join(access),
                routing=T,
                version=schema.access_version(NOW),
                version_type="external_gte",
            )
        if k % 3 == 0:
            scored = _without_join(schema.relevance_source(T, m.id, k / 10))
            await admin.index(index=alias, id=schema.relevance_id(T, m.id), body=scored, routing=T)
    await admin.indices.refresh(index=alias)


async def _assert_top_is_best(index: OpenSearchTextIndex, names: list[str]) -> None:
    stored = await index.get(T, names)
    for sort in (Sort.RELEVANCE, Sort.ACCESS_COUNT):
        for limit in (1, 3, len(names)):
            expected = best(stored, Filter(), sort, limit)
            assert await index.top(T, Filter(), sort, limit) == expected, (sort, limit)


async def test_an_index_of_layout_1_passes_until_a_rebuild_replaces_it(
    make: Make,
    prefix: str,
    admin: AsyncOpenSearch,
    opensearch_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = [f"m{i}" for i in range(8)]
    memories = [replace(mem(n, minutes=i % 3), relevance_score=0.05) for i, n in enumerate(names)]
    await _write_layout_1(admin, prefix, memories)
    caplog.set_level(logging.WARNING)
    index = await make().open()
    alias = schema.alias_name(prefix)
    mapping = (await admin.indices.get_mapping(index=alias))[f"{alias}-v1"]["mappings"]
    assert schema.layout(mapping) == 1
    assert mapping["properties"][schema.JOIN]["type"] == "join"  # added in place
    # Its documents are no children: `top` reads every memory, and says why, once.
    await _assert_top_is_best(index, names)
    warned = [r.getMessage() for r in caplog.records if "rebuild lexical" in r.getMessage()]
    assert len(warned) == 1
    assert f"{alias}-v1 has layout 1" in warned[0]
    # Writes there still work, with the join field now.
    await index.upsert(T, [replace(mem("new", minutes=9), relevance_score=0.95)])
    await index.update_access(T, [AccessUpdate("m2", NOW + timedelta(1), 50)])
    await _assert_top_is_best(index, [*names, "new"])
    assert [m.id for m in await index.top(T, Filter(), Sort.RELEVANCE, 1)] == ["new"]

    # A rebuild's new generation has the layout; once it is live, `top` sorts there.
    options = _options(prefix)
    generations = OpenSearchGenerations(opensearch_client(opensearch_url), options)
    created = await generations.create_generation("")
    target = await generations.index(created.name)
    copied = await index.get(T, [*names, "new"])
    await target.upsert(T, [replace(m, last_accessed=None, access_count=0) for m in copied])
    await target.update_access(
        T, [AccessUpdate(m.id, m.last_accessed, m.access_count) for m in copied if m.last_accessed]
    )
    await target.update_relevance(T, [RelevanceUpdate(m.id, m.relevance_score) for m in copied])
    await generations.swap_generation(created.name)
    mapping = (await admin.indices.get_mapping(index=alias))[f"{alias}-{created.name}"]
    assert schema.layout(mapping["mappings"]) == schema.LAYOUT
    assert await index.get(T, [*names, "new"]) == copied
    await _assert_top_is_best(index, [*names, "new"])
    assert len([r for r in caplog.records if "rebuild lexical" in r.getMessage()]) == 1
    await generations.close()
