"""What the store contracts share: tenants and clock, memory builders, the filter corpus and
cases, and the tests whose assertions are the same for every store (`MemoryStoreContract`).

Each store's suite (vector, lexical, graph) re-exports these names, so tests import them from
the suite they run against.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest

from engram_core.model import AccessUpdate, Filter, Hit, Memory, TagMatch, TagMode, UpsertResult
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


class MemoryStore(Protocol):
    """The calls every store port has; upsert items differ per port (see ``item``)."""

    async def upsert(self, tenant: str, items: Sequence[Any], /) -> UpsertResult: ...
    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int: ...
    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]: ...
    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int: ...
    async def count(self, tenant: str) -> int: ...


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
