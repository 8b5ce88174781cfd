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
from typing import Any

import pytest

from engram_core.errors import InvalidArgument
from engram_core.filters import matches
from engram_core.model import AccessUpdate, Filter, Memory, RelevanceUpdate, UpsertResult
from engram_core.ports import VectorIndex
from engram_testing.contracts.common import (
    ALL,
    BASE,
    FILTER_CASES,
    FILTER_CORPUS,
    OTHER,
    MemoryStoreContract,
    T,
    filter_params,
    full_memory,
    ids,
    mem,
)

__all__ = [
    "ALL",
    "BASE",
    "DIM",
    "FILTER_CASES",
    "FILTER_CORPUS",
    "OTHER",
    "T",
    "VectorIndexContract",
    "axis",
    "cosine",
    "full_memory",
    "ids",
    "mem",
    "vec",
]

DIM = 8


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


def _corpus_vector(i: int) -> list[float]:
    # Every corpus memory sits near the query direction (axis 0); the filter decides what
    # comes back. Distinct directions, all within ~30 degrees of axis 0.
    return vec(1.0, 0.1 * i, 0.05 * (i % 3))


class VectorIndexContract(MemoryStoreContract):
    """Abstract: subclasses override ``index`` to yield an empty VectorIndex of dimension DIM."""

    @pytest.fixture
    def index(self) -> VectorIndex:
        raise NotImplementedError("a VectorIndexContract subclass must provide the index fixture")

    @pytest.fixture
    def port(self, index: VectorIndex) -> VectorIndex:
        return index

    def item(self, m: Memory, slot: int = 0) -> Any:
        return (m, axis(slot))

    def corpus(self) -> list[Any]:
        return [(m, _corpus_vector(i)) for i, m in enumerate(FILTER_CORPUS)]

    # -- round trip and get --------------------------------------------------------------------

    async def test_reports_its_dimension(self, index: VectorIndex) -> None:
        assert index.dimension == DIM

    async def test_get_round_trips_every_field(self, index: VectorIndex) -> None:
        m = full_memory()
        assert await index.upsert(T, [(m, axis(0))]) == UpsertResult(applied=1, skipped=0)
        assert await index.get(T, [m.id]) == [m]

    async def test_search_hits_carry_the_stored_memory(self, index: VectorIndex) -> None:
        m = replace(full_memory(), archived=False)
        await index.upsert(T, [(m, vec(3.0, 4.0))])
        hits = await index.search(T, vec(3.0, 4.0), Filter(), 5)
        assert ids(hits) == [m.id]
        assert hits[0].memory == m
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)

    async def test_search_batch_answers_each_filter_as_search_does(
        self, index: VectorIndex
    ) -> None:
        await index.upsert(T, self.corpus())
        flts = [
            Filter(),
            Filter(types=("Decision",)),
            Filter(start=BASE + timedelta(minutes=15), end=BASE + timedelta(minutes=45)),
            Filter(tags=("nothing:here",)),
        ]
        batch = await index.search_batch(T, axis(0), flts, 3)
        one_by_one = [await index.search(T, axis(0), f, 3) for f in flts]
        assert [[(h.id, round(h.score, 5)) for h in hits] for hits in batch] == [
            [(h.id, round(h.score, 5)) for h in hits] for hits in one_by_one
        ]
        # Decisions: f1 and f3 (f6 is archived); from minute 15 to 45: f3, f4, f5.
        assert [len(hits) for hits in batch] == [3, 2, 3, 0]
        assert all(h.memory is not None for hits in batch for h in hits)
        assert await index.search_batch(T, axis(0), [], 3) == []
        with pytest.raises(InvalidArgument):
            await index.search_batch(T, [1.0, 0.0], flts, 3)

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

    # -- scan by sequence ----------------------------------------------------------------------

    async def _by_sequence(self, index: VectorIndex, limit: int) -> list[Memory]:
        out: list[Memory] = []
        cursor: str | None = None
        for _ in range(200):
            page = await index.scan_by_sequence(T, cursor, limit)
            assert len(page.memories) <= limit
            out.extend(page.memories)
            if page.next_cursor is None:
                return out
            assert page.next_cursor != cursor, "the cursor must move"
            cursor = page.next_cursor
        raise AssertionError("the scan by sequence never ended")

    async def _tied_corpus(self, index: VectorIndex) -> None:
        # One event may write many memories: versions 5 and 9 hold several each.
        versions = {"a": 9, "b": 5, "c": 9, "d": 2, "e": 5, "f": 9, "g": 7, "h": 9, "i": 5}
        items = [(mem(i, version=v), axis(n % DIM)) for n, (i, v) in enumerate(versions.items())]
        await index.upsert(T, items)
        await index.upsert(OTHER, [(mem("z", tenant=OTHER, version=1), axis(0))])
        await index.upsert(T, [(mem("j", version=3, archived=True), axis(1))])
        await index.upsert(T, [(mem("k", version=4), axis(2))])
        await index.delete(T, ["k"], version=6)

    @pytest.mark.parametrize("limit", [1, 2, 3, 4, 100])
    async def test_scan_by_sequence_orders_by_version_listing_each_once(
        self, index: VectorIndex, limit: int
    ) -> None:
        await self._tied_corpus(index)
        listed = await self._by_sequence(index, limit)
        assert sorted(m.id for m in listed) == sorted("abcdefghij")
        assert [m.version for m in listed] == sorted(m.version for m in listed)

    async def test_scan_by_sequence_moves_a_rewritten_memory_to_the_end(
        self, index: VectorIndex
    ) -> None:
        await self._tied_corpus(index)
        first = await index.scan_by_sequence(T, None, 3)
        assert [m.id for m in first.memories][:2] == ["d", "j"]
        await index.upsert(T, [(mem("d", "changed", version=20), axis(0))])
        assert first.next_cursor is not None
        rest: list[Memory] = []
        cursor: str | None = first.next_cursor
        while cursor is not None:
            page = await index.scan_by_sequence(T, cursor, 3)
            rest.extend(page.memories)
            cursor = page.next_cursor
        assert rest[-1].id == "d"
        assert rest[-1].content == "changed"
        assert sorted(m.id for m in first.memories + rest) == sorted("abcdefghijd")

    async def test_scan_by_sequence_of_an_empty_tenant_is_one_empty_page(
        self, index: VectorIndex
    ) -> None:
        await index.upsert(OTHER, [(mem("z", tenant=OTHER), axis(0))])
        page = await index.scan_by_sequence(T, None, 10)
        assert page.memories == []
        assert page.next_cursor is None

    @pytest.mark.parametrize("cursor", ["x", "12", "-1:a", "a:b", "1: a"])
    async def test_scan_by_sequence_names_a_bad_cursor(
        self, index: VectorIndex, cursor: str
    ) -> None:
        with pytest.raises(InvalidArgument) as err:
            await index.scan_by_sequence(T, cursor, 10)
        assert err.value.field == "cursor"

    async def test_scan_by_sequence_limit_below_one_is_invalid_argument(
        self, index: VectorIndex
    ) -> None:
        with pytest.raises(InvalidArgument) as err:
            await index.scan_by_sequence(T, None, 0)
        assert err.value.field == "limit"

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

    @pytest.mark.parametrize(("flt", "expected"), filter_params(FILTER_CASES))
    async def test_filter(self, index: VectorIndex, flt: Filter, expected: set[str]) -> None:
        # The expectation is hand-written; the reference semantics must agree with it.
        assert {m.id for m in FILTER_CORPUS if matches(m, flt)} == expected
        await index.upsert(T, self.corpus())
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

    # -- relevance -----------------------------------------------------------------------------

    async def test_relevance_shows_in_search_hits(self, index: VectorIndex) -> None:
        m = replace(full_memory(), archived=False, relevance_score=0.5)
        await index.upsert(T, [(m, axis(0))])
        assert await index.update_relevance(T, [RelevanceUpdate(m.id, 0.875)]) == 1
        [hit] = await index.search(T, axis(0), Filter(), 5)
        assert hit.memory == replace(m, relevance_score=0.875)
        assert hit.score == pytest.approx(1.0, abs=1e-4)  # the vector is untouched
        # An upsert carrying a lower score keeps the stored one, in hits too.
        edited = replace(m, content="edited", version=m.version + 1)
        await index.upsert(T, [(edited, axis(1))])
        [hit] = await index.search(T, axis(1), Filter(), 5)
        assert hit.memory == replace(edited, relevance_score=0.875)

    # -- neighbours ----------------------------------------------------------------------------

    _NEIGHBOURHOOD = {
        "a": vec(1.0, 0.0, 0.0),
        "twin": vec(3.0, 0.0, 0.0),  # a's direction exactly: a neighbour, not a itself
        "near": vec(1.0, 0.2, 0.0),
        "mid": vec(1.0, 1.0, 0.0),
        "side": vec(0.0, 1.0, 0.0),
        "away": vec(-1.0, 0.1, 0.0),
    }

    async def _neighbourhood(self, index: VectorIndex) -> None:
        await index.upsert(T, [(mem(k), v) for k, v in self._NEIGHBOURHOOD.items()])

    async def test_neighbours_are_nearest_first_without_the_memory_itself(
        self, index: VectorIndex
    ) -> None:
        await self._neighbourhood(index)
        got = await index.neighbours(T, ["a"], 10, -1.0)
        assert list(got) == ["a"]
        assert [h.id for h in got["a"]] == ["twin", "near", "mid", "side", "away"]
        for h in got["a"]:
            want = cosine(self._NEIGHBOURHOOD["a"], self._NEIGHBOURHOOD[h.id])
            assert h.score == pytest.approx(want, abs=1e-4)
        # Hits name the neighbour and its cosine; Get fetches memories when they are needed.
        assert all(h.memory is None for h in got["a"])

    async def test_neighbours_respect_limit_and_min_score(self, index: VectorIndex) -> None:
        await self._neighbourhood(index)
        assert [h.id for h in (await index.neighbours(T, ["a"], 2, -1.0))["a"]] == ["twin", "near"]
        # cos(a, mid) ~ 0.707, cos(a, side) = 0: the threshold keeps the first three.
        got = await index.neighbours(T, ["a"], 10, 0.5)
        assert [h.id for h in got["a"]] == ["twin", "near", "mid"]
        assert all(h.score >= 0.5 for h in got["a"])
        # Nothing close enough: the memory is answered, with no neighbours.
        assert await index.neighbours(T, ["side"], 10, 0.99) == {"side": []}

    async def test_neighbours_of_several_ids_in_one_call(self, index: VectorIndex) -> None:
        await self._neighbourhood(index)
        await index.delete(T, ["away"], version=2)
        got = await index.neighbours(T, ["side", "missing", "a", "away", "side"], 2, -1.0)
        # Unknown and deleted ids are left out; a repeated id is answered once.
        assert sorted(got) == ["a", "side"]
        assert [h.id for h in got["a"]] == ["twin", "near"]
        assert [h.id for h in got["side"]] == ["mid", "near"]
        assert await index.neighbours(T, [], 5, 0.0) == {}
        with pytest.raises(InvalidArgument) as err:
            await index.neighbours(T, ["a"], 0, 0.0)
        assert err.value.field == "limit"

    async def test_neighbours_never_show_tombstones(self, index: VectorIndex) -> None:
        await self._neighbourhood(index)
        await index.delete(T, ["twin", "near"], version=2)
        got = await index.neighbours(T, ["a"], 10, -1.0)
        assert [h.id for h in got["a"]] == ["mid", "side", "away"]
        assert await index.neighbours(T, ["twin"], 10, -1.0) == {}

    async def test_neighbours_include_archived_memories(self, index: VectorIndex) -> None:
        await index.upsert(
            T, [(mem("a"), vec(1.0, 0.0)), (mem("old", archived=True), vec(1.0, 0.1))]
        )
        got = await index.neighbours(T, ["a", "old"], 5, 0.0)
        assert {k: [h.id for h in v] for k, v in got.items()} == {"a": ["old"], "old": ["a"]}

    async def test_neighbours_stay_in_the_tenant(self, index: VectorIndex) -> None:
        # OTHER's points lie right on a's direction, and there are many of them: a search
        # that took a top-k over every tenant and filtered afterwards would come back empty.
        await index.upsert(T, [(mem("a"), vec(1.0, 0.0)), (mem("far"), vec(-1.0, 0.3))])
        crowd = [(mem(f"o{i}", tenant=OTHER), vec(1.0, 0.001 * i)) for i in range(60)]
        await index.upsert(OTHER, [*crowd, (mem("a", tenant=OTHER), vec(0.0, 1.0))])
        got = await index.neighbours(T, ["a"], 1, -1.0)
        assert [h.id for h in got["a"]] == ["far"]
        assert got["a"][0].score == pytest.approx(cosine(vec(1.0), vec(-1.0, 0.3)), abs=1e-4)
        # The same id in OTHER is OTHER's own memory, with OTHER's neighbours.
        other = await index.neighbours(OTHER, ["a", "far"], 1, -1.0)
        assert list(other) == ["a"]
        assert other["a"][0].id == "o59"
