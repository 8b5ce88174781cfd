"""The behaviour every `engram_core.ports.TextIndex` adapter must show.

Subclass `TextIndexContract` in a ``Test*`` class and override the ``index`` fixture to yield an
EMPTY index (fresh per test); every test here then runs against it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram_core.filters import matches
from engram_core.model import AccessUpdate, Filter, Memory, RelevanceUpdate, TagMatch, UpsertResult
from engram_core.ordering import Sort, best
from engram_core.ports import TextIndex
from engram_testing.contracts import common
from engram_testing.contracts.common import (
    ALL,
    BASE,
    OTHER,
    MemoryStoreContract,
    T,
    filter_params,
    ids,
    mem,
)

__all__ = [
    "ALL",
    "BASE",
    "FILTER_CASES",
    "FILTER_CORPUS",
    "OTHER",
    "T",
    "TextIndexContract",
    "full_memory",
    "ids",
    "mem",
]


def full_memory() -> Memory:
    """A memory with every field away from its default (this suite pins a smaller metadata)."""
    metadata = {"source": "chat", "turn": 3, "score": 1.5, "nested": {"k": [1, "two", None, True]}}
    return replace(common.full_memory(), metadata=metadata)


# Every memory contains "note"; the filter decides which ones a search for it returns.
FILTER_CORPUS: tuple[Memory, ...] = tuple(
    replace(m, content=f"note {word}")
    for m, word in zip(
        common.FILTER_CORPUS,
        ("one", "two", "three", "four", "five", "six", "seven"),
        strict=True,
    )
)
# This suite has two shared cases fewer (tag_exact_slash, tags_any_prefix), pins the time
# edges to the millisecond rather than the microsecond and combines without excluding a type.
_NOT_HERE = {
    "tag_exact_slash",
    "tags_any_prefix",
    "start_one_microsecond_late",
    "end_one_microsecond_early",
    "combined",
}
_MS = 1 / 60_000  # a millisecond in minutes
FILTER_CASES: list[common.FilterCase] = [
    *(case for case in common.FILTER_CASES if case[0] not in _NOT_HERE),
    ("start_sub_second", Filter(start=BASE + timedelta(minutes=20 + _MS)), {"f4", "f5", "f7"}),
    ("end_sub_second", Filter(end=BASE + timedelta(minutes=20 - _MS)), {"f1", "f2"}),
    (
        "combined",
        Filter(
            tags=("project",),
            tag_match=TagMatch.PREFIX,
            exclude_tags=("project:alpha:api",),
            start=BASE + timedelta(minutes=5),
        ),
        {"f3", "f7"},
    ),
]


class TextIndexContract(MemoryStoreContract):
    """Abstract: subclasses override ``index`` to yield an empty TextIndex."""

    @pytest.fixture
    def index(self) -> TextIndex:
        raise NotImplementedError("a TextIndexContract subclass must provide the index fixture")

    @pytest.fixture
    def port(self, index: TextIndex) -> TextIndex:
        return index

    def item(self, m: Memory, slot: int = 0) -> Any:
        return m

    def corpus(self) -> list[Any]:
        return list(FILTER_CORPUS)

    # -- round trip and get --------------------------------------------------------------------

    async def test_get_round_trips_every_field(self, index: TextIndex) -> None:
        m = full_memory()
        assert await index.upsert(T, [m]) == UpsertResult(applied=1, skipped=0)
        assert await index.get(T, [m.id]) == [m]

    async def test_search_hits_carry_the_stored_memory(self, index: TextIndex) -> None:
        m = replace(full_memory(), archived=False)
        await index.upsert(T, [m])
        hits = await index.search(T, "beta friday", Filter(), 5)
        assert ids(hits) == [m.id]
        assert hits[0].memory == m
        assert hits[0].score > 0

    # -- versions and tombstones ---------------------------------------------------------------

    async def test_upsert_applies_only_newer_versions(self, index: TextIndex) -> None:
        assert await index.upsert(T, [mem("a", "apple pie", version=2)]) == UpsertResult(1, 0)
        assert await index.upsert(T, [mem("a", "banana bread", version=1)]) == UpsertResult(0, 1)
        assert await index.upsert(T, [mem("a", "banana bread", version=2)]) == UpsertResult(0, 1)
        assert [m.content for m in await index.get(T, ["a"])] == ["apple pie"]
        assert ids(await index.search(T, "banana", Filter(), 10)) == []

        assert await index.upsert(T, [mem("a", "cherry tart", version=3)]) == UpsertResult(1, 0)
        assert [m.version for m in await index.get(T, ["a"])] == [3]
        # The index follows the new content: the old words no longer find it.
        assert ids(await index.search(T, "apple", Filter(), 10)) == []
        assert ids(await index.search(T, "cherry", Filter(), 10)) == ["a"]
        assert await index.count(T) == 1

    async def test_duplicate_ids_in_one_batch_keep_the_highest_version(
        self, index: TextIndex
    ) -> None:
        result = await index.upsert(
            T,
            [
                mem("a", "middle", version=2),
                mem("a", "newest", version=3),
                mem("a", "old", version=1),
            ],
        )
        assert result.applied == 1
        assert result.skipped == 2
        assert [m.content for m in await index.get(T, ["a"])] == ["newest"]
        assert await index.count(T) == 1

    async def test_delete_leaves_a_tombstone(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "walrus facts", version=1), mem("b", "walrus tusks")])
        assert await index.delete(T, ["a"], version=2) == 1
        assert await index.get(T, ["a"]) == []
        assert ids(await index.search(T, "walrus", ALL, 10)) == ["b"]
        assert await index.count(T) == 1

        # A redelivered older write cannot resurrect it, nor one at the tombstone's version.
        assert await index.upsert(T, [mem("a", "walrus facts", version=1)]) == UpsertResult(0, 1)
        assert await index.upsert(T, [mem("a", "walrus facts", version=2)]) == UpsertResult(0, 1)
        assert await index.get(T, ["a"]) == []
        assert await index.count(T) == 1

        # A newer write re-creates it.
        assert await index.upsert(T, [mem("a", "walrus again", version=3)]) == UpsertResult(1, 0)
        assert [m.content for m in await index.get(T, ["a"])] == ["walrus again"]
        assert set(ids(await index.search(T, "walrus", ALL, 10))) == {"a", "b"}
        assert await index.count(T) == 2

    async def test_delete_before_upsert_blocks_older_writes(self, index: TextIndex) -> None:
        assert await index.delete(T, ["early"], version=5) == 0
        assert await index.upsert(T, [mem("early", "late arrival", version=4)]) == UpsertResult(
            0, 1
        )
        assert await index.get(T, ["early"]) == []
        assert await index.count(T) == 0
        assert await index.upsert(T, [mem("early", "recreated", version=6)]) == UpsertResult(1, 0)
        assert [m.content for m in await index.get(T, ["early"])] == ["recreated"]

    async def test_delete_with_an_older_version_changes_nothing(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "kept", version=7)])
        assert await index.delete(T, ["a"], version=3) == 0
        assert [m.content for m in await index.get(T, ["a"])] == ["kept"]
        assert ids(await index.search(T, "kept", Filter(), 10)) == ["a"]

    async def test_tombstones_never_show_up(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "ghost story", tags=("x:y",))])
        await index.delete(T, ["a"], version=2)
        await index.delete(T, ["never-stored"], version=2)
        assert await index.get(T, ["a", "never-stored"]) == []
        for flt in (Filter(), ALL, Filter(exclude_tags=("x",)), Filter(start=BASE - timedelta(1))):
            assert await index.search(T, "ghost story", flt, 10) == []
        assert await index.count(T) == 0

    # -- tenants -------------------------------------------------------------------------------

    async def test_tenants_are_isolated(self, index: TextIndex) -> None:
        await index.upsert(
            T, [mem("same", "shared secret alpha", version=5), mem("t-only", "alpha")]
        )
        await index.upsert(OTHER, [mem("same", "shared secret beta", tenant=OTHER, version=1)])
        # The version guard is per tenant: version 1 applied although tenant-a holds version 5.
        assert [m.content for m in await index.get(OTHER, ["same"])] == ["shared secret beta"]
        assert [m.tenant for m in await index.get(OTHER, ["same"])] == [OTHER]
        assert await index.get(OTHER, ["t-only"]) == []
        assert ids(await index.search(OTHER, "alpha", ALL, 10)) == []
        assert ids(await index.search(OTHER, "secret", ALL, 10)) == ["same"]
        assert (await index.search(OTHER, "secret", ALL, 10))[0].memory == (
            await index.get(OTHER, ["same"])
        )[0]
        assert await index.count(T) == 2
        assert await index.count(OTHER) == 1

        assert await index.delete(OTHER, ["same", "t-only"], version=9) == 1
        assert [m.content for m in await index.get(T, ["same"])] == ["shared secret alpha"]
        assert await index.count(T) == 2
        assert await index.count(OTHER) == 0

        update = AccessUpdate(id="t-only", last_accessed=BASE, access_count=3)
        assert await index.update_access(OTHER, [update]) == 0
        assert [m.access_count for m in await index.get(T, ["t-only"])] == [0]

    # -- filters -------------------------------------------------------------------------------

    @pytest.mark.parametrize(("flt", "expected"), filter_params(FILTER_CASES))
    async def test_filter(self, index: TextIndex, flt: Filter, expected: set[str]) -> None:
        # The expectation is hand-written; the reference semantics must agree with it.
        assert {m.id for m in FILTER_CORPUS if matches(m, flt)} == expected
        await index.upsert(T, self.corpus())
        await index.upsert(OTHER, [mem("o1", "note", tenant=OTHER, tags=("project:alpha",))])
        assert set(ids(await index.search(T, "note", flt, 100))) == expected

    async def test_filter_is_applied_inside_the_query(self, index: TextIndex) -> None:
        # The only match of the filter is the weakest text match of all; a post-filtered
        # top-k would come back empty.
        strong = [mem(f"s{i}", "kiwi kiwi kiwi", tags=("fruit:common",)) for i in range(40)]
        weak = mem(
            "weak",
            "a long rambling note that mentions kiwi once among many other unrelated words",
            tags=("fruit:rare",),
        )
        await index.upsert(T, [*strong, weak])
        assert ids(await index.search(T, "kiwi", Filter(tags=("fruit:rare",)), 1)) == ["weak"]
        assert ids(await index.search(T, "kiwi", Filter(exclude_tags=("fruit:common",)), 1)) == [
            "weak"
        ]

    # -- relevance -----------------------------------------------------------------------------

    async def test_rare_query_terms_rank_first(self, index: TextIndex) -> None:
        await index.upsert(
            T,
            [
                mem("r1", "The weekly meeting covered the budget and the roadmap."),
                mem("r2", "We had a meeting about hiring and about onboarding."),
                mem("r3", "Meeting notes: the team agreed on a new meeting cadence."),
                mem("r4", "Sarah prefers the Zephyr quantization library for embeddings."),
                mem("r5", "Lunch meeting with the design team about the offsite."),
                mem("r6", "The meeting about the meeting was moved to Tuesday."),
            ],
        )
        hits = await index.search(T, "meeting about zephyr quantization", Filter(), 10)
        assert hits[0].id == "r4"
        assert set(ids(hits)) == {"r1", "r2", "r3", "r4", "r5", "r6"}
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert all(s > 0 for s in scores)

    async def test_shorter_document_ranks_higher_for_the_same_term(self, index: TextIndex) -> None:
        await index.upsert(
            T,
            [
                mem(
                    "long",
                    "yesterday we walked through the market, bought bread, cheese, apples, "
                    "plums, olives and one papaya, then went home for a long slow dinner",
                ),
                mem("short", "papaya smoothie recipe"),
                mem("none", "banana smoothie recipe"),
            ],
        )
        assert ids(await index.search(T, "papaya", Filter(), 10)) == ["short", "long"]

    async def test_words_of_the_query_in_order_rank_first(self, index: TextIndex) -> None:
        # The same words, the same length: only the phrase boost tells them apart, whichever
        # is stored first.
        await index.upsert(
            T,
            [
                mem("scattered", "the house by the red barn was blue"),
                mem("phrase", "the barn by the red house was blue"),
                mem("other", "a green door"),
            ],
        )
        assert ids(await index.search(T, "red house", Filter(), 10)) == ["phrase", "scattered"]
        assert ids(await index.search(T, "red barn", Filter(), 10)) == ["scattered", "phrase"]
        # A pair of function words is no phrase: the order is BM25's alone (a tie, by id).
        tied = await index.search(T, "by the", Filter(), 10)
        assert tied[0].score == pytest.approx(tied[1].score)

    async def test_limit_caps_the_hits_keeping_the_best(self, index: TextIndex) -> None:
        await index.upsert(T, [mem(f"m{i}", "common word " + "filler " * i) for i in range(12)])
        hits = await index.search(T, "common", Filter(), 3)
        assert ids(hits) == ["m0", "m1", "m2"]
        assert len(await index.search(T, "common", Filter(), 100)) == 12

    async def test_stemming_matches_word_forms(self, index: TextIndex) -> None:
        await index.upsert(
            T,
            [
                mem("run", "She runs five kilometres every morning."),
                mem("db", "The databases were migrated over the weekend."),
                mem("other", "Nothing relevant here."),
            ],
        )
        assert ids(await index.search(T, "running", Filter(), 10)) == ["run"]
        assert ids(await index.search(T, "database", Filter(), 10)) == ["db"]

    async def test_query_ignores_case_and_keeps_accents(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("c", "Café au lait at the Kyōto station"), mem("d", "tea")])
        assert ids(await index.search(T, "CAFÉ", Filter(), 10)) == ["c"]
        assert ids(await index.search(T, "kyōto", Filter(), 10)) == ["c"]

    async def test_a_query_of_common_words_still_matches(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("h", "To be or not to be"), mem("o", "Other words")])
        assert ids(await index.search(T, "to be", Filter(), 10)) == ["h"]

    async def test_tags_are_searchable_as_words(self, index: TextIndex) -> None:
        await index.upsert(
            T,
            [
                mem("t1", "Kickoff went well.", tags=("project:alpha",)),
                mem("t2", "Nothing to report.", tags=("project:beta",)),
            ],
        )
        assert ids(await index.search(T, "alpha", Filter(), 10)) == ["t1"]
        assert ids(await index.search(T, "project alpha", Filter(), 10))[0] == "t1"

    async def test_whitelisted_metadata_values_are_searchable(self, index: TextIndex) -> None:
        # The default whitelist (topic, project, source): strings, lists and numbers are read.
        await index.upsert(
            T,
            [
                replace(mem("w1", "The launch slipped."), metadata={"project": "zephyrine"}),
                replace(mem("w2", "Lunch plans."), metadata={"owner": "zephyrine"}),
                replace(mem("w3", "Approved."), metadata={"topic": ["billing", "forecasts"]}),
                replace(mem("w4", "Sent."), metadata={"source": 4711}),
            ],
        )
        assert ids(await index.search(T, "zephyrine", Filter(), 10)) == ["w1"]
        assert ids(await index.search(T, "forecast", Filter(), 10)) == ["w3"]
        assert ids(await index.search(T, "4711", Filter(), 10)) == ["w4"]
        [hit] = await index.search(T, "zephyrine", Filter(), 10)
        assert hit.memory is not None
        assert hit.memory.metadata == {"project": "zephyrine"}

    async def test_punctuation_heavy_queries_do_not_raise(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("p", "foo bar baz"), mem("q", "unrelated text")])
        for query in [
            "foo:bar AND (",
            'title:"unclosed foo',
            "+foo -bar",
            "foo^2 bar~ baz*",
            "foo OR NOT",
            "(foo)) [bar",
        ]:
            assert "p" in ids(await index.search(T, query, Filter(), 10)), query
        for query in [
            '"',
            "(",
            ")",
            "*",
            "\\",
            ":",
            "-",
            "",
            "   ",
            "{}()<>!?|&&||~^*",
            "[1 TO *]",
        ]:
            assert await index.search(T, query, Filter(), 10) == [], query
        assert await index.search(T, "foo " * 5000, Filter(), 10) != []

    # -- access statistics ---------------------------------------------------------------------

    async def test_update_access_sets_statistics_only(self, index: TextIndex) -> None:
        m = replace(full_memory(), archived=False)
        await index.upsert(T, [m])
        seen = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)
        updates = [AccessUpdate(id=m.id, last_accessed=seen, access_count=12)]
        assert await index.update_access(T, updates) == 1
        expected = replace(m, last_accessed=seen, access_count=12)
        assert await index.get(T, [m.id]) == [expected]
        assert [h.memory for h in await index.search(T, "friday", Filter(), 5)] == [expected]
        # The version guard is untouched: the same version is still stale, a newer one applies.
        assert await index.upsert(T, [m]) == UpsertResult(0, 1)
        assert await index.upsert(T, [replace(m, version=m.version + 1)]) == UpsertResult(1, 0)

    async def test_update_access_skips_unknown_and_deleted(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "x"), mem("b", "y")])
        await index.delete(T, ["b"], version=2)
        updates = [
            AccessUpdate(id=i, last_accessed=BASE, access_count=1) for i in ("a", "b", "missing")
        ]
        assert await index.update_access(T, updates) == 1
        assert await index.get(T, ["b", "missing"]) == []
        assert await index.count(T) == 1

    # -- relevance -----------------------------------------------------------------------------

    async def test_relevance_shows_in_search_hits(self, index: TextIndex) -> None:
        m = replace(full_memory(), archived=False, relevance_score=0.5)
        await index.upsert(T, [m])
        assert await index.update_relevance(T, [RelevanceUpdate(m.id, 0.875)]) == 1
        assert [h.memory for h in await index.search(T, "friday", Filter(), 5)] == [
            replace(m, relevance_score=0.875)
        ]
        # An upsert carrying a lower score keeps the stored one, in hits too.
        edited = replace(m, content="Ship the beta on Monday.", version=m.version + 1)
        await index.upsert(T, [edited])
        [hit] = await index.search(T, "monday", Filter(), 5)
        assert hit.memory == replace(edited, relevance_score=0.875)

    # -- top: a listing without text (trending) ------------------------------------------------

    async def test_top_lists_by_each_sort(self, index: TextIndex) -> None:
        later = BASE + timedelta(hours=1)
        await index.upsert(
            T,
            [
                replace(mem("imp", "alpha", minutes=1), importance=0.9),
                replace(mem("new", "beta", minutes=30), importance=0.2),
                replace(mem("rel", "gamma", minutes=2), importance=0.3),
                replace(mem("hot", "delta", minutes=3), importance=0.4),
                replace(mem("old", "epsilon", minutes=0), importance=0.1),
            ],
        )
        await index.update_relevance(T, [RelevanceUpdate("rel", 0.8), RelevanceUpdate("hot", 0.1)])
        await index.update_access(T, [AccessUpdate("hot", later, 7), AccessUpdate("imp", later, 2)])
        # Equal values (no score, no access yet) list newer first.
        expected = {
            Sort.IMPORTANCE: ["imp", "hot", "rel", "new", "old"],
            Sort.RECENCY: ["new", "hot", "rel", "imp", "old"],
            Sort.RELEVANCE: ["rel", "hot", "new", "imp", "old"],
            Sort.ACCESS_COUNT: ["hot", "imp", "new", "rel", "old"],
        }
        stored = await index.get(T, ["imp", "new", "rel", "hot", "old"])
        for sort, order in expected.items():
            assert [m.id for m in best(stored, Filter(), sort, 5)] == order, sort
            listed = await index.top(T, Filter(), sort, 5)
            assert [m.id for m in listed] == order, sort
            assert listed == sorted(stored, key=lambda m: order.index(m.id)), sort
            assert [m.id for m in await index.top(T, Filter(), sort, 2)] == order[:2], sort

    async def test_top_breaks_ties_newer_then_id(self, index: TextIndex) -> None:
        # More memories share the boundary's importance than the limit leaves room for, and two
        # of them share the newest timestamp too.
        shared = [replace(mem(f"m{i:02}", minutes=i), importance=0.5) for i in range(30)]
        twins = [replace(mem(i, minutes=40), importance=0.5) for i in ("twin-b", "twin-a")]
        first = replace(mem("first", minutes=-5), importance=0.7)
        last = replace(mem("last", minutes=99), importance=0.1)
        await index.upsert(T, [*shared, *twins, first, last])
        listed = await index.top(T, Filter(), Sort.IMPORTANCE, 6)
        assert [m.id for m in listed] == ["first", "twin-a", "twin-b", "m29", "m28", "m27"]
        listed = await index.top(T, Filter(), Sort.IMPORTANCE, 2)
        assert [m.id for m in listed] == ["first", "twin-a"]
        listed = await index.top(T, Filter(), Sort.RECENCY, 2)
        assert [m.id for m in listed] == ["last", "twin-a"]
        listed = await index.top(T, Filter(), Sort.IMPORTANCE, 100)
        assert len(listed) == 34
        assert [m.id for m in listed[-2:]] == ["m00", "last"]

    async def _scored_and_accessed(self, index: TextIndex) -> list[str]:
        """14 memories whose relevance scores and access counts come from upserts, updates or
        both, many sharing the value at some limit; two scores and two importances differ only
        beyond a 32-bit float. Their ids."""
        names = [f"s{i:02}" for i in range(14)]
        own = {"s00": 0.25, "s01": 0.25, "s02": 0.5, "s03": 0.9}  # scored by the upsert alone
        seen = BASE + timedelta(days=1)
        memories = [
            replace(
                mem(n, tags=("half",) if i % 2 else ()),
                timestamp=BASE + timedelta(minutes=i % 10),  # s10..s13 share s00..s03's
                relevance_score=own.get(n, 0.0),
            )
            for i, n in enumerate(names)
        ]
        # An upsert carrying statistics counts like an UpdateAccess.
        memories[5] = replace(memories[5], last_accessed=seen, access_count=3)
        # One 32-bit float apart from 0.6: the older one must lead.
        memories[12] = replace(memories[12], importance=0.6000000000000001)
        memories[3] = replace(memories[3], importance=0.6)
        await index.upsert(T, memories)
        # 0.3 and the next double above it are one 32-bit float: the older one must lead.
        scores = {"s04": 0.5, "s05": 0.5, "s06": 0.5, "s07": 0.75, "s08": 0.3, "s11": 0.5}
        scores |= {"s02": 0.125, "s10": 0.30000000000000004, "s12": 0.5}
        await index.update_relevance(T, [RelevanceUpdate(i, v) for i, v in scores.items()])
        counts = {"s01": 3, "s02": 3, "s06": 9, "s07": 3, "s09": 1, "s11": 3, "s12": 0}
        await index.update_access(T, [AccessUpdate(i, seen, c) for i, c in counts.items()])
        return names

    async def _assert_top_is_best(self, index: TextIndex, names: list[str]) -> None:
        stored = await index.get(T, names)
        for sort in (Sort.RELEVANCE, Sort.ACCESS_COUNT, Sort.IMPORTANCE):
            for flt in (Filter(), Filter(tags=("half",))):
                for limit in range(1, len(names) + 2):
                    expected = best(stored, flt, sort, limit)
                    assert await index.top(T, flt, sort, limit) == expected, (sort, flt, limit)

    async def test_top_by_value_is_exact_at_every_limit(self, index: TextIndex) -> None:
        names = await self._scored_and_accessed(index)
        stored = {m.id: m for m in await index.get(T, names)}
        assert stored["s10"].relevance_score > stored["s08"].relevance_score
        assert stored["s05"].access_count == 3
        await self._assert_top_is_best(index, names)

    async def test_top_by_value_follows_writes(self, index: TextIndex) -> None:
        names = await self._scored_and_accessed(index)
        later = BASE + timedelta(days=2)
        # A tied one deleted, one re-created with less, one edited (keeps its score and
        # count), one archived, one scored down and one accessed again.
        await index.delete(T, ["s04", "s06"], version=2)
        await index.upsert(T, [replace(mem("s06", minutes=30, version=3), relevance_score=0.05)])
        edited = [replace(mem("s07", "edited", minutes=7, version=2), relevance_score=0.1)]
        edited.append(mem("s11", minutes=1, version=2, archived=True))
        await index.upsert(T, edited)
        await index.update_relevance(T, [RelevanceUpdate("s03", 0.0)])
        await index.update_access(T, [AccessUpdate("s09", later, 40)])
        stored = {m.id: m for m in await index.get(T, names)}
        assert (stored["s07"].relevance_score, stored["s07"].access_count) == (0.75, 3)
        assert (stored["s06"].relevance_score, stored["s06"].access_count) == (0.05, 0)
        await self._assert_top_is_best(index, names)
        listed = await index.top(T, Filter(), Sort.ACCESS_COUNT, 1)
        assert [(m.id, m.access_count) for m in listed] == [("s09", 40)]

    @pytest.mark.parametrize(("flt", "expected"), filter_params(FILTER_CASES))
    async def test_top_applies_the_filter(
        self, index: TextIndex, flt: Filter, expected: set[str]
    ) -> None:
        await index.upsert(T, self.corpus())
        await index.upsert(OTHER, [mem("o1", "note", tenant=OTHER, tags=("project:alpha",))])
        listed = await index.top(T, flt, Sort.RECENCY, 100)
        assert {m.id for m in listed} == expected
        assert listed == best(FILTER_CORPUS, flt, Sort.RECENCY, 100)

    async def test_top_follows_writes(self, index: TextIndex) -> None:
        await index.upsert(
            T,
            [
                replace(mem("a", minutes=1), importance=0.9),
                replace(mem("b", minutes=2), importance=0.5),
            ],
        )
        await index.upsert(OTHER, [replace(mem("x", tenant=OTHER), importance=1.0)])
        assert [m.id for m in await index.top(T, Filter(), Sort.IMPORTANCE, 10)] == ["a", "b"]
        await index.upsert(T, [replace(mem("a", minutes=1, version=2), importance=0.1)])
        assert [m.id for m in await index.top(T, Filter(), Sort.IMPORTANCE, 10)] == ["b", "a"]
        await index.delete(T, ["b"], version=3)
        assert [m.id for m in await index.top(T, Filter(), Sort.IMPORTANCE, 10)] == ["a"]
        assert await index.top(T, Filter(), Sort.IMPORTANCE, 0) == []
        assert await index.top("nobody", Filter(), Sort.RECENCY, 10) == []
