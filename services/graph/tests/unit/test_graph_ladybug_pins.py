"""Updates pin ladybug's buffer pool until a checkpoint: many small update transactions (a
graph rebuild replays relations one per call) filled it ("buffer pool is full") long before
ladybug's own WAL-size checkpoint. The store checkpoints by what its updates pin.

On a 32 MiB pool without that, one-edge updates failed after 219 calls and one-memory edits
after 126 (ladybug 0.22); each test here runs three times as many.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engram_core.model import AccessUpdate, Relation
from engram_graph.adapters.ladybug_store import LadybugGraphStore
from engram_testing.contracts.graph import T, mem

POOL = 32 << 20
N = 50
START = datetime(2024, 1, 1, tzinfo=UTC)


def edge(i: int, strength: float = 0.5) -> Relation:
    return Relation(
        source_id=f"m{i}",
        target_id=f"m{i + 1}",
        type="RELATED_TO",
        strength=strength,
        origin="system",
        created_at=START,
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LadybugGraphStore]:
    store = LadybugGraphStore(tmp_path / "graph.lbug", buffer_pool_bytes=POOL)
    await store.upsert(T, [(mem(f"m{i}", version=1), []) for i in range(N)])
    await store.add_relations(T, [edge(i) for i in range(N - 1)], 2)
    yield store
    await store.close()


async def test_many_one_edge_updates_do_not_fill_the_pool(store: LadybugGraphStore) -> None:
    for k in range(660):
        assert await store.add_relations(T, [edge(k % (N - 1), k / 1000)], 3 + k) == 1
    # The latest update of m0's edge (k = 637) is the stored one.
    assert [r.strength for r in await store.relations(T, ["m0"])] == [637 / 1000]


async def test_many_one_memory_edits_do_not_fill_the_pool(store: LadybugGraphStore) -> None:
    for k in range(380):
        result = await store.upsert(T, [(mem(f"m{k % N}", version=3 + k), [])])
        assert result.applied == 1


async def test_many_access_updates_do_not_fill_the_pool(store: LadybugGraphStore) -> None:
    for k in range(2300):
        at = START + timedelta(seconds=k)
        assert await store.update_access(T, [AccessUpdate(f"m{k % N}", at, k)]) == 1
