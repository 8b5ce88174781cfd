"""The behaviour every `engram_core.ports.TextIndex` adapter must show.

Subclass `TextIndexContract` in a ``Test*`` class and override the ``index`` fixture to yield an
EMPTY index (fresh per test); every test here then runs against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from engram_core.filters import matches
from engram_core.model import AccessUpdate, Filter, Hit, Memory, TagMatch, TagMode, UpsertResult
from engram_core.ports import TextIndex
from engram_core.tags import tag_prefixes

T = "tenant-a"
OTHER = "tenant-b"
BASE = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ALL = Filter(include_archived=True)


def mem(
    id_: str,
    content: str,
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
        content=content,
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
            "nested": {"k": [1, "two", None, True]},
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


# Every memory contains "note"; the filter decides which ones a search for it returns.
FILTER_CORPUS: tuple[Memory, ...] = (
    mem("f1", "note one", tags=("project:alpha", "lang:python"), type_="Decision", minutes=0),
    mem("f2", "note two", tags=("project:alpha:api",), type_="Pattern", minutes=10),
    mem("f3", "note three", tags=("project:beta",), type_="Decision", minutes=20),
    mem(
        "f4", "note four", tags=("lang:python", "entity:people:sarah"), type_="Insight", minutes=30
    ),
    mem("f5", "note five", type_="Memory", minutes=40),
    mem("f6", "note six", tags=("project:alpha",), type_="Decision", minutes=50, archived=True),
    # "project:alpha" is no tag prefix of "project:alphabet": prefixes end at a separator.
    mem("f7", "note seven", tags=("project:alphabet",), type_="Context", minutes=60),
)
_MS = 1 / 60_000  # a millisecond in minutes
FILTER_CASES: list[tuple[str, Filter, set[str]]] = [
    ("none", Filter(), {"f1", "f2", "f3", "f4", "f5", "f7"}),
    ("include_archived", ALL, {"f1", "f2", "f3", "f4", "f5", "f6", "f7"}),
    ("tag_exact", Filter(tags=("project:alpha",)), {"f1"}),
    ("tag_exact_case", Filter(tags=("Project:ALPHA",)), {"f1"}),
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
    ("start_sub_second", Filter(start=BASE + timedelta(minutes=20 + _MS)), {"f4", "f5", "f7"}),
    ("end_sub_second", Filter(end=BASE + timedelta(minutes=20 - _MS)), {"f1", "f2"}),
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
            start=BASE + timedelta(minutes=5),
        ),
        {"f3", "f7"},
    ),
]


class TextIndexContract:
    """Abstract: subclasses override ``index`` to yield an empty TextIndex."""

    @pytest.fixture
    def index(self) -> TextIndex:
        raise NotImplementedError("a TextIndexContract subclass must provide the index fixture")

    # -- round trip and get --------------------------------------------------------------------

    async def test_get_round_trips_every_field(self, index: TextIndex) -> None:
        m = full_memory()
        assert await index.upsert(T, [m]) == UpsertResult(applied=1, skipped=0)
        assert await index.get(T, [m.id]) == [m]

    async def test_get_follows_request_order_and_skips_unknown_ids(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "alpha"), mem("b", "beta"), mem("c", "gamma")])
        got = await index.get(T, ["c", "missing", "a", "c"])
        assert [m.id for m in got] == ["c", "a"]
        assert await index.get(T, ["missing"]) == []

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

    async def test_upsert_batch_counts_applied_and_skipped(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "one", version=5), mem("b", "two", version=5)])
        result = await index.upsert(
            T,
            [
                mem("a", "one again", version=4),  # older: skipped
                mem("b", "two again", version=6),  # newer: applied
                mem("c", "three", version=1),  # new: applied
            ],
        )
        assert result == UpsertResult(applied=2, skipped=1)
        got = {m.id: m.content for m in await index.get(T, ["a", "b", "c"])}
        assert got == {"a": "one", "b": "two again", "c": "three"}

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

    async def test_delete_counts_only_live_memories(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "x"), mem("b", "y")])
        assert await index.delete(T, ["a", "b", "missing", "a"], version=5) == 2
        assert await index.delete(T, ["a", "b"], version=5) == 0  # redelivered
        assert await index.delete(T, ["a", "b"], version=6) == 0  # already gone
        assert await index.count(T) == 0

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

    @pytest.mark.parametrize(
        ("flt", "expected"),
        [pytest.param(flt, expected, id=name) for name, flt, expected in FILTER_CASES],
    )
    async def test_filter(self, index: TextIndex, flt: Filter, expected: set[str]) -> None:
        # The expectation is hand-written; the reference semantics must agree with it.
        assert {m.id for m in FILTER_CORPUS if matches(m, flt)} == expected
        await index.upsert(T, list(FILTER_CORPUS))
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

    async def test_update_access_never_moves_backwards(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "x")])
        late = AccessUpdate(id="a", last_accessed=BASE + timedelta(hours=2), access_count=5)
        early = AccessUpdate(id="a", last_accessed=BASE + timedelta(hours=1), access_count=2)
        assert await index.update_access(T, [late]) == 1
        assert await index.update_access(T, [early]) == 0
        [got] = await index.get(T, ["a"])
        assert (got.last_accessed, got.access_count) == (late.last_accessed, 5)

    async def test_upsert_keeps_newer_access_statistics(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "first draft")])
        seen = BASE + timedelta(hours=1)
        await index.update_access(T, [AccessUpdate(id="a", last_accessed=seen, access_count=4)])
        # An update of the content carries no (or older) access statistics: the stored stay.
        await index.upsert(T, [mem("a", "second draft", version=2)])
        [got] = await index.get(T, ["a"])
        assert (got.content, got.last_accessed, got.access_count) == ("second draft", seen, 4)
        later = seen + timedelta(hours=1)
        third = replace(mem("a", "third draft", version=3), last_accessed=later, access_count=9)
        await index.upsert(T, [third])
        assert await index.get(T, ["a"]) == [third]

    async def test_update_access_skips_unknown_and_deleted(self, index: TextIndex) -> None:
        await index.upsert(T, [mem("a", "x"), mem("b", "y")])
        await index.delete(T, ["b"], version=2)
        updates = [
            AccessUpdate(id=i, last_accessed=BASE, access_count=1) for i in ("a", "b", "missing")
        ]
        assert await index.update_access(T, updates) == 1
        assert await index.get(T, ["b", "missing"]) == []
        assert await index.count(T) == 1

    # -- count ---------------------------------------------------------------------------------

    async def test_count_includes_archived_and_excludes_deleted(self, index: TextIndex) -> None:
        assert await index.count(T) == 0
        await index.upsert(T, list(FILTER_CORPUS))
        assert await index.count(T) == len(FILTER_CORPUS)
        await index.delete(T, ["f1", "f6"], version=2)
        assert await index.count(T) == len(FILTER_CORPUS) - 2
        assert await index.count(OTHER) == 0
