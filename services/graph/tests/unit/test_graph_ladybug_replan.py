"""A ladybug connection plans a statement once, from the statistics of its first run. The
relations lookup is unhinted (its fresh plan is the fastest), so a reader connection made
while the graph was much smaller is replaced: measured on 10k memories, a plan made on an
empty relation table took 34 ms a key after 13k edges, a fresh one 0.45 ms.
"""

from __future__ import annotations

from pathlib import Path

from engram_core.model import Relation
from engram_graph.adapters.ladybug_store import REPLAN_MIN_ROWS, LadybugGraphStore, _Replan
from engram_testing.contracts.graph import T, mem


def test_an_epoch_starts_each_time_a_table_doubles() -> None:
    plans = _Replan(memories=1000, edges=0)
    plans.grew("memories", 999)
    plans.grew("edges", REPLAN_MIN_ROWS * 2 - 1)
    assert plans.epoch == 0
    plans.grew("edges", 1)  # 0 -> 200 edges: from the floor, doubled
    assert plans.epoch == 1  # new connections see 1999 memories and 200 edges
    plans.grew("memories", 1998)
    assert plans.epoch == 1
    plans.grew("memories", 1)  # 1999 -> 3998 memories
    assert plans.epoch == 2
    plans.grew("edges", 199)  # 200 -> 399: not yet double
    assert plans.epoch == 2
    plans.grew("edges", 1)
    assert plans.epoch == 3


async def test_readers_renew_their_connection_after_the_graph_doubled(tmp_path: Path) -> None:
    store = LadybugGraphStore(tmp_path / "g.lbug", readers=1)
    try:
        n = 3 * REPLAN_MIN_ROWS
        await store.upsert(T, [(mem(f"m{i}", version=1), []) for i in range(n)])
        assert await store.relations(T, ["m0"]) == []  # planned on an empty relation table
        before = store._reader_list[0].conn
        edges = [Relation(f"m{i}", f"m{i + 1}", "RELATED_TO", 0.5) for i in range(n - 1)]
        assert await store.add_relations(T, edges, 2) == n - 1
        found = await store.relations(T, ["m0", "m5"])
        assert store._reader_list[0].conn is not before
        assert sorted((r.source_id, r.target_id) for r in found) == [
            ("m0", "m1"),
            ("m4", "m5"),
            ("m5", "m6"),
        ]
        renewed = store._reader_list[0].conn
        await store.add_relations(T, edges[:10], 3)  # updates of a few: no new epoch
        await store.relations(T, ["m0"])
        assert store._reader_list[0].conn is renewed
    finally:
        await store.close()


async def test_a_reopened_store_counts_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "g.lbug"
    store = LadybugGraphStore(path)
    await store.upsert(T, [(mem(f"m{i}", version=1), []) for i in range(3)])
    await store.add_relations(T, [Relation("m0", "m1", "RELATED_TO", 0.5)], 2)
    await store.close()
    store = LadybugGraphStore(path)
    try:
        assert store._replan._rows == {"memories": 3, "edges": 1}
    finally:
        await store.close()
