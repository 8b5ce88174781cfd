"""The OpenSearch adapter without a server: query building, document ids, retries and error
mapping over a scripted client, and how settings build it. The behaviour against a real
server is tests/integration/contracts/test_lexical_opensearch_contract.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import pytest
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import RequestError, TransportError

from engram_core.codec import memory_to_json
from engram_core.errors import Internal, InvalidArgument, Unavailable
from engram_core.model import (
    AccessUpdate,
    Filter,
    Memory,
    RelevanceUpdate,
    TagMatch,
    TagMode,
    UpsertResult,
)
from engram_core.ordering import Sort
from engram_core.search_text import METADATA_FIELDS
from engram_lexical.adapters import opensearch_index
from engram_lexical.adapters import opensearch_schema as schema
from engram_lexical.adapters.opensearch_generations import OpenSearchGenerations
from engram_lexical.adapters.opensearch_index import OpenSearchOptions, OpenSearchTextIndex
from engram_lexical.bootstrap import build_generations
from engram_lexical.config import Settings
from engram_testing.contracts.lexical import BASE, T, mem

FAST = OpenSearchOptions(index_prefix="unit", max_retries=2, retry_backoff_s=0.001, timeout_s=1)


def scripted(layout: int = schema.LAYOUT) -> MagicMock:
    """A client whose set-up calls succeed, on an index of ``layout``; tests script the data
    calls."""
    client = MagicMock()
    client.indices.put_index_template = AsyncMock(return_value={"acknowledged": True})
    client.indices.exists_alias = AsyncMock(return_value=True)
    client.indices.create = AsyncMock()
    client.indices.put_alias = AsyncMock()
    client.indices.put_settings = AsyncMock(return_value={"acknowledged": True})
    client.indices.put_mapping = AsyncMock(return_value={"acknowledged": True})
    client.indices.refresh = AsyncMock(return_value={})
    meta = {"_meta": {"layout": layout}} if layout > 1 else {}
    mappings = {"unit-memories-v1": {"mappings": {**meta, "dynamic": "strict"}}}
    client.indices.get_mapping = AsyncMock(return_value=mappings)
    client.cluster.health = AsyncMock(return_value={"status": "green"})
    client.close = AsyncMock()
    return client


def items(*statuses: int) -> dict[str, Any]:
    return {"items": [{"index": {"status": s}} for s in statuses]}


# -- schema ---------------------------------------------------------------------------------------


def test_query_words_dedupe_drop_function_words_and_ignore_syntax() -> None:
    assert schema.query_words("When did Sarah ship the BETA? beta!") == ["sarah", "ship", "beta"]
    assert schema.query_words("to be or not to be") == ["to", "be", "or", "not"]
    assert schema.query_words('foo:bar AND ( "x') == ["foo", "bar", "x"]
    assert schema.query_words("{}()<>!?|&&||~^*") == []
    assert len(schema.query_words(" ".join(f"w{i}" for i in range(500)))) == 64


def test_doc_ids_keep_tenant_and_id_apart_and_fit_the_limit() -> None:
    assert schema.doc_id("a:b", "c") != schema.doc_id("a", "b:c")
    assert schema.access_id("t", "x") != schema.doc_id("t", "x")
    long_key = schema.doc_id("t", "é" * 400)
    assert len(long_key.encode()) <= 512
    assert long_key != schema.doc_id("t", "é" * 401)


def test_filter_query_mirrors_the_reference_semantics() -> None:
    flt = Filter(
        tags=("Project/Alpha", "lang"),
        tag_mode=TagMode.ALL,
        tag_match=TagMatch.PREFIX,
        exclude_tags=("x/y",),
        types=("Decision",),
        exclude_types=("Context",),
    )
    q = schema.filter_query(T, flt)["bool"]
    assert {"term": {"tag_prefixes": "project:alpha"}} in q["filter"]
    assert {"term": {"tag_prefixes": "lang"}} in q["filter"]
    assert {"term": {"kind": "memory"}} in q["filter"]
    assert {"term": {"tenant": T}} in q["filter"]
    assert {"terms": {"tag_prefixes": ["x:y"]}} in q["must_not"]
    assert {"term": {"archived": True}} in q["must_not"]
    assert {"terms": {"type": ["Context"]}} in q["must_not"]
    archived = schema.filter_query(T, Filter(include_archived=True))["bool"]["must_not"]
    assert archived == []


def test_memory_source_indexes_tags_as_words_and_keeps_the_whole_memory() -> None:
    m = mem("a", "hello", tags=("project:alpha", "entity:people:sarah_b"))
    source = schema.memory_source(T, m, METADATA_FIELDS)
    assert source["content"] == ["hello", "project alpha", "entity people sarah b"]
    assert source["memory"]["id"] == "a"
    assert source["tag_prefixes"] == list(m.tag_prefixes)


def test_the_template_makes_children_of_access_and_relevance_documents() -> None:
    template = schema.index_template("p", shards=1, replicas=0, refresh_interval_s=0.2)
    mappings = template["template"]["mappings"]
    assert schema.layout(mappings) == schema.LAYOUT == 2
    assert schema.layout({"dynamic": "strict"}) == 1  # an index made before layouts
    assert mappings["properties"][schema.JOIN] == schema.JOIN_MAPPING["properties"][schema.JOIN]
    assert schema.JOIN_MAPPING["properties"][schema.JOIN]["relations"] == {
        "memory": ["access", "relevance"]
    }
    # Sorted by `top`: doubles, so the index orders them as engram_core.ordering does.
    assert mappings["properties"]["relevance_score"]["type"] == "double"
    assert mappings["properties"]["importance"]["type"] == "double"
    m = replace(mem("a"), relevance_score=0.25, access_count=3)
    source = schema.memory_source(T, m, METADATA_FIELDS)
    assert (source["join"], source["relevance_score"], source["access_count"]) == (
        "memory",
        0.25,
        3,
    )
    parent = schema.doc_id(T, "a")
    access = schema.access_source(T, "a", BASE, 2)
    assert access["join"] == {"name": "access", "parent": parent}
    assert schema.relevance_source(T, "a", 0.5)["join"] == {"name": "relevance", "parent": parent}
    assert schema.raise_relevance(T, "a", 0.5)["upsert"]["join"]["parent"] == parent
    assert "join" not in schema.tombstone_source(T, "a", 2)


def test_top_bodies_sort_in_the_listing_order_or_pass_by_id() -> None:
    flt = Filter(types=("Decision",))
    by_importance = schema.top_body(T, flt, Sort.IMPORTANCE, 5)
    assert by_importance["sort"] == [
        {"importance": "desc"},
        {"timestamp_us": "desc"},
        {"id": "asc"},
    ]
    assert by_importance["size"] == 5
    assert by_importance["query"] == schema.filter_query(T, flt)
    assert schema.top_body(T, flt, Sort.RECENCY, 5)["sort"] == [
        {"timestamp_us": "desc"},
        {"id": "asc"},
    ]
    # Relevance and access counts live in child documents.
    assert set(schema.TOP_KEYS) == {Sort.IMPORTANCE, Sort.RECENCY}
    assert set(schema.DERIVED) == {Sort.RELEVANCE, Sort.ACCESS_COUNT}
    children = schema.children_body(T, flt, Sort.ACCESS_COUNT, 5)
    assert children["sort"] == [{"access_count": "desc"}]
    assert {"term": {"kind": "access"}} in children["query"]["bool"]["filter"]
    assert {"has_parent": {"parent_type": "memory", "query": schema.filter_query(T, flt)}} in (
        children["query"]["bool"]["filter"]
    )
    childless = schema.childless_body(T, flt, Sort.RELEVANCE, 5)
    assert childless["sort"] == [
        {"relevance_score": "desc"},
        {"timestamp_us": "desc"},
        {"id": "asc"},
    ]
    assert childless["query"]["bool"]["must_not"][-1] == {
        "has_child": {"type": "relevance", "query": {"match_all": {}}}
    }
    tied = schema.tied_body(T, flt, Sort.RELEVANCE, 0.125, 5)
    assert tied["sort"] == [{"timestamp_us": "desc"}, {"id": "asc"}]
    assert tied["query"]["bool"]["filter"][-1] == {
        "has_child": {"type": "relevance", "query": {"term": {"relevance_score": 0.125}}}
    }
    # The bodies do not share the filter's lists: each query stays as built.
    assert schema.filter_query(T, flt) == by_importance["query"]
    # A layout-1 index passes by id.
    passing = schema.scan_body(T, "m7", 100, flt)
    assert passing["query"] == schema.filter_query(T, flt)
    assert (passing["sort"], passing["search_after"]) == ([{"id": "asc"}], ["m7"])
    assert schema.scan_body(T, None, 100)["query"] == {"bool": {"filter": schema.live(T)}}


def _hit(m: Memory) -> dict[str, Any]:
    return {"_source": {"memory": json.loads(memory_to_json(m))}, "sort": [m.id]}


async def test_top_by_access_count_on_a_layout_1_index_passes_every_page(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(opensearch_index, "_TOP_PAGE", 2)
    memories = [mem(i, minutes=n) for n, i in enumerate(["a", "b", "c", "d", "e"])]
    pages = {None: memories[:2], "b": memories[2:4], "d": memories[4:]}
    counts = {"c": 3, "e": 3, "a": 1}  # c and e tie: e is newer

    async def search(*, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        after = body.get("search_after", [None])[0]
        return {"hits": {"hits": [_hit(m) for m in pages[after]]}}

    async def mget(*, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        docs = []
        for d in body["docs"]:
            found = next((i for i in counts if d["_id"] == schema.access_id(T, i)), None)
            source = {"last_accessed": BASE.isoformat(), "access_count": counts.get(found or "")}
            docs.append({"found": True, "_source": source} if found else {"found": False})
        return {"docs": docs}

    client = scripted(layout=1)
    client.search = AsyncMock(side_effect=search)
    client.mget = AsyncMock(side_effect=mget)
    index = OpenSearchTextIndex(client, FAST)
    listed = await index.top(T, Filter(), Sort.ACCESS_COUNT, 3)
    assert [(m.id, m.access_count) for m in listed] == [("e", 3), ("c", 3), ("a", 1)]
    assert listed[0].last_accessed == BASE
    assert client.search.await_count == 3
    assert await index.top(T, Filter(), Sort.ACCESS_COUNT, 0) == []
    assert client.search.await_count == 3
    # Said once per index, not per call.
    await index.top(T, Filter(), Sort.ACCESS_COUNT, 3)
    warned = [r for r in caplog.records if "engram rebuild lexical" in r.getMessage()]
    assert len(warned) == 1
    assert "unit-memories-v1 has layout 1" in warned[0].getMessage()


def _found(m: Memory) -> dict[str, Any]:
    return {
        "found": True,
        "_version": m.version,
        "_source": {"kind": "memory", **_hit(m)["_source"]},
    }


async def test_top_by_relevance_settles_the_ties_at_the_lowest_child_value() -> None:
    scores = {"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.5, "e": 0.7}
    memories = {
        i: replace(mem(i, minutes=n), relevance_score=scores.get(i, 0.0))
        for n, i in enumerate("abcdefg")
    }
    bodies: list[dict[str, Any]] = []

    async def search(*, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        bodies.append(body)
        if body["sort"] == [{"relevance_score": "desc"}]:  # children: "b" stands for 0.5
            hits = [("a", 0.9), ("e", 0.7), ("b", 0.5)]
        elif "timestamp_us" in body["sort"][0]:  # tied at 0.5: newest first
            hits = [("d", 0.5), ("c", 0.5), ("b", 0.5)]
        else:  # childless, by their own value
            hits = [("g", 0.0), ("f", 0.0)]
        return {"hits": {"hits": [{"_source": {"id": i}, "sort": [v]} for i, v in hits]}}

    async def mget(*, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        docs: list[dict[str, Any]] = []
        for d in body["docs"]:
            m = next((m for i, m in memories.items() if d["_id"] == schema.doc_id(T, i)), None)
            docs.append(_found(m) if m else {"found": False})
        return {"docs": docs}

    client = scripted()
    client.search = AsyncMock(side_effect=search)
    client.mget = AsyncMock(side_effect=mget)
    index = OpenSearchTextIndex(client, FAST)
    listed = await index.top(T, Filter(), Sort.RELEVANCE, 3)
    assert [m.id for m in listed] == ["a", "e", "d"]
    assert len(bodies) == 3
    assert bodies[-1] == schema.tied_body(T, Filter(), Sort.RELEVANCE, 0.5, 3)
    # One read of the memories named, each once, with their access and relevance documents.
    [read] = client.mget.await_args_list
    assert len(read.kwargs["body"]["docs"]) == 3 * 7
    # Fewer children than the limit: they are all there is, no tie is left to settle.
    bodies.clear()
    listed = await index.top(T, Filter(), Sort.RELEVANCE, 7)
    assert [m.id for m in listed] == ["a", "e", "b", "g", "f"]
    assert len(bodies) == 2


# -- retries and errors ---------------------------------------------------------------------------


async def test_transient_failures_are_retried() -> None:
    client = scripted()
    client.count = AsyncMock(
        side_effect=[
            TransportError(503, "unavailable_shards_exception", {}),
            OSConnectionError("N/A", "refused", OSError()),
            {"count": 3},
        ]
    )
    assert await OpenSearchTextIndex(client, FAST).count(T) == 3
    assert client.count.await_count == 3


async def test_retries_are_bounded_then_unavailable() -> None:
    client = scripted()
    client.count = AsyncMock(side_effect=TransportError(429, "too_many_requests", {}))
    with pytest.raises(Unavailable, match="opensearch"):
        await OpenSearchTextIndex(client, FAST).count(T)
    assert client.count.await_count == 3


async def test_a_bad_request_is_internal_and_not_retried() -> None:
    client = scripted()
    client.count = AsyncMock(side_effect=RequestError(400, "parsing_exception", {}))
    with pytest.raises(Internal):
        await OpenSearchTextIndex(client, FAST).count(T)
    assert client.count.await_count == 1


async def test_bulk_items_rejected_as_overloaded_are_sent_again() -> None:
    client = scripted()
    client.bulk = AsyncMock(side_effect=[items(201, 429, 409), items(201)])
    index = OpenSearchTextIndex(client, FAST)
    result = await index.upsert(T, [mem("a"), mem("b"), mem("c")])
    assert result == UpsertResult(applied=2, skipped=1)
    resent = client.bulk.await_args_list[1].kwargs["body"]
    assert resent[0]["index"]["_id"] == schema.doc_id(T, "b")
    assert len(resent) == 2
    first = client.bulk.await_args_list[0].kwargs
    assert first["refresh"] == "wait_for"
    assert first["require_alias"] is True
    assert first["body"][0]["index"] == {
        "_id": schema.doc_id(T, "a"),
        "routing": T,
        "version": 1,
        "version_type": "external",
    }


async def test_an_upsert_with_derived_documents_waits_once_after_them() -> None:
    client = scripted()
    client.bulk = AsyncMock(side_effect=[items(201, 201), items(201)])
    index = OpenSearchTextIndex(client, FAST)
    scored = replace(mem("a"), relevance_score=0.5)
    assert await index.upsert(T, [scored, mem("b")]) == UpsertResult(applied=2, skipped=0)
    memories, derived = client.bulk.await_args_list
    assert "refresh" not in memories.kwargs
    assert derived.kwargs["refresh"] == "wait_for"
    assert derived.kwargs["body"][0]["update"]["_id"] == schema.relevance_id(T, "a")
    client.indices.refresh.assert_not_awaited()
    # The scored memory skipped, the other applied: nothing else to wait on, so a refresh.
    client.bulk = AsyncMock(return_value=items(409, 201))
    assert await index.upsert(T, [scored, mem("b", version=2)]) == UpsertResult(1, 1)
    assert client.bulk.await_count == 1
    client.indices.refresh.assert_awaited_once()


async def test_access_and_relevance_writes_wait_for_a_refresh() -> None:
    client = scripted()
    live = [_found(mem("a"))]
    client.mget = AsyncMock(return_value={"docs": [*live, {"found": False}, {"found": False}]})
    client.bulk = AsyncMock(return_value=items(201))
    index = OpenSearchTextIndex(client, FAST)
    assert await index.update_access(T, [AccessUpdate("a", BASE, 2)]) == 1
    client.mget = AsyncMock(return_value={"docs": live})
    assert await index.update_relevance(T, [RelevanceUpdate("a", 0.5)]) == 1
    access, relevance = client.bulk.await_args_list
    assert access.kwargs["refresh"] == relevance.kwargs["refresh"] == "wait_for"


async def test_bulk_items_still_rejected_make_the_call_unavailable() -> None:
    client = scripted()
    client.bulk = AsyncMock(return_value=items(429))
    with pytest.raises(Unavailable):
        await OpenSearchTextIndex(client, FAST).upsert(T, [mem("a")])
    assert client.bulk.await_count == 3


async def test_a_document_the_mapping_rejects_names_the_memory() -> None:
    client = scripted()
    rejected = {"status": 400, "error": {"type": "mapper_parsing_exception", "reason": "bad"}}
    response = {"items": [{"index": {"status": 201}}, {"index": rejected}]}
    client.bulk = AsyncMock(return_value=response)
    with pytest.raises(InvalidArgument) as err:
        await OpenSearchTextIndex(client, FAST).upsert(T, [mem("a"), mem("b")])
    assert err.value.field == "memories[1]"


async def test_setup_treats_a_lost_creation_race_as_success() -> None:
    client = scripted()
    client.indices.exists_alias = AsyncMock(side_effect=[False, True])
    client.indices.create = AsyncMock(
        side_effect=RequestError(400, "resource_already_exists_exception", {})
    )
    client.count = AsyncMock(return_value={"count": 0})
    index = await OpenSearchTextIndex(client, FAST).open()
    assert await index.count(T) == 0
    client.indices.put_alias.assert_not_awaited()
    assert client.indices.put_index_template.await_count == 1
    # The join field, added in place to an index made before it (a no-op otherwise).
    client.indices.put_mapping.assert_awaited_once_with(
        index="unit-memories", body=schema.JOIN_MAPPING
    )


async def test_a_named_generation_gets_the_join_field_and_nothing_created() -> None:
    client = scripted()
    client.count = AsyncMock(return_value={"count": 0})
    index = OpenSearchTextIndex(client, FAST, index="unit-memories-v2")
    assert await index.count(T) == 0
    assert await index.count(T) == 0
    client.indices.put_mapping.assert_awaited_once_with(
        index="unit-memories-v2", body=schema.JOIN_MAPPING
    )
    client.indices.create.assert_not_awaited()
    client.indices.put_index_template.assert_not_awaited()


async def test_a_deleted_index_is_set_up_again_on_the_next_call() -> None:
    client = scripted()
    missing = TransportError(404, "index_not_found_exception", {})
    client.count = AsyncMock(side_effect=[missing, {"count": 0}])
    index = OpenSearchTextIndex(client, FAST)
    with pytest.raises(Unavailable):
        await index.count(T)
    assert await index.count(T) == 0
    assert client.indices.put_index_template.await_count == 2


# -- settings and bootstrap -----------------------------------------------------------------------


async def test_opensearch_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("ENGRAM_LEXICAL_BACKEND", "opensearch")
    monkeypatch.setenv("ENGRAM_LEXICAL_OPENSEARCH__URL", "http://a:9200,http://b:9200")
    monkeypatch.setenv("ENGRAM_LEXICAL_OPENSEARCH__USERNAME", "engram")
    monkeypatch.setenv("ENGRAM_LEXICAL_OPENSEARCH__PASSWORD_FILE", str(secret))
    monkeypatch.setenv("ENGRAM_LEXICAL_OPENSEARCH__INDEX_PREFIX", "prod")
    monkeypatch.setenv("ENGRAM_LEXICAL_OPENSEARCH__REFRESH", "true")
    settings = Settings()
    assert settings.backend == "opensearch"
    assert settings.opensearch.index_prefix == "prod"
    generations = build_generations(settings)
    assert isinstance(generations, OpenSearchGenerations)
    index = await generations.index()
    assert isinstance(index, OpenSearchTextIndex)
    assert index.alias == "prod-memories"
    hosts = index._client.transport.hosts
    assert [(h["host"], h["port"]) for h in hosts] == [("a", 9200), ("b", 9200)]
    assert index._client.transport.kwargs["http_auth"] == ("engram", "s3cret")


def test_the_default_backend_stays_tantivy() -> None:
    assert Settings().backend == "tantivy"
    with pytest.raises(ValueError, match="index_prefix"):
        Settings.model_validate({"opensearch": {"index_prefix": "Bad Prefix"}})
