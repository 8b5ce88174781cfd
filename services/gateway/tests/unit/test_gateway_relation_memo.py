"""RelationMemo: each memory's relations asked of the graph once per recall."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from engram_core.model import Relation
from engram_gateway.service.relation_memo import RelationMemo

EDGES = [
    Relation("a", "b", "RELATES_TO"),
    Relation("b", "c", "INVALIDATED_BY"),
    Relation("d", "a", "EVOLVED_INTO"),
]


class Graph:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []
        self.failing = False

    async def relations(
        self, tenant: str, ids: Sequence[str], origin: str = "", timeout: float | None = None
    ) -> list[Relation]:
        if self.failing:
            raise TimeoutError
        self.asked.append(list(ids))
        wanted = set(ids)
        return [r for r in EDGES if r.source_id in wanted or r.target_id in wanted]


def keys(relations: Sequence[Relation]) -> set[tuple[str, str]]:
    return {(r.source_id, r.target_id) for r in relations}


async def test_asks_only_for_ids_not_asked_before() -> None:
    graph = Graph()
    memo = RelationMemo(graph, "t")  # type: ignore[arg-type]
    assert keys(await memo.relations(["a", "x"], 1.0)) == {("a", "b"), ("d", "a")}
    assert keys(await memo.relations(["x", "a"], 1.0)) == {("a", "b"), ("d", "a")}
    assert keys(await memo.relations(["b", "c"], 1.0)) == {("a", "b"), ("b", "c")}
    # "x" has no edges and is not asked again; "a" was; only b and c are new.
    assert graph.asked == [["a", "x"], ["b", "c"]]
    assert memo.calls == 2


async def test_an_edge_seen_twice_is_returned_once() -> None:
    memo = RelationMemo(Graph(), "t")  # type: ignore[arg-type]
    await memo.relations(["a"], 1.0)
    await memo.relations(["b"], 1.0)  # a-b comes back again
    both = await memo.relations(["a", "b"], 1.0)
    assert sorted((r.source_id, r.target_id) for r in both) == [("a", "b"), ("b", "c"), ("d", "a")]


async def test_a_failed_lookup_leaves_the_ids_to_ask_again() -> None:
    graph = Graph()
    memo = RelationMemo(graph, "t")  # type: ignore[arg-type]
    graph.failing = True
    with pytest.raises(TimeoutError):
        await memo.relations(["a"], 1.0)
    graph.failing = False
    assert keys(await memo.relations(["a"], 1.0)) == {("a", "b"), ("d", "a")}
    assert graph.asked == [["a"]]
