"""The shared request-field checks: what passes, and which field a failure names."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from google.protobuf import timestamp_pb2

from engram.common.v1 import common_pb2
from engram_core.errors import InvalidArgument
from engram_core.limits import MAX_TAGS
from engram_core.model import AccessUpdate, Filter, Memory, TagMatch, TagMode
from engram_platform import request_checks as checks
from engram_platform.convert import access_update_to_proto, filter_to_proto, memory_to_proto

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def good_memory() -> common_pb2.Memory:
    return memory_to_proto(
        Memory(id="m1", tenant="t", content="hello", tags=("a:b",), timestamp=T0, updated_at=T0)
    )


def good_filter() -> common_pb2.Filter:
    flt = Filter(
        tags=("a",),
        tag_mode=TagMode.ALL,
        tag_match=TagMatch.PREFIX,
        types=("Decision",),
        start=T0,
        end=T0,
    )
    return filter_to_proto(flt)


def test_good_input_passes() -> None:
    checks.check_tenant("tenant-a")
    checks.check_ids("ids", ["a", "b"], most=2)
    checks.check_memory("memories[0]", good_memory(), "t")
    checks.check_filter(good_filter())
    checks.check_access_updates(
        [access_update_to_proto(AccessUpdate(id="m1", last_accessed=T0, access_count=0))]
    )


def with_memory(change: Callable[[common_pb2.Memory], object]) -> Callable[[], None]:
    m = good_memory()
    change(m)
    return lambda: checks.check_memory("memories[2]", m, "t")


def with_filter(change: Callable[[common_pb2.Filter], object]) -> Callable[[], None]:
    f = good_filter()
    change(f)
    return lambda: checks.check_filter(f)


def clear(name: str) -> Callable[[common_pb2.Memory], object]:
    return lambda m: m.ClearField(name)  # type: ignore[arg-type]


def bad_update(**fields: object) -> Callable[[], None]:
    u = common_pb2.AccessUpdate(id="m1", last_accessed=timestamp_pb2.Timestamp(seconds=1))
    for name, value in fields.items():
        if name == "last_accessed" and value is None:
            u.ClearField("last_accessed")
        else:
            setattr(u, name, value)
    return lambda: checks.check_access_updates([u, u])


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: checks.check_tenant(""), "tenant"),
        (lambda: checks.check_tenant("x" * 129), "tenant"),
        (lambda: checks.check_tenant("a b"), "tenant"),
        (lambda: checks.check_tenant("a\x00"), "tenant"),
        (lambda: checks.check_ids("ids", ["a", "", "c"]), "ids[1]"),
        (lambda: checks.check_ids("ids", ["a", "b", "c"], most=2), "ids"),
        (lambda: checks.check_id("id", "i" * 129), "id"),
        (lambda: checks.check_count("updates", 4, 3), "updates"),
        (lambda: checks.check_tags("tags", ["t"] * (MAX_TAGS + 1)), "tags"),
        (lambda: checks.check_tags("tags", ["ok", ""]), "tags[1]"),
        (with_memory(lambda m: setattr(m, "id", "")), "memories[2].id"),
        (
            with_memory(lambda m: m.metadata.update({"a": [1, {"b": math.nan}]})),
            "memories[2].metadata.a[1].b",
        ),
        (
            with_memory(lambda m: setattr(m.metadata.fields["x"], "number_value", -math.inf)),
            "memories[2].metadata.x",
        ),
        (with_memory(lambda m: setattr(m, "tenant", "other")), "memories[2].tenant"),
        (with_memory(lambda m: setattr(m, "content", "  ")), "memories[2].content"),
        (with_memory(lambda m: setattr(m, "type", "")), "memories[2].type"),
        (with_memory(lambda m: m.tags.append("")), "memories[2].tags[1]"),
        (with_memory(lambda m: setattr(m, "importance", 1.5)), "memories[2].importance"),
        (with_memory(lambda m: setattr(m, "confidence", float("nan"))), "memories[2].confidence"),
        (
            with_memory(lambda m: setattr(m, "relevance_score", float("inf"))),
            "memories[2].relevance_score",
        ),
        (with_memory(clear("timestamp")), "memories[2].timestamp"),
        (
            with_memory(lambda m: m.t_invalid.CopyFrom(timestamp_pb2.Timestamp(nanos=-1))),
            "memories[2].t_invalid",
        ),
        (
            with_memory(lambda m: m.updated_at.CopyFrom(timestamp_pb2.Timestamp(seconds=2**40))),
            "memories[2].updated_at",
        ),
        (with_memory(lambda m: setattr(m, "access_count", -1)), "memories[2].access_count"),
        (with_memory(lambda m: setattr(m, "version", -1)), "memories[2].version"),
        (with_filter(lambda f: setattr(f, "tag_mode", 99)), "filter.tag_mode"),
        (with_filter(lambda f: setattr(f, "tag_match", 99)), "filter.tag_match"),
        (with_filter(lambda f: f.exclude_tags.append("")), "filter.exclude_tags[0]"),
        (with_filter(lambda f: f.exclude_types.append(" ")), "filter.exclude_types[0]"),
        (
            with_filter(lambda f: f.start.CopyFrom(timestamp_pb2.Timestamp(seconds=-(2**40)))),
            "filter.start",
        ),
        (with_filter(lambda f: setattr(f.end, "seconds", f.end.seconds - 1)), "filter.end"),
        (bad_update(id=""), "updates[0].id"),
        (bad_update(last_accessed=None), "updates[0].last_accessed"),
        (bad_update(access_count=-1), "updates[0].access_count"),
    ],
)
def test_a_failure_names_the_field(call: Callable[[], None], field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        call()
    assert err.value.field == field
