"""The ladybug adapter passes the GraphStore contract, and keeps its data across a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import ladybug
import pytest

from engram_core.errors import DeadlineExceeded, InvalidArgument, Unavailable
from engram_core.model import Filter, RelevanceUpdate, UpsertResult
from engram_graph.adapters.codec import NEVER, encode
from engram_graph.adapters.ladybug_store import LadybugGraphStore, _rows
from engram_testing.contracts.graph import (
    SARAH,
    GraphStoreContract,
    T,
    full_memory,
    mem,
    rel,
)


class TestLadybugGraphStore(GraphStoreContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[LadybugGraphStore]:
        store = LadybugGraphStore(tmp_path / "graph" / "graph.lbug", buffer_pool_bytes=64 << 20)
        yield store
        await store.close()


async def test_data_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "graph.lbug"
    store = LadybugGraphStore(path, buffer_pool_bytes=64 << 20)
    m = full_memory()
    await store.upsert(T, [(m, [SARAH]), (mem("b"), [])])
    await store.add_relations(T, [rel(m.id, "b", "LEADS_TO", 0.7)], 1)
    await store.delete(T, ["gone"], version=4)
    await store.close()

    reopened = LadybugGraphStore(path, buffer_pool_bytes=64 << 20)
    try:
        assert await reopened.get(T, [m.id]) == [m]
        assert [
            h.id
            for h in await reopened.search(
                T, ["people:sarah"], [], Filter(include_archived=True), 5
            )
        ] == [m.id]
        assert [(h.id, h.strength) for h in await reopened.related(T, m.id, 1, [], 5)] == [
            ("b", 0.7)
        ]
        # The tombstone survived too.
        assert (await reopened.upsert(T, [(mem("gone", version=3), [])])).skipped == 1
        assert await reopened.count(T) == 2
    finally:
        await reopened.close()


async def test_a_query_past_its_timeout_is_deadline_exceeded(tmp_path: Path) -> None:
    path = tmp_path / "graph.lbug"
    store = LadybugGraphStore(path, query_timeout_ms=50, buffer_pool_bytes=64 << 20)
    try:
        await store.upsert(T, [(mem(f"m{i}"), []) for i in range(60)])
        ring = [rel(f"m{i}", f"m{(i + k) % 60}") for i in range(60) for k in (1, 7, 13)]
        await store.add_relations(T, ring, 1)
        # Every walk of up to 12 hops in a graph of degree 6: far more than 50 ms of work.
        slow = "MATCH (a:Memory)-[:RELATION*1..12]-(b:Memory) RETURN count(*)"
        with pytest.raises(DeadlineExceeded):
            await store._read(_rows, slow, {})
        # The connection is usable afterwards.
        assert await store.count(T) == 60
    finally:
        await store.close()


async def test_concurrent_writes_and_reads_are_serialised_safely(tmp_path: Path) -> None:
    store = LadybugGraphStore(tmp_path / "graph.lbug", buffer_pool_bytes=64 << 20)
    try:
        writes = [store.upsert(T, [(mem(f"m{i}"), [SARAH])]) for i in range(40)]
        reads = [store.search(T, ["people:sarah"], [], Filter(), 100) for _ in range(20)]
        results = await asyncio.gather(*writes, *reads)
        assert all(r == UpsertResult(1, 0) for r in results[:40])
        assert await store.count(T) == 40
        assert len(await store.search(T, ["people:sarah"], [], Filter(), 100)) == 40
    finally:
        await store.close()
    with pytest.raises(Unavailable):
        await store.count(T)


async def test_a_tenant_that_could_alias_keys_is_refused(tmp_path: Path) -> None:
    store = LadybugGraphStore(tmp_path / "graph.lbug", buffer_pool_bytes=64 << 20)
    try:
        with pytest.raises(InvalidArgument) as err:
            await store.upsert("a/b", [(mem("c"), [])])
        assert err.value.field == "tenant"
    finally:
        await store.close()


async def test_a_database_from_before_the_relevance_column_opens_and_scores(
    tmp_path: Path,
) -> None:
    """Nodes written before the ``relevance`` column existed read their score from the
    document; the column is added at open and takes over once written."""
    path = tmp_path / "graph.lbug"
    db = ladybug.Database(str(path), buffer_pool_size=64 << 20)
    conn = ladybug.Connection(db)
    conn.execute(
        "CREATE NODE TABLE Memory(key STRING, tenant STRING, id STRING, type STRING, "
        "tags STRING[], tag_prefixes STRING[], ts INT64, archived BOOLEAN, version INT64, "
        "deleted BOOLEAN, importance DOUBLE, last_accessed INT64, access_count INT64, "
        "doc STRING, PRIMARY KEY(key))"
    )
    old = replace(mem("old"), relevance_score=0.25)
    conn.execute(
        "CREATE (:Memory {key: $k, tenant: $t, id: 'old', type: 'Memory', tags: [], "
        "tag_prefixes: [], ts: 0, archived: false, version: 1, deleted: false, "
        "importance: 0.5, last_accessed: $never, access_count: 0, doc: $doc})",
        {"k": f"{T}/old", "t": T, "never": NEVER, "doc": encode(old)},
    )
    conn.close()
    db.close()

    store = LadybugGraphStore(path, buffer_pool_bytes=64 << 20)
    try:
        assert await store.get(T, ["old"]) == [old]
        assert [m.id for m in (await store.scan(T, None, 10)).memories] == ["old"]
        assert await store.update_relevance(T, [RelevanceUpdate("old", 0.75)]) == 1
        assert [m.relevance_score for m in await store.get(T, ["old"])] == [0.75]
    finally:
        await store.close()


async def test_more_scans_at_once_than_rests_kept_all_complete(tmp_path: Path) -> None:
    # Twelve scans interleaved page by page: the eight rests kept between pages are pushed
    # out, and a scan whose rest is gone walks again from its cursor.
    store = LadybugGraphStore(tmp_path / "graph.lbug", buffer_pool_bytes=64 << 20)
    names = sorted(f"m{i:03d}" for i in range(40))
    await store.upsert(T, [(mem(n), []) for n in names])
    cursors: list[str | None] = [None] * 12
    seen: list[list[str]] = [[] for _ in cursors]
    done = [False] * len(cursors)
    try:
        while not all(done):
            for k in range(len(cursors)):
                if done[k]:
                    continue
                page = await store.scan(T, cursors[k], 3)
                seen[k] += [m.id for m in page.memories]
                cursors[k] = page.next_cursor
                done[k] = page.next_cursor is None
        assert all(ids_ == names for ids_ in seen)
    finally:
        await store.close()
