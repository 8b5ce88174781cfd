"""Access tracking over fake stores: one write per memory per batch, counts add up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from engram_consolidate.bootstrap import build
from engram_consolidate.config import Settings
from engram_consolidate.service import Accessed, AccessTracker, Outcome
from engram_core.errors import Unavailable
from engram_core.model import AccessUpdate, Memory

if TYPE_CHECKING:
    from conftest import Stores

T0 = datetime(2025, 3, 1, tzinfo=UTC)
A, B, C, GONE = (f"0195a000-0000-7000-8000-00000000000{c}" for c in "abcd")


def tracker(stores: Stores, read_chunk: int = 100, write_chunk: int = 1000) -> AccessTracker:
    settings = Settings(read_chunk=read_chunk, write_chunk=write_chunk)
    return build(
        settings,
        vector=stores.vector,
        lexical=stores.lexical,
        graph=stores.graph,
        **stores.plumbing(),
    ).tracker


def mem(id_: str, count: int = 0, last: datetime | None = None, tenant: str = "t1") -> Memory:
    return Memory(
        id=id_, tenant=tenant, content="x", timestamp=T0, access_count=count, last_accessed=last
    )


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def hundred_events() -> list[Accessed]:
    """A in every event, B in every 3rd, C in every 10th, GONE (deleted) in the first."""
    events = []
    for i in range(100):
        ids = [A] + ([B] if i % 3 == 0 else []) + ([C] if i % 10 == 0 else [])
        if i == 0:
            ids.append(GONE)
        events.append(Accessed("t1", tuple(ids), at(i), sequence=i + 1))
    return events


async def test_100_events_for_3_memories_make_3_writes_per_store(stores: Stores) -> None:
    stores.hold(mem(A, count=5, last=at(-60)), mem(B), mem(C, count=2))
    t = tracker(stores)
    results = await t.apply(hundred_events())
    assert {r.outcome for r in results} == {Outcome.APPLIED}
    expected = {
        A: AccessUpdate(A, at(99), 5 + 100),
        B: AccessUpdate(B, at(99), 0 + 34),  # i = 0, 3, …, 99
        C: AccessUpdate(C, at(90), 2 + 10),  # i = 0, 10, …, 90
    }
    for store in stores.all():
        assert store.calls.count("update_access") == 1
        assert len(store.updates) == 3
        assert {u.id: u for _, u in store.updates} == expected
    assert (t.stats.updated, t.stats.unknown) == (3, 1)


async def test_counts_accumulate_across_batches(stores: Stores) -> None:
    stores.hold(mem(A))
    t = tracker(stores)
    await t.apply([Accessed("t1", (A,), at(1), 1), Accessed("t1", (A, A), at(2), 2)])
    await t.apply([Accessed("t1", (A,), at(3), 3)])
    for store in stores.all():
        m = store.memories[("t1", A)]
        assert (m.access_count, m.last_accessed) == (4, at(3))


async def test_last_accessed_never_moves_back(stores: Stores) -> None:
    stores.hold(mem(A, count=7, last=at(500)))
    await tracker(stores).apply([Accessed("t1", (A,), at(1), 1)])  # a late, old event
    assert stores.lexical.updates == [("t1", AccessUpdate(A, at(500), 8))]


async def test_a_failed_write_is_retried_without_counting_twice(stores: Stores) -> None:
    stores.hold(mem(A, count=10))
    t = tracker(stores)
    events = [Accessed("t1", (A,), at(1), 1), Accessed("t1", (A,), at(2), 2)]
    stores.graph.fail_next.append(Unavailable("graph down"))
    results = await t.apply(events)
    assert [r.outcome for r in results] == [Outcome.RETRY, Outcome.RETRY]
    assert "UNAVAILABLE" in results[0].reason
    # The vector store (the one read back) was not written, so the redelivery
    # recomputes the same absolute count instead of adding on top.
    assert "update_access" not in stores.vector.calls
    assert [r.outcome for r in await t.apply(events)] == [Outcome.APPLIED] * 2
    for store in stores.all():
        assert store.memories[("t1", A)].access_count == 12


async def test_tenants_are_counted_apart_and_fail_apart(stores: Stores) -> None:
    stores.hold(mem(A, count=1, tenant="t1"), mem(A, count=100, tenant="t2"))
    stores.lexical.memories.pop(("t2", A))  # irrelevant to the outcome: vector is read
    events = [
        Accessed("t1", (A,), at(1), 1),
        Accessed("t2", (A,), at(1), 2),
        Accessed("t2", (A,), at(2), 3),
    ]
    results = await tracker(stores).apply(events)
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 3
    assert stores.vector.memories[("t1", A)].access_count == 2
    assert stores.vector.memories[("t2", A)].access_count == 102


async def test_only_deleted_ids_write_nothing_and_ack(stores: Stores) -> None:
    results = await tracker(stores).apply([Accessed("t1", (GONE,), at(1), 1)])
    assert [r.outcome for r in results] == [Outcome.APPLIED]
    assert all("update_access" not in s.calls for s in stores.all())


async def test_ids_are_read_in_chunks(stores: Stores) -> None:
    ids = tuple(f"0195a000-0000-7000-8000-{n:012d}" for n in range(5))
    stores.hold(*(mem(i) for i in ids))
    await tracker(stores, read_chunk=2).apply([Accessed("t1", ids, at(1), 1)])
    assert stores.vector.calls.count("get") == 3
    assert len(stores.lexical.updates) == 5


async def test_a_batch_of_more_memories_than_a_store_takes_is_written_in_chunks(
    stores: Stores,
) -> None:
    ids = tuple(f"0195a000-0000-7000-8000-{n:012d}" for n in range(5))
    stores.hold(*(mem(i, count=1) for i in ids))
    for store in stores.all():
        store.max_batch = 2
    results = await tracker(stores, write_chunk=2).apply([Accessed("t1", ids, at(1), 1)])
    assert [r.outcome for r in results] == [Outcome.APPLIED]
    for store in stores.all():
        assert store.calls.count("update_access") == 3
        assert sorted(u.id for _, u in store.updates) == sorted(ids)
        assert {u.access_count for _, u in store.updates} == {2}


async def test_a_missing_tenant_is_poison(stores: Stores) -> None:
    (result,) = await tracker(stores).apply([Accessed("", (A,), at(1), 1)])
    assert result.outcome is Outcome.POISON
