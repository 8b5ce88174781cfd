"""What a text index indexes for a memory: content, tag words, whitelisted metadata values."""

from __future__ import annotations

from datetime import UTC, datetime

from engram_core.model import Memory
from engram_core.search_text import METADATA_FIELDS, document_text


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
