"""Pseudo-relevance feedback's pure parts: the RM3 expansion and the two score mixes."""

from __future__ import annotations

from engram_core.model import Hit, Memory
from engram_gateway.service.feedback import (
    added,
    blended,
    expansion_terms,
    feedback_text,
    words_of,
)


def _hit(id_: str, score: float, memory: bool = False) -> Hit:
    return Hit(id_, score, Memory(id=id_, tenant="t", content=id_) if memory else None)


def test_words_drop_stopwords_short_words_and_digits() -> None:
    assert words_of("The 3 cats were at the lake in 2023!") == ["cats", "lake"]


def test_expansion_prefers_words_the_documents_share() -> None:
    docs = ["lake sunsets and watercolours", "sunsets by the lake", "a lake walk"]
    assert expansion_terms("what did she paint", docs, [1.0, 1.0, 1.0], 2) == ["lake", "sunsets"]


def test_expansion_leaves_out_the_query_words_and_their_forms() -> None:
    docs = ["painting paints lake", "painted lake"]
    assert expansion_terms("what did she paint", docs, [1.0, 1.0], 5) == ["lake"]


def test_a_heavier_document_gives_its_words_first() -> None:
    docs = ["guitar", "violin"]
    assert expansion_terms("music", docs, [1.0, 3.0], 1) == ["violin"]
    assert expansion_terms("music", docs, [3.0, 1.0], 1) == ["guitar"]


def test_one_spelling_per_stem() -> None:
    docs = ["sunsets sunsets sunset"]
    assert expansion_terms("paint", docs, [1.0], 3) == ["sunsets"]


def test_no_terms_asked_or_no_documents_no_expansion() -> None:
    assert expansion_terms("paint", ["lake"], [1.0], 0) == []
    assert expansion_terms("paint", [], [], 3) == []


def test_added_scores_sum_and_new_memories_join_at_their_share() -> None:
    first = [_hit("a", 10.0), _hit("b", 8.0)]
    second = [_hit("c", 12.0, memory=True), _hit("b", 6.0)]
    mixed = added(first, second, 0.5, 3)
    assert [(h.id, h.score) for h in mixed] == [("b", 11.0), ("a", 10.0), ("c", 6.0)]
    assert mixed[2].memory is not None
    assert [h.id for h in added(first, second, 0.5, 2)] == ["b", "a"]


def test_blended_similarities_fill_a_missing_one_with_that_lists_lowest() -> None:
    first = [_hit("a", 0.8), _hit("b", 0.6)]
    second = [_hit("c", 0.9), _hit("b", 0.7)]
    mixed = {h.id: round(h.score, 6) for h in blended(first, second, 0.5, 3)}
    assert mixed == {"a": 0.75, "b": 0.65, "c": 0.75}


def test_blended_keeps_the_memory_whichever_list_brought_it() -> None:
    first = [_hit("a", 0.8)]
    second = [_hit("a", 0.9, memory=True)]
    assert blended(first, second, 0.5, 1)[0].memory is not None


def test_feedback_text_puts_the_query_first_and_cuts_each_document() -> None:
    assert feedback_text("paint", ["abcdef", "xyz"], 3) == "paint\nabc\nxyz"
