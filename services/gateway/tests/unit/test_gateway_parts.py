"""Small pieces of the service layer: deadlines, the watermark cache, merging, graph seeds."""

from __future__ import annotations

import asyncio

import pytest

from engram_core.errors import DeadlineExceeded, Unavailable
from engram_core.model import Hit, Memory, Relation
from engram_gateway.service.deadline import Budget, Deadline
from engram_gateway.service.merge import merge, missing_memories, pool_size, with_relations
from engram_gateway.service.query import keywords
from engram_gateway.service.watermark import WatermarkCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_budget_is_a_capped_share_of_what_remains() -> None:
    clock = Clock()
    d = Deadline.within(10.0, clock)
    assert d.budget(Budget(0.5, 2.0)) == 2.0
    clock.now += 9.0
    assert d.budget(Budget(0.5, 2.0)) == pytest.approx(0.5)
    assert d.cap(5.0) == pytest.approx(1.0)
    clock.now += 1.0
    with pytest.raises(DeadlineExceeded):
        d.budget(Budget(0.5, 2.0))


async def test_watermark_reads_are_shared_and_cached() -> None:
    reads = 0
    clock = Clock()

    async def read() -> int:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.01)
        return 7

    wm = WatermarkCache(read, max_age_s=0.02, clock=clock)
    assert await asyncio.gather(*(wm.get() for _ in range(20))) == [7] * 20
    assert reads == 1
    assert await wm.get() == 7
    assert reads == 1
    clock.now += 0.05
    await wm.get()
    assert reads == 2


async def test_watermark_never_goes_back() -> None:
    values = iter([5, 3])

    async def read() -> int:
        return next(values)

    wm = WatermarkCache(read, max_age_s=0)
    assert await wm.get() == 5
    assert await wm.get() == 5


async def test_known_watermark_never_waits_and_refreshes_in_the_background() -> None:
    answers: list[int | Exception] = [Unavailable("down"), 6]
    gate = asyncio.Event()

    async def read() -> int:
        await gate.wait()  # a log that hangs until the gate opens
        v = answers.pop(0)
        if isinstance(v, Exception):
            raise v
        return v

    wm = WatermarkCache(read, max_age_s=0)
    assert wm.known() == 0  # nothing read yet; a read starts
    gate.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert wm.known() == 0  # that read failed: still the last known value; another starts
    for _ in range(3):
        await asyncio.sleep(0)
    assert wm.known() == 6


async def test_wait_for_polls_through_a_log_outage() -> None:
    values: list[int | Exception] = [1, Unavailable("down"), 2, 4]

    async def read() -> int:
        v = values.pop(0) if len(values) > 1 else values[0]
        if isinstance(v, Exception):
            raise v
        return v

    wm = WatermarkCache(read, max_age_s=0)
    assert await wm.wait_for(3, Deadline.within(2.0), poll_s=0.001) == 4
    with pytest.raises(DeadlineExceeded, match="min_sequence 9"):
        await wm.wait_for(9, Deadline.within(0.05), poll_s=0.01)


async def test_wait_for_passes_when_the_tenants_own_events_are_decided() -> None:
    asked: list[tuple[str, int, int]] = []

    async def read() -> int:
        return 2  # held by another tenant's undecided event

    async def decided(tenant: str, after: int, until: int) -> int:
        asked.append((tenant, after, until))
        return until if tenant == "b" else after

    wm = WatermarkCache(read, max_age_s=0, decided=decided)
    assert await wm.wait_for(9, Deadline.within(2.0), poll_s=0.001, tenant="b") == 9
    # What was learned is kept: the next wait asks only about the events after it.
    assert await wm.wait_for(12, Deadline.within(2.0), poll_s=0.001, tenant="b") == 12
    assert asked == [("b", 2, 9), ("b", 9, 12)]
    with pytest.raises(DeadlineExceeded, match="min_sequence 9"):
        await wm.wait_for(9, Deadline.within(0.05), poll_s=0.01, tenant="a")


async def test_a_wait_goes_on_from_where_a_bounded_walk_stopped() -> None:
    asked: list[tuple[int, int]] = []

    async def read() -> int:
        return 2  # held by another tenant's backlog

    async def decided(tenant: str, after: int, until: int) -> int:
        asked.append((after, until))
        return min(until, after + 64)  # every event decided, 64 looked up per walk

    wm = WatermarkCache(read, max_age_s=0, decided=decided)
    assert await wm.wait_for(200, Deadline.within(2.0), poll_s=0.001, tenant="b") == 200
    assert asked == [(2, 200), (66, 200), (130, 200), (194, 200)]


async def test_wait_for_falls_back_to_the_watermark_when_the_check_fails() -> None:
    values = iter([1, 1, 5])

    async def read() -> int:
        return next(values, 5)

    async def decided(tenant: str, after: int, until: int) -> int:
        raise Unavailable("log down")

    wm = WatermarkCache(read, max_age_s=0, decided=decided)
    assert await wm.wait_for(4, Deadline.within(2.0), poll_s=0.001, tenant="b") == 5


def m(id: str, version: int = 1) -> Memory:
    return Memory(id=id, tenant="t", content=id, version=version)


def test_merge_keeps_ranks_per_stream_and_the_newest_memory() -> None:
    answers = {
        "vector": [Hit("a", 0.9, m("a")), Hit("b", 0.5, m("b"))],
        "lexical": [Hit("b", 4.0, m("b", version=3)), Hit("c", 2.0, m("c")), Hit("b", 1.0)],
        "graph": [Hit("d", 1.0)],
    }
    assert missing_memories(answers) == ["d"]
    candidates = merge(answers, {"d": m("d")})
    by_id = {c.memory.id: c for c in candidates}
    assert candidates[0].memory.id == "b"  # in two streams
    assert by_id["b"].memory.version == 3
    assert {k: (s.score, s.rank) for k, s in by_id["b"].streams.items()} == {
        "vector": (0.5, 2),
        "keyword": (4.0, 1),
    }
    assert set(by_id) == {"a", "b", "c", "d"}
    assert "d" not in {c.memory.id for c in merge(answers, {})}


def test_relations_count_only_edges_between_candidates() -> None:
    candidates = merge({"vector": [Hit(i, 1.0, m(i)) for i in "abc"]}, {})
    out = with_relations(
        candidates,
        [
            Relation("a", "b", "RELATES_TO", 0.4),
            Relation("a", "a", "RELATES_TO", 1.0),
            Relation("c", "zz", "RELATES_TO", 1.0),
            Relation("b", "c", "LEADS_TO", 0.1),
        ],
    )
    assert {c.memory.id: c.relation for c in out} == pytest.approx({"a": 0.4, "b": 0.5, "c": 0.1})


def test_system_edges_feed_the_relation_component_only_when_asked() -> None:
    candidates = merge({"vector": [Hit(i, 1.0, m(i)) for i in "abc"]}, {})
    edges = [
        Relation("a", "b", "SIMILAR_TO", 0.9, origin="system"),
        Relation("b", "c", "PRECEDED_BY", 0.5, origin="system"),
        Relation("a", "c", "RELATES_TO", 0.3),
    ]
    agents_only = {c.memory.id: c.relation for c in with_relations(candidates, edges)}
    assert agents_only == pytest.approx({"a": 0.3, "b": 0.0, "c": 0.3})
    every = {c.memory.id: c.relation for c in with_relations(candidates, edges, True)}
    assert every == pytest.approx({"a": 1.2, "b": 1.4, "c": 0.8})


@pytest.mark.parametrize(("limit", "pool"), [(1, 4), (10, 40), (50, 200), (100, 200)])
def test_pool_size(limit: int, pool: int) -> None:
    assert pool_size(limit, 200) == pool


def test_keywords_drop_short_words_and_stopwords() -> None:
    assert keywords("What did Sarah say about the Kubernetes migration? sarah!") == (
        "sarah",
        "kubernetes",
        "migration",
    )
