"""The behaviour every `engram_core.ports.VectorIndex` adapter must show.

Subclass `VectorIndexContract` in a ``Test*`` class and override the ``index`` fixture to
yield an EMPTY index of dimension `DIM` (fresh per test); every test here then runs
against it. Scores are cosine similarities.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from engram_core.errors import InvalidArgument
from engram_core.filters import matches
from engram_core.model import AccessUpdate, Filter, Hit, Memory, TagMatch, TagMode, UpsertResult
from engram_core.ports import VectorIndex
from engram_core.tags import tag_prefixes

DIM = 8
T = "tenant-a"
OTHER = "tenant-b"
BASE = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ALL = Filter(include_archived=True)


def vec(*components: float) -> list[float]:
    """A DIM-dimensional vector starting with ``components``, zeros after."""
    return [*components, *([0.0] * (DIM - len(components)))]


def axis(i: int) -> list[float]:
    out = [0.0] * DIM
    out[i] = 1.0
    return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


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


# Every memory sits near the query direction (axis 0); the filter decides what comes back.
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
FILTER_CASES: list[tuple[str, Filter, set[str]]] = [
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


def _corpus_vector(i: int) -> list[float]:
    # Distinct directions, all within ~30 degrees of axis 0.
    return vec(1.0, 0.1 * i, 0.05 * (i % 3))


class VectorIndexContract:
    """Abstract: subclasses override ``index`` to yield an empty VectorIndex of dimension DIM."""

    @pytest.fixture
    def index(self) -> VectorIndex:
        raise NotImplementedError("a VectorIndexContract subclass must provide the index fixture")

    # -- round trip and get --------------------------------------------------------------------

    async def test_reports_its_dimension(self, index: VectorIndex) -> None:
        assert index.dimension == DIM

    async def test_get_round_trips_every_field(self, index: VectorIndex) -> None:
        m = full_memory()
        assert await index.upsert(T, [(m, axis(0))]) == UpsertResult(applied=1, skipped=0)
        assert await index.get(T, [m.id]) == [m]

    async def test_get_follows_request_order_and_skips_unknown_ids(
        self, index: VectorIndex
    ) -> None:
        await index.upsert(T, [(mem("a"), axis(0)), (mem("b"), axis(1)), (mem("c"), axis(2))])
        got = await index.get(T, ["c", "missing", "a", "c"])
        assert [m.id for m in got] == ["c", "a"]
        assert await index.get(T, ["missing"]) == []

    async def test_search_hits_carry_the_stored_memory(self, index: VectorIndex) -> None:
        m = replace(full_memory(), archived=False)
        await index.upsert(T, [(m, vec(3.0, 4.0))])
        hits = await index.search(T, vec(3.0, 4.0), Filter(), 5)
        assert ids(hits) == [m.id]
        assert hits[0].memory == m
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)

    # -- versions and tombstones ---------------------------------------------------------------

    async def test_upsert_applies_only_newer_versions(self, index: VectorIndex) -> None:
        assert await index.upsert(T, [(mem("a", "apple", version=2), axis(0))]) == UpsertResult(
            1, 0
        )
        older = (mem("a", "banana", version=1), axis(1))
        assert await index.upsert(T, [older]) == UpsertResult(0, 1)
        same = (mem("a", "banana", version=2), axis(1))
        assert await index.upsert(T, [same]) == UpsertResult(0, 1)
        assert [m.content for m in await index.get(T, ["a"])] == ["apple"]
        assert (await index.search(T, axis(0), Filter(), 1))[0].score == pytest.approx(1, abs=1e-4)

        newer = (mem("a", "cherry", version=3), axis(1))
        assert await index.upsert(T, [newer]) == UpsertResult(1, 0)
        assert [m.version for m in await index.get(T, ["a"])] == [3]
        # The vector follows the new version too.
        [hit] = await index.search(T, axis(1), Filter(), 10)
        assert (hit.id, hit.memory and hit.memory.content) == ("a", "cherry")
        assert hit.score == pytest.approx(1.0, abs=1e-4)
        assert await index.count(T) == 1

    async def test_upsert_batch_counts_applied_and_skipped(self, index: VectorIndex) -> None:
        await index.upsert(
            T, [(mem("a", "one", version=5), axis(0)), (mem("b", "two", version=5), axis(1))]
        )
        result = await index.upsert(
            T,
            [
                (mem("a", "one again", version=4), axis(0)),  # older: skipped
                (mem("b", "two again", version=6), axis(1)),  # newer: applied
                (mem("c", "three", version=1), axis(2)),  # new: applied
            ],
        )
        assert result == UpsertResult(applied=2, skipped=1)
        got = {m.id: m.content for m in await index.get(T, ["a", "b", "c"])}
        assert got == {"a": "one", "b": "two again", "c": "three"}

    async def test_duplicate_ids_in_one_batch_keep_the_highest_version(
        self, index: VectorIndex
    ) -> None:
        result = await index.upsert(
            T,
            [
                (mem("a", "middle", version=2), axis(1)),
                (mem("a", "newest", version=3), axis(2)),
                (mem("a", "old", version=1), axis(3)),
            ],
        )
        assert result == UpsertResult(applied=1, skipped=2)
        assert [m.content for m in await index.get(T, ["a"])] == ["newest"]
        assert ids(await index.search(T, axis(2), Filter(), 10)) == ["a"]
        assert (await index.search(T, axis(2), Filter(), 10))[0].score == pytest.approx(1, abs=1e-4)
        assert await index.count(T) == 1

    async def test_delete_leaves_a_tombstone(self, index: VectorIndex) -> None:
        await index.upsert(T, [(mem("a", version=1), axis(0)), (mem("b"), vec(1.0, 1.0))])
        assert await index.delete(T, ["a"], version=2) == 1
        assert await index.get(T, ["a"]) == []
        assert ids(await index.search(T, axis(0), ALL, 10)) == ["b"]
        assert await index.count(T) == 1

        # A redelivered older write cannot resurrect it, nor one at the tombstone's version.
        assert await index.upsert(T, [(mem("a", version=1), axis(0))]) == UpsertResult(0, 1)
        assert await index.upsert(T, [(mem("a", version=2), axis(0))]) == UpsertResult(0, 1)
        assert await index.get(T, ["a"]) == []
        assert ids(await index.search(T, axis(0), ALL, 10)) == ["b"]
        assert await index.count(T) == 1

        # A newer write re-creates it.
        assert await index.upsert(T, [(mem("a", "again", version=3), axis(0))]) == UpsertResult(
            1, 0
        )
        assert [m.content for m in await index.get(T, ["a"])] == ["again"]
        assert ids(await index.search(T, axis(0), ALL, 10)) == ["a", "b"]
        assert await index.count(T) == 2

    async def test_delete_counts_only_live_memories(self, index: VectorIndex) -> None:
        await index.upsert(T, [(mem("a"), axis(0)), (mem("b"), axis(1))])
        assert await index.delete(T, ["a", "b", "missing", "a"], version=5) == 2
        assert await index.delete(T, ["a", "b"], version=5) == 0  # redelivered
        assert await index.delete(T, ["a", "b"], version=6) == 0  # already gone
        assert await index.count(T) == 0

    async def test_delete_before_upsert_blocks_older_writes(self, index: VectorIndex) -> None:
        assert await index.delete(T, ["early"], version=5) == 0
        late = (mem("early", "late arrival", version=4), axis(0))
        assert await index.upsert(T, [late]) == UpsertResult(0, 1)
        assert await index.get(T, ["early"]) == []
        assert await index.count(T) == 0
        recreated = (mem("early", "recreated", version=6), axis(0))
        assert await index.upsert(T, [recreated]) == UpsertResult(1, 0)
        assert [m.content for m in await index.get(T, ["early"])] == ["recreated"]

    async def test_delete_with_an_older_version_changes_nothing(self, index: VectorIndex) -> None:
        await index.upsert(T, [(mem("a", "kept", version=7), axis(0))])
        assert await index.delete(T, ["a"], version=3) == 0
        assert [m.content for m in await index.get(T, ["a"])] == ["kept"]
        assert ids(await index.search(T, axis(0), Filter(), 10)) == ["a"]

    async def test_tombstones_never_show_up(self, index: VectorIndex) -> None:
        await index.upsert(T, [(mem("a", tags=("x:y",)), axis(0))])
        await index.delete(T, ["a"], version=2)
        await index.delete(T, ["never-stored"], version=2)
        assert await index.get(T, ["a", "never-stored"]) == []
        for flt in (Filter(), ALL, Filter(exclude_tags=("x",)), Filter(start=BASE - timedelta(1))):
            assert await index.search(T, axis(0), flt, 10) == []
        assert await index.count(T) == 0

    # -- tenants -------------------------------------------------------------------------------

    async def test_tenants_are_isolated(self, index: VectorIndex) -> None:
        await index.upsert(
            T,
            [(mem("same", "alpha secret", version=5), axis(0)), (mem("t-only", "alpha"), axis(1))],
        )
        await index.upsert(OTHER, [(mem("same", "beta secret", tenant=OTHER), vec(0.0, 0.0, 1.0))])
        # The version guard is per tenant: version 1 applied although tenant-a holds version 5.
        assert [m.content for m in await index.get(OTHER, ["same"])] == ["beta secret"]
        assert [m.tenant for m in await index.get(OTHER, ["same"])] == [OTHER]
        assert await index.get(OTHER, ["t-only"]) == []
        # tenant-a's vectors are exact matches for these queries; tenant-b must not see them.
        assert ids(await index.search(OTHER, axis(1), ALL, 10)) == ["same"]
        [hit] = await index.search(OTHER, axis(0), ALL, 10)
        assert hit.memory is not None
        assert hit.memory.content == "beta secret"
        assert hit.score == pytest.approx(0.0, abs=1e-4)
        assert set(ids(await index.search(T, axis(2), ALL, 10))) == {"same", "t-only"}
        assert await index.count(T) == 2
        assert await index.count(OTHER) == 1

        assert await index.delete(OTHER, ["same", "t-only"], version=9) == 1
        assert [m.content for m in await index.get(T, ["same"])] == ["alpha secret"]
        assert await index.count(T) == 2
        assert await index.count(OTHER) == 0

        update = AccessUpdate(id="t-only", last_accessed=BASE, access_count=3)
        assert await index.update_access(OTHER, [update]) == 0
        assert [m.access_count for m in await index.get(T, ["t-only"])] == [0]

    async def test_upsert_stores_the_tenant_it_was_called_with(self, index: VectorIndex) -> None:
        await index.upsert(T, [(mem("x", tenant=OTHER), axis(0))])
        assert [m.tenant for m in await index.get(T, ["x"])] == [T]
        assert await index.get(OTHER, ["x"]) == []

    # -- filters -------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("flt", "expected"),
        [pytest.param(flt, expected, id=name) for name, flt, expected in FILTER_CASES],
    )
    async def test_filter(self, index: VectorIndex, flt: Filter, expected: set[str]) -> None:
        # The expectation is hand-written; the reference semantics must agree with it.
        assert {m.id for m in FILTER_CORPUS if matches(m, flt)} == expected
        await index.upsert(T, [(m, _corpus_vector(i)) for i, m in enumerate(FILTER_CORPUS)])
        await index.upsert(OTHER, [(mem("o1", tenant=OTHER, tags=("project:alpha",)), axis(0))])
        assert set(ids(await index.search(T, axis(0), flt, 100))) == expected

    async def test_filter_is_applied_inside_the_query(self, index: VectorIndex) -> None:
        # The only match of the filter is the farthest vector of all; a post-filtered top-k
        # would come back empty.
        near = [(mem(f"n{i}", tags=("fruit:common",)), vec(1.0, 0.01 * i)) for i in range(60)]
        far = (mem("far", tags=("fruit:rare",), type_="Insight"), vec(-1.0, 0.5))
        await index.upsert(T, [*near, far])
        assert ids(await index.search(T, axis(0), Filter(tags=("fruit:rare",)), 1)) == ["far"]
        assert ids(await index.search(T, axis(0), Filter(exclude_tags=("fruit:common",)), 1)) == [
            "far"
        ]
        assert ids(await index.search(T, axis(0), Filter(types=("Insight",)), 3)) == ["far"]

    # -- relevance -----------------------------------------------------------------------------

    async def test_hits_are_ordered_by_cosine_similarity(self, index: VectorIndex) -> None:
        vectors = {
            "exact": vec(2.0, 0.0, 0.0),  # same direction, other length
            "close": vec(1.0, 0.3, 0.0),
            "mid": vec(1.0, 1.0, 0.0),
            "orthogonal": vec(0.0, 0.0, 1.0),
            "opposite": vec(-1.0, -0.2, 0.0),
        }
        await index.upsert(T, [(mem(k), v) for k, v in vectors.items()])
        query = vec(0.5, 0.0, 0.0)
        hits = await index.search(T, query, Filter(), 10)
        assert ids(hits) == ["exact", "close", "mid", "orthogonal", "opposite"]
        for hit in hits:
            assert hit.score == pytest.approx(cosine(query, vectors[hit.id]), abs=1e-4)

    async def test_limit_caps_the_hits_keeping_the_best(self, index: VectorIndex) -> None:
        await index.upsert(T, [(mem(f"m{i}"), vec(1.0, 0.1 * i)) for i in range(12)])
        hits = await index.search(T, axis(0), Filter(), 3)
        assert ids(hits) == ["m0", "m1", "m2"]
        assert len(await index.search(T, axis(0), Filter(), 100)) == 12
        assert len(await index.search(T, axis(0), Filter(), 1)) == 1

    async def test_wrong_dimension_is_invalid_argument(self, index: VectorIndex) -> None:
        with pytest.raises(InvalidArgument) as err:
            await index.upsert(T, [(mem("a"), [1.0] * (DIM + 1))])
        assert err.value.field == "vector"
        with pytest.raises(InvalidArgument):
            await index.search(T, [1.0] * (DIM - 1), Filter(), 10)
        assert await index.count(T) == 0

    async def test_empty_requests_do_nothing(self, index: VectorIndex) -> None:
        assert await index.upsert(T, []) == UpsertResult(0, 0)
        assert await index.delete(T, [], version=3) == 0
        assert await index.get(T, []) == []
        assert await index.update_access(T, []) == 0
        assert await index.search(T, axis(0), Filter(), 10) == []
        assert await index.count(T) == 0

    # -- access statistics ---------------------------------------------------------------------

    async def test_update_access_sets_statistics_only(self, index: VectorIndex) -> None:
        m = replace(full_memory(), archived=False)
        await index.upsert(T, [(m, axis(0))])
        seen = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)
        updates = [AccessUpdate(id=m.id, last_accessed=seen, access_count=12)]
        assert await index.update_access(T, updates) == 1
        expected = replace(m, last_accessed=seen, access_count=12)
        assert await index.get(T, [m.id]) == [expected]
        [hit] = await index.search(T, axis(0), Filter(), 5)
        assert hit.memory == expected
        assert hit.score == pytest.approx(1.0, abs=1e-4)  # the vector is untouched
        # The version guard is untouched: the same version is still stale, a newer one applies.
        assert await index.upsert(T, [(m, axis(0))]) == UpsertResult(0, 1)
        assert await index.upsert(T, [(replace(m, version=m.version + 1), axis(0))]) == (
            UpsertResult(1, 0)
        )

    async def test_update_access_never_moves_backwards(self, index: VectorIndex) -> None:
        await index.upsert(T, [(mem("a"), axis(0))])
        late = AccessUpdate(id="a", last_accessed=BASE + timedelta(hours=2), access_count=5)
        early = AccessUpdate(id="a", last_accessed=BASE + timedelta(hours=1), access_count=2)
        assert await index.update_access(T, [late]) == 1
        assert await index.update_access(T, [early]) == 0
        [got] = await index.get(T, ["a"])
        assert (got.last_accessed, got.access_count) == (late.last_accessed, 5)

    async def test_update_access_skips_unknown_and_deleted(self, index: VectorIndex) -> None:
        await index.upsert(T, [(mem("a"), axis(0)), (mem("b"), axis(1))])
        await index.delete(T, ["b"], version=2)
        updates = [
            AccessUpdate(id=i, last_accessed=BASE, access_count=1) for i in ("a", "b", "missing")
        ]
        assert await index.update_access(T, updates) == 1
        assert await index.get(T, ["b", "missing"]) == []
        assert await index.count(T) == 1
        assert ids(await index.search(T, axis(1), Filter(), 10)) == ["a"]

    # -- count ---------------------------------------------------------------------------------

    async def test_count_includes_archived_and_excludes_deleted(self, index: VectorIndex) -> None:
        assert await index.count(T) == 0
        await index.upsert(T, [(m, _corpus_vector(i)) for i, m in enumerate(FILTER_CORPUS)])
        assert await index.count(T) == len(FILTER_CORPUS)
        await index.delete(T, ["f1", "f6"], version=2)
        assert await index.count(T) == len(FILTER_CORPUS) - 2
        assert await index.count(OTHER) == 0
