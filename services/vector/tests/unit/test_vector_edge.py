"""Qdrant Edge specifics: persistence, directory ownership, HNSW rebuilds off the process."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engram_core.errors import InvalidArgument, Unavailable
from engram_core.model import AccessUpdate, Filter, UpsertResult
from engram_testing.contracts.vector import DIM, T, axis, mem
from engram_testing.fakes.vector import FakeVectorIndex
from engram_vector.adapters import edge
from engram_vector.adapters.edge import EdgeOptions, EdgeVectorIndex

NO_OPTIMIZE = EdgeOptions(dimension=DIM, optimize_enabled=False)
# Tiny thresholds so a few thousand 8-d points get an HNSW graph.
HNSW = EdgeOptions(
    dimension=DIM,
    optimize_enabled=False,
    indexing_threshold_kb=1,
    full_scan_threshold_kb=1,
    hnsw_m=8,
    hnsw_ef_construct=32,
)


def random_vectors(n: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(n)]


async def test_data_survives_a_restart(tmp_path: Path) -> None:
    root = tmp_path / "vector"
    index = await EdgeVectorIndex.open(root, NO_OPTIMIZE)
    await index.upsert(T, [(mem("a", "kept", version=3), axis(0)), (mem("b"), axis(1))])
    await index.delete(T, ["b"], version=4)
    seen = datetime(2024, 6, 1, tzinfo=UTC)
    await index.update_access(T, [AccessUpdate(id="a", last_accessed=seen, access_count=2)])
    await index.close()

    index = await EdgeVectorIndex.open(root, NO_OPTIMIZE)
    try:
        [a] = await index.get(T, ["a"])
        assert (a.content, a.version, a.last_accessed, a.access_count) == ("kept", 3, seen, 2)
        assert [h.id for h in await index.search(T, axis(0), Filter(), 10)] == ["a"]
        assert await index.count(T) == 1
        # The tombstone came back too.
        assert await index.upsert(T, [(mem("b", version=4), axis(1))]) == UpsertResult(0, 1)
    finally:
        await index.close()


async def test_a_shard_made_without_the_version_index_is_listed_by_sequence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ordering by version needs its range index, which older shards were created without."""
    root = tmp_path / "vector"
    with monkeypatch.context() as patched:
        patched.setattr(edge, "_create_indexes", lambda shard: None)
        index = await EdgeVectorIndex.open(root, NO_OPTIMIZE)
        await index.upsert(T, [(mem("a", version=5), axis(0)), (mem("b", version=2), axis(1))])
        await index.close()

    index = await EdgeVectorIndex.open(root, NO_OPTIMIZE)
    try:
        page = await index.scan_by_sequence(T, None, 1)
        assert [m.id for m in page.memories] == ["b"]
    finally:
        await index.close()


async def test_one_process_owns_the_directory(tmp_path: Path) -> None:
    index = await EdgeVectorIndex.open(tmp_path / "vector", NO_OPTIMIZE)
    try:
        with pytest.raises(Unavailable, match="owned by another process"):
            await EdgeVectorIndex.open(tmp_path / "vector", NO_OPTIMIZE)
    finally:
        await index.close()
    # Released on close.
    again = await EdgeVectorIndex.open(tmp_path / "vector", NO_OPTIMIZE)
    await again.close()


async def test_a_dimension_change_is_refused_clearly(tmp_path: Path) -> None:
    index = await EdgeVectorIndex.open(tmp_path / "vector", NO_OPTIMIZE)
    await index.upsert(T, [(mem("a"), axis(0))])
    await index.close()
    with pytest.raises(Unavailable, match="cannot load vector shard"):
        await EdgeVectorIndex.open(tmp_path / "vector", EdgeOptions(dimension=DIM * 2))


async def test_leftover_generations_are_removed_on_open(tmp_path: Path) -> None:
    root = tmp_path / "vector"
    index = await EdgeVectorIndex.open(root, NO_OPTIMIZE)
    await index.close()
    (root / "gen-000042" / "segments").mkdir(parents=True)
    index = await EdgeVectorIndex.open(root, NO_OPTIMIZE)
    await index.close()
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["gen-000001"]


async def test_optimize_builds_hnsw_while_reads_and_writes_go_on(tmp_path: Path) -> None:
    root = tmp_path / "vector"
    index = await EdgeVectorIndex.open(root, HNSW)
    fake = FakeVectorIndex(dimension=DIM)
    vectors = random_vectors(3000, seed=1)
    items = [(mem(f"m{i}", version=1), v) for i, v in enumerate(vectors)]
    for start in range(0, len(items), 500):
        await index.upsert(T, items[start : start + 500])
        await fake.upsert(T, items[start : start + 500])
    before = await index.info()
    assert before["indexed_vectors"] == 0

    optimizing = asyncio.create_task(index.optimize())
    await asyncio.sleep(0.3)  # the child is running: these land in the old generation
    assert not optimizing.done()
    late = [(mem(f"late{i}", version=1), v) for i, v in enumerate(random_vectors(50, seed=2))]
    changed = [(mem(f"m{i}", "changed", version=2), axis(i % DIM)) for i in range(10)]
    for batch in (late, changed):
        assert (await index.upsert(T, batch)).applied == len(batch)
        await fake.upsert(T, batch)
    assert await index.delete(T, ["m10", "m11"], version=5) == 2
    await fake.delete(T, ["m10", "m11"], version=5)
    seen = datetime(2024, 7, 1, tzinfo=UTC)
    await index.update_access(T, [AccessUpdate(id="m12", last_accessed=seen, access_count=4)])
    assert await index.count(T) == 3000 + 50 - 2  # reads answer during the build

    assert await optimizing is True
    after = await index.info()
    assert after["generation"] == "gen-000002"
    assert int(after["indexed_vectors"]) > 0
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["gen-000002"]

    # Everything written during the build made it across.
    assert await index.count(T) == 3000 + 50 - 2
    assert await index.get(T, ["m10", "m11"]) == []
    assert [m.content for m in await index.get(T, ["m3"])] == ["changed"]
    assert [m.id for m in await index.get(T, ["late49"])] == ["late49"]
    [m12] = await index.get(T, ["m12"])
    assert (m12.last_accessed, m12.access_count) == (seen, 4)
    # HNSW finds the exact neighbour for queries that are stored vectors.
    for i in (0, 500, 2999):
        query = vectors[i]
        assert [h.id for h in await index.search(T, query, Filter(), 1)] == [
            h.id for h in await fake.search(T, query, Filter(), 1)
        ]
    await index.close()

    index = await EdgeVectorIndex.open(root, HNSW)
    try:
        assert (await index.info())["generation"] == "gen-000002"
        assert await index.count(T) == 3000 + 50 - 2
    finally:
        await index.close()


async def test_background_optimizer_runs_after_enough_writes(tmp_path: Path) -> None:
    options = EdgeOptions(
        dimension=DIM,
        indexing_threshold_kb=1,
        full_scan_threshold_kb=1,
        hnsw_m=8,
        hnsw_ef_construct=32,
        optimize_after_writes=1000,
        optimize_check_s=0.05,
    )
    index = await EdgeVectorIndex.open(tmp_path / "vector", options)
    try:
        vectors = random_vectors(1000, seed=3)
        await index.upsert(T, [(mem(f"m{i}"), v) for i, v in enumerate(vectors)])
        for _ in range(600):
            if (await index.info())["generation"] != "gen-000001":
                break
            await asyncio.sleep(0.05)
        info = await index.info()
        assert info["generation"] == "gen-000002"
        assert int(info["indexed_vectors"]) > 0
        assert await index.count(T) == 1000
    finally:
        await index.close()


async def test_close_stops_a_running_optimize(tmp_path: Path) -> None:
    index = await EdgeVectorIndex.open(tmp_path / "vector", HNSW)
    await index.upsert(T, [(mem(f"m{i}"), v) for i, v in enumerate(random_vectors(2000, 4))])
    optimizing = asyncio.create_task(index.optimize())
    await asyncio.sleep(0.2)
    await index.close()
    with pytest.raises(Unavailable, match="closed during optimize"):
        await optimizing
    index = await EdgeVectorIndex.open(tmp_path / "vector", NO_OPTIMIZE)
    try:
        assert await index.count(T) == 2000
    finally:
        await index.close()


async def test_a_scan_and_neighbours_carry_on_across_an_hnsw_rebuild(tmp_path: Path) -> None:
    index = await EdgeVectorIndex.open(tmp_path / "vector", HNSW)
    fake = FakeVectorIndex(dimension=DIM)
    items = [(mem(f"m{i}"), v) for i, v in enumerate(random_vectors(2000, seed=3))]
    for start in range(0, len(items), 500):
        await index.upsert(T, items[start : start + 500])
        await fake.upsert(T, items[start : start + 500])
    try:
        page = await index.scan(T, None, 300)
        seen = [m.id for m in page.memories]
        # The rebuild swaps the shard under the scan: point ids, and so the cursor, stay.
        assert await index.optimize() is True
        cursor = page.next_cursor
        while cursor is not None:
            page = await index.scan(T, cursor, 300)
            seen += [m.id for m in page.memories]
            cursor = page.next_cursor
        assert sorted(seen) == sorted(m.id for m, _ in items)

        # On the HNSW graph: the exact top-5 for nearly every memory (fake = brute force).
        ids_ = [f"m{i}" for i in range(0, 2000, 20)]
        got = await index.neighbours(T, ids_, 5, -1.0)
        want = await fake.neighbours(T, ids_, 5, -1.0)
        found = sum(len({h.id for h in got[i]} & {h.id for h in want[i]}) for i in ids_)
        assert found / (5 * len(ids_)) >= 0.95
        assert all(i not in {h.id for h in got[i]} for i in ids_)

        with pytest.raises(InvalidArgument) as err:
            await index.scan(T, "not-a-cursor", 10)
        assert err.value.field == "cursor"
    finally:
        await index.close()
