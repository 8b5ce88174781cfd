"""What the store contracts share: tenants and clock, memory builders, the filter corpus and
cases, and the tests whose assertions are the same for every store (`MemoryStoreContract`).

Each store's suite (vector, lexical, graph) re-exports these names, so tests import them from
the suite they run against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest

from engram_core.errors import InvalidArgument
from engram_core.generation_routing import StoreIndex
from engram_core.model import (
    AccessUpdate,
    Filter,
    Hit,
    Memory,
    RelevanceUpdate,
    ScanPage,
    TagMatch,
    TagMode,
    UpsertResult,
)
from engram_core.tags import tag_prefixes

T = "tenant-a"
OTHER = "tenant-b"
BASE = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ALL = Filter(include_archived=True)

FilterCase = tuple[str, Filter, set[str]]


def mem(
    id_: str,
    content: str = "",
    *,
    tenant: str = T,
    version: int = 1,
    tags: Sequence[str] = (),
    type_: str = "Memory",
    minutes: float = 0,
    archived: bool = False,
) -> Memory:
    return Memory(
        id=id_,
        tenant=tenant,
        content=content or f"memory {id_}",
        type=type_,
        tags=tuple(tags),
        tag_prefixes=tag_prefixes(tags),
        timestamp=BASE + timedelta(minutes=minutes),
        updated_at=BASE,
        archived=archived,
        version=version,
    )


def full_memory() -> Memory:
    """A memory with every field away from its default."""
    tags = ("project:alpha", "entity:people:sarah")
    return Memory(
        id="0190a5e4-8f2b-7c3d-9e4f-5a6b7c8d9e0f",
        tenant=T,
        content="Sarah decided to ship the beta on Friday — après-ski afterwards.",
        type="Decision",
        tags=tags,
        tag_prefixes=tag_prefixes(tags),
        importance=0.25,
        confidence=0.75,
        metadata={
            "source": "chat",
            "turn": 3,
            "score": 1.5,
            "flag": False,
            "nested": {"k": [1, "two", None, True], "empty": {}},
        },
        timestamp=datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC),
        updated_at=datetime(2024, 5, 2, 8, 30, 0, 654321, tzinfo=UTC),
        last_accessed=datetime(2024, 5, 3, 9, 0, 1, tzinfo=UTC),
        access_count=7,
        t_valid=datetime(2024, 4, 1, tzinfo=UTC),
        t_invalid=datetime(2025, 4, 1, tzinfo=UTC),
        relevance_score=0.42,
        archived=True,
        embedding_model="all-MiniLM-L6-v2",
        version=9,
        entities=("people:sarah",),
    )


def ids(hits: Sequence[Hit]) -> list[str]:
    return [h.id for h in hits]


# Every store makes each of these match its query; the filter decides what comes back.
FILTER_CORPUS: tuple[Memory, ...] = (
    mem("f1", tags=("project:alpha", "lang:python"), type_="Decision", minutes=0),
    mem("f2", tags=("project:alpha:api",), type_="Pattern", minutes=10),
    mem("f3", tags=("project:beta",), type_="Decision", minutes=20),
    mem("f4", tags=("lang:python", "entity:people:sarah"), type_="Insight", minutes=30),
    mem("f5", type_="Memory", minutes=40),
    mem("f6", tags=("project:alpha",), type_="Decision", minutes=50, archived=True),
    # "project:alpha" is no tag prefix of "project:alphabet": prefixes end at a separator.
    mem("f7", tags=("project:alphabet",), type_="Context", minutes=60),
)
_US = 1 / 60_000_000  # a microsecond in minutes
FILTER_CASES: list[FilterCase] = [
    ("none", Filter(), {"f1", "f2", "f3", "f4", "f5", "f7"}),
    ("include_archived", ALL, {"f1", "f2", "f3", "f4", "f5", "f6", "f7"}),
    ("tag_exact", Filter(tags=("project:alpha",)), {"f1"}),
    ("tag_exact_case", Filter(tags=("Project:ALPHA",)), {"f1"}),
    ("tag_exact_slash", Filter(tags=("project/alpha",)), {"f1"}),
    ("tag_exact_is_not_prefix", Filter(tags=("project",)), set()),
    ("tag_prefix", Filter(tags=("project:alpha",), tag_match=TagMatch.PREFIX), {"f1", "f2"}),
    ("tag_prefix_slash", Filter(tags=("project/alpha",), tag_match=TagMatch.PREFIX), {"f1", "f2"}),
    (
        "tag_prefix_root",
        Filter(tags=("project",), tag_match=TagMatch.PREFIX),
        {"f1", "f2", "f3", "f7"},
    ),
    ("tags_any", Filter(tags=("project:alpha", "lang:python")), {"f1", "f4"}),
    ("tags_all", Filter(tags=("project:alpha", "lang:python"), tag_mode=TagMode.ALL), {"f1"}),
    (
        "tags_all_prefix",
        Filter(tags=("project", "lang"), tag_mode=TagMode.ALL, tag_match=TagMatch.PREFIX),
        {"f1"},
    ),
    (
        "tags_any_prefix",
        Filter(tags=("lang:python", "entity:people"), tag_match=TagMatch.PREFIX),
        {"f1", "f4"},
    ),
    ("exclude_tag_prefix", Filter(exclude_tags=("project:alpha",)), {"f3", "f4", "f5", "f7"}),
    ("exclude_tag_slash", Filter(exclude_tags=("lang/python",)), {"f2", "f3", "f5", "f7"}),
    ("exclude_tag_root", Filter(exclude_tags=("entity",)), {"f1", "f2", "f3", "f5", "f7"}),
    ("types", Filter(types=("Decision",)), {"f1", "f3"}),
    ("types_many", Filter(types=("Decision", "Insight")), {"f1", "f3", "f4"}),
    ("exclude_types", Filter(exclude_types=("Decision",)), {"f2", "f4", "f5", "f7"}),
    ("start_inclusive", Filter(start=BASE + timedelta(minutes=10)), {"f2", "f3", "f4", "f5", "f7"}),
    ("end_inclusive", Filter(end=BASE + timedelta(minutes=30)), {"f1", "f2", "f3", "f4"}),
    (
        "start_equals_end",
        Filter(start=BASE + timedelta(minutes=20), end=BASE + timedelta(minutes=20)),
        {"f3"},
    ),
    (
        "start_one_microsecond_late",
        Filter(start=BASE + timedelta(minutes=20 + _US)),
        {"f4", "f5", "f7"},
    ),
    ("end_one_microsecond_early", Filter(end=BASE + timedelta(minutes=20 - _US)), {"f1", "f2"}),
    (
        "archived_with_tags_and_types",
        Filter(
            tags=("project:alpha",),
            tag_match=TagMatch.PREFIX,
            types=("Decision",),
            include_archived=True,
        ),
        {"f1", "f6"},
    ),
    (
        "combined",
        Filter(
            tags=("project",),
            tag_match=TagMatch.PREFIX,
            exclude_tags=("project:alpha:api",),
            exclude_types=("Context",),
            start=BASE + timedelta(minutes=5),
        ),
        {"f3"},
    ),
]


def filter_params(cases: Sequence[FilterCase]) -> list[Any]:
    """``cases`` as ``(flt, expected)`` pytest params named after the case."""
    return [pytest.param(flt, expected, id=name) for name, flt, expected in cases]


class MemoryStore(StoreIndex, Protocol):
    """The calls every store port has; upsert items differ per port (see ``item``)."""

    async def upsert(self, tenant: str, items: Sequence[Any], /) -> UpsertResult: ...

    async def delete_tenant(self, tenant: str, /) -> int: ...


async def scan_pages(port: MemoryStore, tenant: str, limit: int) -> list[ScanPage]:
    """Every page of a full scan (bounded, so a cursor that never ends fails the test)."""
    pages: list[ScanPage] = []
    cursor: str | None = None
    for _ in range(1000):
        page = await port.scan(tenant, cursor, limit)
        pages.append(page)
        if page.next_cursor is None:
            return pages
        assert page.next_cursor != cursor, "the cursor must move"
        cursor = page.next_cursor
    raise AssertionError("the scan never ended")


async def scan_ids(port: MemoryStore, tenant: str, limit: int = 3) -> list[str]:
    return [m.id for page in await scan_pages(port, tenant, limit) for m in page.memories]


def relevance(id_: str, score: float) -> RelevanceUpdate:
    return RelevanceUpdate(id=id_, relevance_score=score)


class MemoryStoreContract:
    """The tests every store passes with the same assertions. A suite subclasses it and
    provides ``port`` (its store fixture), ``item`` and ``corpus``."""

    @pytest.fixture
    def port(self) -> MemoryStore:
        raise NotImplementedError("a store contract must provide the port fixture")

    def item(self, m: Memory, slot: int = 0) -> Any:
        """What ``upsert`` takes for ``m``; ``slot`` tells memories of one batch apart."""
        raise NotImplementedError

    def corpus(self) -> list[Any]:
        """The upsert items of the suite's filter corpus."""
        raise NotImplementedError

    async def test_get_follows_request_order_and_skips_unknown_ids(self, port: MemoryStore) -> None:
        await port.upsert(T, [self.item(mem(x), i) for i, x in enumerate("abc")])
        got = await port.get(T, ["c", "missing", "a", "c"])
        assert [m.id for m in got] == ["c", "a"]
        assert await port.get(T, ["missing"]) == []

    async def test_upsert_batch_counts_applied_and_skipped(self, port: MemoryStore) -> None:
        await port.upsert(
            T, [self.item(mem("a", "one", version=5), 0), self.item(mem("b", "two", version=5), 1)]
        )
        result = await port.upsert(
            T,
            [
                self.item(mem("a", "one again", version=4), 0),  # older: skipped
                self.item(mem("b", "two again", version=6), 1),  # newer: applied
                self.item(mem("c", "three", version=1), 2),  # new: applied
            ],
        )
        assert result == UpsertResult(applied=2, skipped=1)
        got = {m.id: m.content for m in await port.get(T, ["a", "b", "c"])}
        assert got == {"a": "one", "b": "two again", "c": "three"}

    async def test_delete_counts_only_live_memories(self, port: MemoryStore) -> None:
        await port.upsert(T, [self.item(mem("a"), 0), self.item(mem("b"), 1)])
        assert await port.delete(T, ["a", "b", "missing", "a"], version=5) == 2
        assert await port.delete(T, ["a", "b"], version=5) == 0  # redelivered
        assert await port.delete(T, ["a", "b"], version=6) == 0  # already gone
        assert await port.count(T) == 0

    async def test_delete_tenant_removes_the_tenant_and_only_it(self, port: MemoryStore) -> None:
        await port.upsert(T, self.corpus())
        await port.upsert(OTHER, [self.item(mem("f1", tenant=OTHER))])
        await port.delete(T, ["f1"], version=2)
        assert await port.delete_tenant(T) == len(FILTER_CORPUS) - 1
        assert await port.count(T) == 0
        assert await port.get(T, [f"f{i}" for i in range(1, len(FILTER_CORPUS) + 1)]) == []
        assert await scan_ids(port, T) == []
        assert [m.id for m in await port.get(OTHER, ["f1"])] == ["f1"]
        assert await port.count(OTHER) == 1
        assert await port.delete_tenant(T) == 0  # redelivered

    async def test_a_tenant_deleted_starts_over_with_later_writes(self, port: MemoryStore) -> None:
        # What the log writes for the tenant after its deletion (later sequences) applies,
        # an id deleted before included.
        await port.upsert(T, [self.item(mem("a", version=3)), self.item(mem("b", version=4))])
        await port.delete(T, ["a"], version=5)
        await port.delete_tenant(T)
        assert await port.upsert(T, [self.item(mem("a", "again", version=7))]) == UpsertResult(
            applied=1, skipped=0
        )
        assert [m.content for m in await port.get(T, ["a", "b"])] == ["again"]
        assert await port.count(T) == 1

    async def test_update_access_never_moves_backwards(self, port: MemoryStore) -> None:
        await port.upsert(T, [self.item(mem("a"))])
        late = AccessUpdate(id="a", last_accessed=BASE + timedelta(hours=2), access_count=5)
        early = AccessUpdate(id="a", last_accessed=BASE + timedelta(hours=1), access_count=2)
        assert await port.update_access(T, [late]) == 1
        assert await port.update_access(T, [early]) == 0
        [got] = await port.get(T, ["a"])
        assert (got.last_accessed, got.access_count) == (late.last_accessed, 5)

    async def test_count_includes_archived_and_excludes_deleted(self, port: MemoryStore) -> None:
        assert await port.count(T) == 0
        await port.upsert(T, self.corpus())
        assert await port.count(T) == len(FILTER_CORPUS)
        await port.delete(T, ["f1", "f6"], version=2)
        assert await port.count(T) == len(FILTER_CORPUS) - 2
        assert await port.count(OTHER) == 0

    # -- scan ----------------------------------------------------------------------------------

    async def _scan_corpus(self, port: MemoryStore) -> set[str]:
        """23 memories of T (every third archived) and two deleted, beside OTHER's memories of
        the same ids and one of its own: what a scan of T must return, by id."""
        names = [f"s{i:02d}" for i in range(23)]
        items = [self.item(mem(n, archived=i % 3 == 0), i % 8) for i, n in enumerate(names)]
        await port.upsert(T, items)
        await port.delete(T, ["s04", "s17", "never-stored"], version=2)
        await port.upsert(OTHER, [self.item(mem(n, tenant=OTHER), 0) for n in names[:5]])
        await port.upsert(OTHER, [self.item(mem("other-only", tenant=OTHER), 1)])
        return set(names) - {"s04", "s17"}

    @pytest.mark.parametrize("limit", [1, 5, 7, 21, 100])
    async def test_scan_pages_cover_every_live_memory_once(
        self, port: MemoryStore, limit: int
    ) -> None:
        expected = await self._scan_corpus(port)
        pages = await scan_pages(port, T, limit)
        got = [m.id for page in pages for m in page.memories]
        assert sorted(got) == sorted(expected)  # archived in, tombstones and OTHER out, no twins
        # Pages are full but the last, and the last says so (no trailing empty page).
        assert [len(p.memories) for p in pages[:-1]] == [limit] * (len(pages) - 1)
        assert 1 <= len(pages[-1].memories) <= limit
        assert all(m.tenant == T for page in pages for m in page.memories)

    async def test_scan_order_is_stable_and_a_cursor_can_be_reused(self, port: MemoryStore) -> None:
        await self._scan_corpus(port)
        first = await scan_ids(port, T, 4)
        assert await scan_ids(port, T, 4) == first
        assert await scan_ids(port, T, 9) == first  # the order does not depend on the page size
        # A run resumed from a checkpointed cursor sees the same continuation.
        page = await port.scan(T, None, 6)
        again = await port.scan(T, page.next_cursor, 6)
        assert again == await port.scan(T, page.next_cursor, 6)
        assert [m.id for m in again.memories] == first[6:12]

    async def test_scan_survives_writes_between_pages(self, port: MemoryStore) -> None:
        expected = await self._scan_corpus(port)
        page = await port.scan(T, None, 8)
        seen = [m.id for m in page.memories]
        ahead = sorted(expected - set(seen))
        # Between two pages: a memory already seen is edited, one not seen yet is deleted,
        # new ones arrive. Nothing comes twice, the deleted one never, the rest all.
        await port.upsert(T, [self.item(mem(seen[0], "edited", version=5), 0)])
        await port.delete(T, [ahead[0]], version=5)
        await port.upsert(T, [self.item(mem(f"new{i}"), i) for i in range(3)])
        cursor = page.next_cursor
        while cursor is not None:
            page = await port.scan(T, cursor, 8)
            seen += [m.id for m in page.memories]
            cursor = page.next_cursor
        assert len(seen) == len(set(seen))
        assert ahead[0] not in seen
        assert expected - {ahead[0]} <= set(seen) <= expected | {"new0", "new1", "new2"}

    async def test_scan_returns_what_get_returns(self, port: MemoryStore) -> None:
        await port.upsert(T, [self.item(mem(x, tags=("k:v",)), i) for i, x in enumerate("abc")])
        seen = BASE + timedelta(days=3)
        await port.update_access(T, [AccessUpdate(id="b", last_accessed=seen, access_count=6)])
        await port.update_relevance(T, [relevance("c", 0.375)])
        scanned = [m for page in await scan_pages(port, T, 2) for m in page.memories]
        by_id = {m.id: m for m in scanned}
        assert len(scanned) == len(by_id) == 3
        assert await port.get(T, ["a", "b", "c"]) == [by_id[x] for x in "abc"]
        assert (by_id["b"].last_accessed, by_id["b"].access_count) == (seen, 6)
        assert by_id["c"].relevance_score == 0.375

    async def test_scan_of_an_empty_tenant_is_one_empty_page(self, port: MemoryStore) -> None:
        assert await port.scan(T, None, 10) == ScanPage(memories=[], next_cursor=None)
        # Tombstones only, and another tenant's memories, are nothing to T either.
        await port.upsert(T, [self.item(mem("gone"))])
        await port.delete(T, ["gone", "never"], version=3)
        await port.upsert(OTHER, [self.item(mem("theirs", tenant=OTHER))])
        assert await port.scan(T, None, 10) == ScanPage(memories=[], next_cursor=None)

    async def test_scan_limit_below_one_is_invalid_argument(self, port: MemoryStore) -> None:
        await port.upsert(T, [self.item(mem("a"))])
        for limit in (0, -1):
            with pytest.raises(InvalidArgument) as err:
                await port.scan(T, None, limit)
            assert err.value.field == "limit"

    # -- relevance -----------------------------------------------------------------------------

    async def test_update_relevance_sets_the_score_and_nothing_else(
        self, port: MemoryStore
    ) -> None:
        m = replace(mem("a", "scored", tags=("x:y",)), relevance_score=0.25)
        await port.upsert(T, [self.item(m)])
        [before] = await port.get(T, ["a"])
        assert await port.update_relevance(T, [relevance("a", 0.8125)]) == 1
        assert await port.get(T, ["a"]) == [replace(before, relevance_score=0.8125)]
        # Down as well as up: the pass writes what it computed.
        assert await port.update_relevance(T, [relevance("a", 0.0625)]) == 1
        assert await port.get(T, ["a"]) == [replace(before, relevance_score=0.0625)]
        # The version guard is untouched: the same version is still stale, the next applies.
        assert await port.upsert(T, [self.item(replace(m, content="stale"))]) == UpsertResult(0, 1)
        newer = replace(m, content="newer", version=m.version + 1)
        assert await port.upsert(T, [self.item(newer)]) == UpsertResult(1, 0)
        [got] = await port.get(T, ["a"])
        assert (got.content, got.version) == ("newer", m.version + 1)

    async def test_update_relevance_skips_unknown_and_deleted(self, port: MemoryStore) -> None:
        await port.upsert(T, [self.item(mem("a"), 0), self.item(mem("b"), 1)])
        await port.delete(T, ["b"], version=2)
        updates = [relevance(i, 0.5) for i in ("a", "b", "missing")]
        assert await port.update_relevance(T, updates) == 1
        assert await port.get(T, ["b", "missing"]) == []
        assert await port.count(T) == 1
        assert await scan_ids(port, T) == ["a"]
        # A memory re-created after the delete starts from the score it is given.
        reborn = replace(mem("b", "reborn", version=3), relevance_score=0.125)
        await port.upsert(T, [self.item(reborn, 1)])
        assert [m.relevance_score for m in await port.get(T, ["b"])] == [0.125]

    async def test_update_relevance_counts_each_memory_once(self, port: MemoryStore) -> None:
        await port.upsert(T, [self.item(mem("a"), 0), self.item(mem("b"), 1)])
        updates = [relevance("a", 0.2), relevance("b", 0.3), relevance("a", 0.7)]
        assert await port.update_relevance(T, updates) == 2
        got = {m.id: m.relevance_score for m in await port.get(T, ["a", "b"])}
        assert got == {"a": 0.7, "b": 0.3}
        assert await port.update_relevance(T, []) == 0

    async def test_update_relevance_stays_in_its_tenant(self, port: MemoryStore) -> None:
        await port.upsert(T, [self.item(mem("same"), 0), self.item(mem("t-only"), 1)])
        await port.upsert(OTHER, [self.item(mem("same", tenant=OTHER), 0)])
        assert await port.update_relevance(OTHER, [relevance("t-only", 0.9)]) == 0
        assert await port.update_relevance(OTHER, [relevance("same", 0.9)]) == 1
        assert [m.relevance_score for m in await port.get(T, ["same", "t-only"])] == [0.0, 0.0]
        assert [m.relevance_score for m in await port.get(OTHER, ["same"])] == [0.9]
        assert await port.count(OTHER) == 1

    # -- derived state survives an upsert ------------------------------------------------------

    async def test_upsert_keeps_derived_state(self, port: MemoryStore) -> None:
        await port.upsert(T, [self.item(mem("a", "first draft"))])
        seen = BASE + timedelta(hours=1)
        await port.update_access(T, [AccessUpdate(id="a", last_accessed=seen, access_count=4)])
        await port.update_relevance(T, [relevance("a", 0.6)])

        def view(m: Memory) -> tuple[str, int, datetime | None, int, float]:
            return (m.content, m.version, m.last_accessed, m.access_count, m.relevance_score)

        # A content update carries no statistics and no score: the stored ones stay.
        await port.upsert(T, [self.item(mem("a", "second draft", version=2))])
        assert [view(m) for m in await port.get(T, ["a"])] == [("second draft", 2, seen, 4, 0.6)]
        # Newer statistics replace the stored ones; a lower score does not.
        later = seen + timedelta(hours=1)
        third = replace(
            mem("a", "third", version=3), last_accessed=later, access_count=9, relevance_score=0.4
        )
        await port.upsert(T, [self.item(third)])
        assert [view(m) for m in await port.get(T, ["a"])] == [("third", 3, later, 9, 0.6)]
        # A higher score replaces it, and is then what the next upsert is compared with.
        await port.upsert(
            T, [self.item(replace(mem("a", "fourth", version=4), relevance_score=0.8))]
        )
        await port.upsert(
            T, [self.item(replace(mem("a", "fifth", version=5), relevance_score=0.1))]
        )
        assert [view(m) for m in await port.get(T, ["a"])] == [("fifth", 5, later, 9, 0.8)]
        # A skipped (older) upsert changes nothing.
        stale = replace(mem("a", "stale", version=5), last_accessed=later + timedelta(1))
        assert await port.upsert(T, [self.item(replace(stale, relevance_score=1.0))]) == (
            UpsertResult(0, 1)
        )
        assert [view(m) for m in await port.get(T, ["a"])] == [("fifth", 5, later, 9, 0.8)]
        # A memory re-created after a delete starts from what it is given.
        await port.delete(T, ["a"], version=6)
        await port.upsert(
            T, [self.item(replace(mem("a", "reborn", version=7), relevance_score=0.05))]
        )
        assert [view(m) for m in await port.get(T, ["a"])] == [("reborn", 7, None, 0, 0.05)]
