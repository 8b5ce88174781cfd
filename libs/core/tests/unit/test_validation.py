from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from engram_core.errors import InvalidArgument
from engram_core.model import Memory
from engram_core.relations import RelationType
from engram_core.validation import (
    MAX_TIMESTAMP_SECONDS,
    MIN_TIMESTAMP_SECONDS,
    Limits,
    MemoryInput,
    RawTimestamp,
    check_batch_size,
    check_depth,
    check_id,
    check_idempotency_key,
    check_limit,
    check_query,
    check_relation_types,
    check_strength,
    check_tags,
    check_time_range,
    check_types,
    check_update_mask,
    check_user_relation_type,
    merge_update,
    new_memory,
    present_fields,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
LIMITS = Limits()
UUID = "0190f3a4-7b1c-7d2e-8f00-123456789abc"


def build(inp: MemoryInput, prefix: str = "memory", limits: Limits = LIMITS) -> Memory:
    return new_memory(inp, tenant="t1", prefix=prefix, now=NOW, limits=limits)


def field_of(exc: pytest.ExceptionInfo[InvalidArgument]) -> str:
    return exc.value.field


def test_defaults_are_filled() -> None:
    m = build(MemoryInput(content="use uv for python"))
    assert (m.id, m.tenant, m.type) == ("", "t1", "Memory")
    assert (m.importance, m.confidence) == (0.5, 0.9)
    assert m.timestamp == NOW
    assert m.updated_at == NOW
    assert m.metadata == {}
    assert m.tags == ()
    assert m.t_valid is None


def test_given_values_are_kept_and_tags_normalised() -> None:
    m = build(
        MemoryInput(
            id=UUID.upper(),
            content="x",
            type="Decision",
            tags=("Entity/People:Sarah", "lang:py", "LANG:PY"),
            importance=0.0,
            confidence=1.0,
            metadata={"source": "chat", "n": 3},
            timestamp=RawTimestamp(1_700_000_000, 5_000),
            t_valid=RawTimestamp(0),
            t_invalid=RawTimestamp(10),
        )
    )
    assert m.id == UUID
    assert m.type == "Decision"
    assert m.tags == ("entity:people:sarah", "lang:py")
    assert m.tag_prefixes == (
        "entity",
        "entity:people",
        "entity:people:sarah",
        "lang",
        "lang:py",
    )
    assert (m.importance, m.confidence) == (0.0, 1.0)
    assert m.metadata == {"source": "chat", "n": 3}
    assert m.timestamp == datetime(2023, 11, 14, 22, 13, 20, 5, tzinfo=UTC)
    assert m.t_valid == datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("inp", "field"),
    [
        (MemoryInput(content=""), "memory.content"),
        (MemoryInput(content="  \n"), "memory.content"),
        (MemoryInput(content="é" * 8193), "memory.content"),
        (MemoryInput(content="x", importance=1.5), "memory.importance"),
        (MemoryInput(content="x", importance=-0.01), "memory.importance"),
        (MemoryInput(content="x", importance=math.nan), "memory.importance"),
        (MemoryInput(content="x", confidence=math.inf), "memory.confidence"),
        (MemoryInput(content="x", confidence=-1.0), "memory.confidence"),
        (MemoryInput(content="x", id="not-a-uuid"), "memory.id"),
        (MemoryInput(content="x", type="9lives"), "memory.type"),
        (MemoryInput(content="x", type="has space"), "memory.type"),
        (MemoryInput(content="x", type="T" * 65), "memory.type"),
        (MemoryInput(content="x", tags=("a",) * 65), "memory.tags"),
        (MemoryInput(content="x", tags=("ok", "ok2", "has space")), "memory.tags[2]"),
        (MemoryInput(content="x", tags=("t" * 129,)), "memory.tags[0]"),
        (MemoryInput(content="x", tags=("",)), "memory.tags[0]"),
        (MemoryInput(content="x", tags=("a::b",)), "memory.tags[0]"),
        (MemoryInput(content="x", metadata={"k": "v" * 16_400}), "memory.metadata"),
        (MemoryInput(content="x", metadata={"k": math.nan}), "memory.metadata.k"),
        (MemoryInput(content="x", metadata={"a": [1, {"b": -math.inf}]}), "memory.metadata.a[1].b"),
        (
            MemoryInput(content="x", timestamp=RawTimestamp(MAX_TIMESTAMP_SECONDS + 1)),
            "memory.timestamp",
        ),
        (
            MemoryInput(content="x", t_valid=RawTimestamp(MIN_TIMESTAMP_SECONDS - 1)),
            "memory.t_valid",
        ),
        (MemoryInput(content="x", t_invalid=RawTimestamp(0, -1)), "memory.t_invalid"),
        (
            MemoryInput(content="x", t_valid=RawTimestamp(100), t_invalid=RawTimestamp(99)),
            "memory.t_valid",
        ),
    ],
)
def test_bad_memory_names_the_field(inp: MemoryInput, field: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        build(inp)
    assert field_of(exc) == field


def test_prefix_names_batch_items() -> None:
    with pytest.raises(InvalidArgument) as exc:
        build(MemoryInput(content="x", tags=("a", "b", "c d")), prefix="memories[3]")
    assert field_of(exc) == "memories[3].tags[2]"


def test_content_limit_counts_utf8_bytes_and_is_configurable() -> None:
    small = Limits(max_content_bytes=4)
    assert build(MemoryInput(content="abcd"), limits=small).content == "abcd"
    assert build(MemoryInput(content="abé"), limits=small).content == "abé"  # 4 bytes
    with pytest.raises(InvalidArgument):
        build(MemoryInput(content="abcé"), limits=small)  # 4 characters, 5 bytes


def test_content_limit_edge() -> None:
    assert build(MemoryInput(content="x" * 16 * 1024)).content
    with pytest.raises(InvalidArgument):
        build(MemoryInput(content="x" * (16 * 1024 + 1)))


def test_boundaries_are_accepted() -> None:
    m = build(
        MemoryInput(
            content="x",
            tags=tuple(f"t{i}" for i in range(64)),
            timestamp=RawTimestamp(MAX_TIMESTAMP_SECONDS, 999_999_999),
            t_valid=RawTimestamp(5),
            t_invalid=RawTimestamp(5),
            type="Custom_Type2",
        )
    )
    assert len(m.tags) == 64
    assert m.timestamp.year == 9999
    assert m.type == "Custom_Type2"


def test_present_fields() -> None:
    assert present_fields(MemoryInput()) == ()
    assert present_fields(MemoryInput(content="x", importance=0.0, metadata={})) == (
        "content",
        "importance",
        "metadata",
    )


def test_update_mask_defaults_to_present_fields() -> None:
    assert check_update_mask([], MemoryInput(id=UUID, tags=("a",), confidence=0.2)) == (
        "tags",
        "confidence",
    )
    with pytest.raises(InvalidArgument) as exc:
        check_update_mask([], MemoryInput())
    assert field_of(exc) == "update_mask"


@pytest.mark.parametrize("path", ["id", "tenant", "version", "Content"])
def test_update_mask_refuses_unknown_or_fixed_paths(path: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        check_update_mask(["content", path], MemoryInput(content="x"))
    assert field_of(exc) == "update_mask.paths[1]"


def test_merge_update_takes_only_masked_fields() -> None:
    current = replace(build(MemoryInput(content="old", tags=("a",), importance=0.2)), id=UUID)
    later = datetime(2025, 7, 1, tzinfo=UTC)
    inp = MemoryInput(content="new", tags=("B/c",), importance=0.9)
    merged = merge_update(current, inp, ["tags"], prefix="memory", now=later, limits=LIMITS)
    assert merged.content == "old"
    assert merged.importance == 0.2
    assert merged.tags == ("b:c",)
    assert merged.tag_prefixes == ("b", "b:c")
    assert merged.updated_at == later
    assert merged.timestamp == NOW


def test_merge_update_masked_but_unset_takes_the_default() -> None:
    current = Memory(id=UUID, tenant="t1", content="c", importance=0.1, tags=("x",))
    merged = merge_update(
        current, MemoryInput(), ["importance", "tags"], prefix="memory", now=NOW, limits=LIMITS
    )
    assert merged.importance == 0.5
    assert merged.tags == ()
    assert merged.tag_prefixes == ()
    with pytest.raises(InvalidArgument) as exc:
        merge_update(current, MemoryInput(), ["content"], prefix="memory", now=NOW, limits=LIMITS)
    assert field_of(exc) == "memory.content"


def test_merge_update_checks_validity_against_the_stored_bound() -> None:
    current = Memory(id=UUID, tenant="t1", content="c", t_invalid=datetime(2000, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidArgument) as exc:
        merge_update(
            current,
            MemoryInput(t_valid=RawTimestamp(2_000_000_000)),
            ["t_valid"],
            prefix="memory",
            now=NOW,
            limits=LIMITS,
        )
    assert field_of(exc) == "memory.t_valid"


def test_merge_update_refuses_another_id() -> None:
    current = Memory(id=UUID, tenant="t1", content="c")
    other = "0190f3a4-7b1c-7d2e-8f00-000000000000"
    with pytest.raises(InvalidArgument) as exc:
        merge_update(
            current, MemoryInput(id=other), ["content"], prefix="memory", now=NOW, limits=LIMITS
        )
    assert field_of(exc) == "memory.id"


def test_ids() -> None:
    assert check_id(f" {UUID.upper()} ", "id") == UUID
    for bad in ("", "123", "zzzzzzzz-7b1c-7d2e-8f00-123456789abc"):
        with pytest.raises(InvalidArgument) as exc:
            check_id(bad, "source_id")
        assert field_of(exc) == "source_id"


def test_batch_size() -> None:
    check_batch_size(1000, "memories", LIMITS)
    for n in (0, 1001):
        with pytest.raises(InvalidArgument) as exc:
            check_batch_size(n, "memories", LIMITS)
        assert field_of(exc) == "memories"


@pytest.mark.parametrize(("value", "expected"), [(0, 10), (1, 1), (100, 100)])
def test_limit_ok(value: int, expected: int) -> None:
    assert check_limit(value, "limit", 10, 100) == expected


@pytest.mark.parametrize("value", [-1, 101, 10_000])
def test_limit_out_of_range(value: int) -> None:
    with pytest.raises(InvalidArgument) as exc:
        check_limit(value, "limit", 10, 100)
    assert field_of(exc) == "limit"


def test_query() -> None:
    assert check_query("who is sarah", "query", LIMITS) == "who is sarah"
    for bad in ("", "   ", "q" * (16 * 1024 + 1)):
        with pytest.raises(InvalidArgument) as exc:
            check_query(bad, "query", LIMITS)
        assert field_of(exc) == "query"


def test_filter_tags_and_types() -> None:
    assert check_tags(["A/B", "a:b"], "tags", LIMITS) == ("a:b",)
    with pytest.raises(InvalidArgument) as exc:
        check_tags(["ok", "not ok"], "exclude_tags", LIMITS)
    assert field_of(exc) == "exclude_tags[1]"
    assert check_types(["Decision", "Decision"], "types", LIMITS) == ("Decision",)
    with pytest.raises(InvalidArgument) as exc:
        check_types(["Decision", ""], "types", LIMITS)
    assert field_of(exc) == "types[1]"


def test_time_range() -> None:
    assert check_time_range("", "") == (None, None)
    lo, hi = check_time_range("2025-01-01T10:00:00Z", "2025-01-31")
    assert lo == datetime(2025, 1, 1, 10, tzinfo=UTC)
    assert hi == datetime(2025, 1, 31, 23, 59, 59, 999999, tzinfo=UTC)
    lo, _ = check_time_range("2025-01-01T12:00:00+02:00", "")
    assert lo == datetime(2025, 1, 1, 10, tzinfo=UTC)
    for start, end, field in [
        ("yesterday", "", "start"),
        ("", "2025-13-01", "end"),
        ("2025-02-01", "2025-01-01", "start"),
        # Valid as written, outside 1..9999 once in UTC.
        ("0001-01-01T00:00:00+05:00", "", "start"),
        ("", "9999-12-31T23:59:59-05:00", "end"),
    ]:
        with pytest.raises(InvalidArgument) as exc:
            check_time_range(start, end)
        assert field_of(exc) == field


def test_relation_types() -> None:
    assert check_user_relation_type("relates_to", "type") is RelationType.RELATES_TO
    for bad in ("FRIENDS_WITH", "MENTIONS", "SIMILAR_TO", ""):
        with pytest.raises(InvalidArgument) as exc:
            check_user_relation_type(bad, "type")
        assert field_of(exc) == "type"
    assert check_relation_types(["similar_to", "LEADS_TO"], "types") == ("SIMILAR_TO", "LEADS_TO")
    with pytest.raises(InvalidArgument) as exc:
        check_relation_types(["LEADS_TO", "NOPE"], "types")
    assert field_of(exc) == "types[1]"


def test_strength() -> None:
    assert check_strength(0.0, "strength") == 0.5
    assert check_strength(1.0, "strength") == 1.0
    for bad in (-0.1, 1.01, math.nan, math.inf):
        with pytest.raises(InvalidArgument) as exc:
            check_strength(bad, "strength")
        assert field_of(exc) == "strength"


def test_depth() -> None:
    assert check_depth(0, "depth", LIMITS) == 1
    assert check_depth(3, "depth", LIMITS) == 3
    for bad in (-1, 4):
        with pytest.raises(InvalidArgument) as exc:
            check_depth(bad, "depth", LIMITS)
        assert field_of(exc) == "depth"


def test_idempotency_key_length() -> None:
    assert check_idempotency_key("k" * 256, "idempotency_key", LIMITS)
    with pytest.raises(InvalidArgument) as exc:
        check_idempotency_key("k" * 257, "idempotency_key", LIMITS)
    assert field_of(exc) == "idempotency_key"
