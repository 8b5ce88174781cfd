"""Candidate generation's pure parts: the rule-based decomposer, multi-query merging,
trending's order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram_core import validation as v
from engram_core.entities import conversation_rules
from engram_core.errors import InvalidArgument
from engram_core.model import Hit, Memory
from engram_core.ordering import Sort
from engram_core.scoring import ScoredCandidate, StreamScore
from engram_gateway.service.decompose import RuleDecomposer, decompose
from engram_gateway.service.multiquery import (
    check_per_query_limit,
    check_queries,
    merge_answers,
    sub_queries,
    with_provenance,
)
from engram_gateway.service.trending import check_sort, is_trending, scored

T0 = datetime(2025, 1, 1, tzinfo=UTC)


CHAT = conversation_rules()  # the profile that reads speaker names


def _m(id_: str, content: str = "x", **kw: Any) -> Memory:
    return Memory(id=id_, tenant="t", content=content, **kw)


# --- decomposition -------------------------------------------------------------------------


def test_coordinated_names_give_one_question_each() -> None:
    assert decompose("Did Jon and Gina both participate in dance competitions?", CHAT) == [
        "Did Jon participate in dance competitions?",
        "Did Gina participate in dance competitions?",
    ]


def test_a_list_of_three_names_and_a_possessive() -> None:
    parts = decompose("What do Anna, Boris and Chiara's gardens grow?", CHAT)
    assert parts == [
        "What do Anna's gardens grow?",
        "What do Boris's gardens grow?",
        "What do Chiara's gardens grow?",
    ]


def test_a_comparison_gives_name_and_topic() -> None:
    assert decompose("Which is faster, Postgres or MySQL?", CHAT) == [
        "Postgres faster",
        "MySQL faster",
    ]
    assert decompose("Redis vs Memcached for caching", CHAT) == [
        "Redis caching",
        "Memcached caching",
    ]


def test_an_exception_splits_and_keeps_the_person() -> None:
    parts = decompose("What worries Andrew besides not being able to hike often?", CHAT)
    assert parts == ["What worries Andrew", "Andrew not being able to hike often"]


def test_separate_questions_and_clauses_split() -> None:
    assert decompose("Where did Sarah go last week? What did Tom buy there?", CHAT) == [
        "Where did Sarah go last week",
        "What did Tom buy there?",
    ]
    assert decompose("When did Melanie paint a sunrise and what did Caroline research?", CHAT) == [
        "When did Melanie paint a sunrise",
        "what did Caroline research?",
    ]


def test_two_people_without_a_coordination_stay_one_question() -> None:
    # The answer is one memory between the two; halves would bring each one's other turns.
    assert decompose("What did Caroline tell Melanie about the adoption agency?", CHAT) == []


@pytest.mark.parametrize(
    "question",
    ["What items does John collect?", "deploy pipeline failures", "Who is Anthony?", ""],
)
def test_a_simple_question_is_not_split(question: str) -> None:
    assert decompose(question, CHAT) == []


async def test_the_decomposer_caps_its_parts() -> None:
    question = "Did Anna, Boris, Chiara, Dmitri and Emil go hiking?"
    assert len(await RuleDecomposer(max_parts=2).decompose(question, CHAT)) == 2
    assert len(await RuleDecomposer().decompose(question, CHAT)) == 4


# --- multi-query ---------------------------------------------------------------------------


def test_queries_and_per_query_limit_are_validated_naming_the_field() -> None:
    limits = v.Limits(max_query_bytes=10)
    assert check_queries(["a", "b"], limits) == ("a", "b")
    with pytest.raises(InvalidArgument) as e:
        check_queries(["a", ""], limits)
    assert e.value.field == "queries[1]"
    with pytest.raises(InvalidArgument) as e:
        check_queries(["a", "x" * 11], limits)
    assert e.value.field == "queries[1]"
    with pytest.raises(InvalidArgument) as e:
        check_queries(["a"] * 3, limits, max_queries=2)
    assert e.value.field == "queries"
    assert check_per_query_limit(0, 200) == 0
    assert check_per_query_limit(200, 200) == 200
    for bad in (-1, 201):
        with pytest.raises(InvalidArgument) as e:
            check_per_query_limit(bad, 200)
        assert e.value.field == "per_query_limit"


def test_sub_queries_are_distinct_capped_and_take_the_limit() -> None:
    subs = sub_queries(["Tea time", "tea  TIME", "coffee", "milk"], 40, 0, 2)
    assert [(s.text, s.pool) for s in subs] == [("Tea time", 40), ("coffee", 40)]
    assert [s.pool for s in sub_queries(["a", "b"], 40, 7, 8)] == [7, 7]


def test_one_query_is_merged_as_is() -> None:
    hits = {"lexical": [Hit("a", 12.0), Hit("b", 3.0)]}
    merged, found = merge_answers([hits])
    assert merged == hits
    assert found == {}


def test_many_queries_merge_by_id_keeping_the_best_scaled_score() -> None:
    ma, mb = _m("a"), _m("b")
    first = {"lexical": [Hit("a", 20.0, ma), Hit("b", 5.0, mb)], "vector": [Hit("a", 0.4)]}
    # The second query is short: its BM25 is lower, but b is its best hit.
    second = {"lexical": [Hit("b", 2.0), Hit("c", 1.0)], "vector": [Hit("b", 0.7)]}
    merged, found = merge_answers([first, second])
    lexical = {h.id: h for h in merged["lexical"]}
    assert [h.id for h in merged["lexical"]] == ["a", "b", "c"]
    assert lexical["a"].score == 1.0
    assert lexical["b"].score == 1.0  # 2/2 in the second beats 5/20 in the first
    assert lexical["b"].memory is mb  # the memory comes along from the first query
    assert lexical["c"].score == 0.5
    # Cosines are comparable across queries: kept as they are.
    assert {h.id: h.score for h in merged["vector"]} == {"a": 0.4, "b": 0.7}
    assert set(found["a"]) == {0}
    assert set(found["b"]) == {0, 1}
    assert set(found["c"]) == {1}
    assert found["b"][1].rank == 1  # b is the second query's best


def test_provenance_is_added_after_ranking() -> None:
    s = ScoredCandidate(_m("b"), 0.5, {}, {"keyword": StreamScore(1.0, 1)})
    out = with_provenance([s], {"b": {0: StreamScore(0.02, 3), 1: StreamScore(0.03, 1)}})
    assert set(out[0].streams) == {"keyword", "query:0", "query:1"}
    assert out[0].streams["query:1"] == StreamScore(0.03, 1)
    assert with_provenance([s], {}) == [s]


# --- trending ------------------------------------------------------------------------------


def test_trending_is_an_empty_or_star_query_without_queries() -> None:
    assert is_trending("", [])
    assert is_trending(" * ", [""])
    assert not is_trending("*", ["tea"])
    assert not is_trending("tea", [])


def test_sort_is_checked_naming_the_field() -> None:
    assert check_sort("", True) is Sort.IMPORTANCE
    assert check_sort("Recency", True) is Sort.RECENCY
    assert check_sort("", False) is None
    for value, trending in (("popular", True), ("recency", False)):
        with pytest.raises(InvalidArgument) as e:
            check_sort(value, trending)
        assert e.value.field == "sort"


def test_a_listing_is_scored_by_its_sort() -> None:
    listed = [
        _m("b", importance=0.5, timestamp=T0 + timedelta(days=2)),
        _m("c", importance=0.7, timestamp=T0 + timedelta(days=1)),
        _m("a", importance=0.9, timestamp=T0),
    ]
    recent = scored(listed, Sort.RECENCY)
    assert [s.memory.id for s in recent] == ["b", "c", "a"]  # the listing's order is kept
    assert [s.score for s in recent] == [1.0, 0.5, 0.0]
    assert [s.components for s in recent] == [{"recency": 1.0}, {"recency": 0.5}, {"recency": 0.0}]
    assert [s.score for s in scored(listed, Sort.IMPORTANCE)] == [0.5, 0.7, 0.9]
    assert [s.score for s in scored(listed[:1], Sort.RECENCY)] == [1.0]
    assert scored([], Sort.ACCESS_COUNT) == []
