"""What a text index indexes for a memory: content, tag words, whitelisted metadata values."""

from __future__ import annotations

from datetime import UTC, datetime

from engram_core.model import Memory
from engram_core.search_text import MAX_PHRASES, METADATA_FIELDS, document_text, word_pairs


def test_content_then_tag_words_then_whitelisted_metadata() -> None:
    m = Memory(
        id="a",
        tenant="t",
        content="The launch slipped",
        tags=("project:alpha_one", "x/y"),
        timestamp=datetime(2025, 1, 1, tzinfo=UTC),
        metadata={
            "topic": ["billing", ["q3"], 7, True, {"nested": "skipped"}, "  "],
            "owner": "not whitelisted",
            "source": "slack",
        },
    )
    assert document_text(m, METADATA_FIELDS) == [
        "The launch slipped",
        "project alpha one",
        "x y",
        "billing",
        "q3",
        "7",
        "slack",
    ]
    assert document_text(m, ()) == ["The launch slipped", "project alpha one", "x y"]
    assert document_text(m, ("owner",))[-1] == "not whitelisted"


def test_word_pairs_are_adjacent_words_in_order_without_two_stopwords() -> None:
    assert word_pairs("Which database did the billing ledger move to?") == [
        ("which", "database"),
        ("database", "did"),
        ("the", "billing"),
        ("billing", "ledger"),
        ("ledger", "move"),
        ("move", "to"),
    ]  # "did the" is two function words: no phrase
    assert word_pairs("Red house, red HOUSE") == [("red", "house"), ("house", "red")]
    assert word_pairs("tea") == []
    assert len(word_pairs(" ".join(f"w{i}" for i in range(30)))) == MAX_PHRASES
