from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

from engram_core.codec import memory_from_json, memory_to_json
from engram_core.model import Memory

SEEN = datetime(2024, 5, 3, 9, 0, 1, 250_001, tzinfo=UTC)
# Every field away from its default, so a field the codec drops or swaps shows.
FULL = Memory(
    id="0190f3a4-7b1c-7d2e-8f00-123456789abc",
    tenant="acme",
    content="Prefers tabs — «always»",
    type="Preference",
    tags=("style:indent", "lang:py"),
    tag_prefixes=("style", "style:indent", "lang", "lang:py"),
    importance=0.75,
    confidence=0.25,
    metadata={"source": "chat", "nested": {"n": [1, 2.5, None, True]}},
    timestamp=datetime(2024, 5, 1, 8, 30, tzinfo=UTC),
    updated_at=datetime(2024, 5, 2, 8, 30, 0, 1, tzinfo=UTC),
    last_accessed=SEEN,
    access_count=7,
    t_valid=datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=2))),
    t_invalid=datetime(2025, 1, 1, tzinfo=UTC),
    relevance_score=0.125,
    archived=True,
    embedding_model="bge-small",
    version=42,
    entities=("people:ada", "tools:vim"),
)


def test_every_field_round_trips() -> None:
    assert memory_from_json(memory_to_json(FULL)) == FULL


def test_bytes_decode_like_text() -> None:
    assert memory_from_json(memory_to_json(FULL).encode()) == FULL


def test_unset_optional_times_round_trip_as_none() -> None:
    bare = Memory(id="a", tenant="t", content="c", timestamp=SEEN, updated_at=SEEN)
    assert memory_from_json(memory_to_json(bare)) == bare


def test_the_document_is_compact_and_keeps_non_ascii() -> None:
    doc = memory_to_json(FULL)
    assert " " not in doc.replace(FULL.content, "")
    assert "«always»" in doc


def test_without_access_the_document_leaves_the_statistics_out() -> None:
    doc = json.loads(memory_to_json(FULL, access=False))
    assert "last_accessed" not in doc
    assert "access_count" not in doc
    assert doc["version"] == 42


def test_statistics_kept_elsewhere_are_handed_back_on_decode() -> None:
    doc = memory_to_json(FULL, access=False)
    assert memory_from_json(doc) == replace(FULL, last_accessed=None, access_count=0)
    assert memory_from_json(doc, last_accessed=SEEN, access_count=7) == FULL


def test_statistics_in_the_document_win_over_the_arguments() -> None:
    later = SEEN + timedelta(days=1)
    got = memory_from_json(memory_to_json(FULL), last_accessed=later, access_count=99)
    assert (got.last_accessed, got.access_count) == (SEEN, 7)
