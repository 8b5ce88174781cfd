"""One set of limits: what the gateway accepts, enrichment keeps inside the stores' limits."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from engram_core.enrich import enrich
from engram_core.errors import InvalidArgument
from engram_core.limits import (
    MAX_ENTITY_TAGS,
    MAX_METADATA_DEPTH,
    MAX_TAG_LENGTH,
    MAX_TAGS,
    entity_tag_room,
    nesting_depth,
)
from engram_core.model import Memory
from engram_core.validation import Limits, MemoryInput, new_memory

NOW = datetime(2025, 6, 1, tzinfo=UTC)
FIRST = ("Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas")
LAST = ("Smith", "Jones", "Brown", "Okafor", "Khan", "Novak", "Rossi", "Tanaka")
MANY_NAMES = "We met " + ", ".join(f"{a} {b}" for a in FIRST for b in LAST) + "."
LONG_TOKEN = "Q" + "x" * 125  # a pasted base64 header, a long class name


def accepted(inp: MemoryInput) -> Memory:
    """The memory as the gateway accepts it."""
    return new_memory(inp, tenant="t1", prefix="memory", now=NOW, limits=Limits())


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` objects deep (the outermost counted)."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def test_a_full_set_of_client_tags_leaves_no_room_for_entity_tags() -> None:
    tags = tuple(f"topic:{i}" for i in range(MAX_TAGS))
    memory = accepted(MemoryInput(content="Lunch with Sarah.", tags=tags))
    enriched, entities = enrich(memory, 7, "m")
    assert enriched.tags == tags
    assert (entities, enriched.entities) == ([], ())


def test_entity_tags_fill_only_the_room_the_client_tags_leave() -> None:
    tags = tuple(f"topic:{i}" for i in range(MAX_TAGS - 3))
    enriched, entities = enrich(accepted(MemoryInput(content=MANY_NAMES, tags=tags)), 7, "m")
    assert len(enriched.tags) == MAX_TAGS
    assert enriched.tags[: len(tags)] == tags
    assert len(entities) == 3
    assert enriched.entities == tuple(e.key for e in entities)


def test_a_memory_naming_many_people_gets_at_most_the_entity_cap() -> None:
    enriched, entities = enrich(accepted(MemoryInput(content=MANY_NAMES)), 7, "m")
    assert len(entities) == MAX_ENTITY_TAGS
    assert len(enriched.tags) == MAX_ENTITY_TAGS
    assert all(t.startswith("entity:people:") for t in enriched.tags)


def test_an_entity_tag_the_client_gave_takes_no_room() -> None:
    tags = (*(f"topic:{i}" for i in range(MAX_TAGS - 1)), "entity:people:sarah")
    enriched, entities = enrich(
        accepted(MemoryInput(content="Lunch with Sarah.", tags=tags)), 7, ""
    )
    assert [e.key for e in entities] == ["people:sarah"]
    assert enriched.tags == tags


def test_previous_entity_tags_of_an_update_free_their_room() -> None:
    old = tuple(f"entity:people:p{i}" for i in range(MAX_TAGS - 4))
    memory = accepted(MemoryInput(content="Lunch with Sarah.", tags=(*old, "work")))
    memory = replace(memory, entities=tuple(t[len("entity:") :] for t in old))
    enriched, _ = enrich(memory, 8, "m")
    assert enriched.tags == ("work", "entity:people:sarah")


def test_a_token_too_long_for_a_tag_never_becomes_an_entity() -> None:
    content = f"Lunch with Sarah, who pasted {LONG_TOKEN} into the config."
    enriched, entities = enrich(accepted(MemoryInput(content=content)), 7, "m")
    assert [e.key for e in entities] == ["people:sarah"]
    assert all(len(t) <= MAX_TAG_LENGTH for t in enriched.tags)


def test_entity_room_never_goes_below_zero_or_above_the_cap() -> None:
    assert entity_tag_room(0) == MAX_ENTITY_TAGS
    assert entity_tag_room(MAX_TAGS - 1) == 1
    assert entity_tag_room(MAX_TAGS + 5) == 0


@pytest.mark.parametrize(
    ("value", "depth"),
    [(1, 0), ("x", 0), ({}, 1), ([], 1), ({"a": [1, {"b": 2}]}, 3), ([[[[]]]], 4)],
)
def test_nesting_depth_counts_objects_and_lists(value: object, depth: int) -> None:
    assert nesting_depth(value) == depth


def test_nesting_depth_stops_at_its_cap() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    assert nesting_depth(cyclic, cap=5) == 5
    assert nesting_depth(nested(10_000)) == MAX_METADATA_DEPTH + 1


def test_metadata_at_the_depth_limit_is_accepted() -> None:
    memory = accepted(MemoryInput(content="x", metadata=nested(MAX_METADATA_DEPTH)))
    assert nesting_depth(memory.metadata) == MAX_METADATA_DEPTH


@pytest.mark.parametrize("depth", [MAX_METADATA_DEPTH + 1, 32, 10_000])
def test_metadata_deeper_than_the_limit_is_refused_naming_the_field(depth: int) -> None:
    with pytest.raises(InvalidArgument) as info:
        accepted(MemoryInput(content="x", metadata=nested(depth)))
    assert info.value.field == "memory.metadata"
    assert "nested deeper" in info.value.reason


def test_a_deep_list_counts_like_a_deep_object() -> None:
    deep: Any = 1
    for _ in range(MAX_METADATA_DEPTH):
        deep = [deep]
    with pytest.raises(InvalidArgument, match="nested deeper"):
        accepted(MemoryInput(content="x", metadata={"k": deep}))


def test_a_tag_that_lower_casing_makes_too_long_is_refused() -> None:
    with pytest.raises(InvalidArgument) as info:
        accepted(MemoryInput(content="x", tags=("ok", "İ" * 100)))
    assert info.value.field == "memory.tags[1]"
