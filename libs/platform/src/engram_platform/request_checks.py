"""Request-field checks shared by the store services' gRPC handlers, run before mapping.

They catch what the proto lets through (empty or oversized ids and tenants, out-of-range
numbers and timestamps, unset messages); each service's own rules stay in its handler and
service. Each raises `InvalidArgument` naming the field by its proto path
(``memories[3].importance``); the platform interceptor turns it into INVALID_ARGUMENT with the
field in the trailing metadata.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from google.protobuf import struct_pb2, timestamp_pb2

from engram.common.v1 import common_pb2
from engram_core.errors import InvalidArgument
from engram_core.limits import MAX_TAGS
from engram_core.tags import tag_problem
from engram_core.validation import MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS, check_finite
from engram_platform.convert import struct_to_dict

MAX_TENANT_CHARS = 128
MAX_ID_CHARS = 128
MAX_CURSOR_CHARS = 256  # every store's scan cursor is shorter


def check_tenant(value: str) -> None:
    if not value:
        raise InvalidArgument("tenant", "must not be empty")
    if len(value) > MAX_TENANT_CHARS:
        raise InvalidArgument("tenant", f"longer than {MAX_TENANT_CHARS} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise InvalidArgument("tenant", "must not contain whitespace or control characters")


def check_count(field: str, count: int, most: int) -> None:
    if count > most:
        raise InvalidArgument(field, f"at most {most} per request, got {count}")


def check_id(field: str, value: str) -> None:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgument(field, f"longer than {MAX_ID_CHARS} characters")


def check_ids(field: str, ids: Sequence[str], most: int | None = None) -> None:
    """Each id, and at most ``most`` of them when given."""
    if most is not None:
        check_count(field, len(ids), most)
    for i, id_ in enumerate(ids):
        check_id(f"{field}[{i}]", id_)


def check_cursor(value: str) -> str | None:
    """A scan cursor as the store takes it: None for the start (an empty string)."""
    if len(value) > MAX_CURSOR_CHARS:
        raise InvalidArgument("cursor", "not a cursor this service returned")
    return value or None


def check_timestamp(field: str, ts: timestamp_pb2.Timestamp) -> None:
    seconds_ok = MIN_TIMESTAMP_SECONDS <= ts.seconds <= MAX_TIMESTAMP_SECONDS
    if not (seconds_ok and 0 <= ts.nanos < 1_000_000_000):
        raise InvalidArgument(field, "not a valid timestamp")


def check_unit(field: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidArgument(field, "must be in [0, 1]")


def check_tags(field: str, tags: Sequence[str]) -> None:
    if len(tags) > MAX_TAGS:
        raise InvalidArgument(field, f"at most {MAX_TAGS} tags, got {len(tags)}")
    for i, tag in enumerate(tags):
        problem = tag_problem(tag)
        if problem is not None:
            raise InvalidArgument(f"{field}[{i}]", problem)


def check_names(field: str, names: Sequence[str]) -> None:
    for i, name in enumerate(names):
        if not name.strip():
            raise InvalidArgument(f"{field}[{i}]", "must not be empty")


def check_struct(field: str, value: struct_pb2.Struct) -> None:
    """No NaN or ±Infinity (JSON has none; converting one would fail), named by its path."""
    check_finite(struct_to_dict(value, finite=False), field)


def check_memory(field: str, m: common_pb2.Memory, tenant: str) -> None:
    check_id(f"{field}.id", m.id)
    if m.tenant and m.tenant != tenant:
        raise InvalidArgument(f"{field}.tenant", "differs from the request's tenant")
    if not m.content.strip():
        raise InvalidArgument(f"{field}.content", "must not be empty")
    if not m.type.strip():
        raise InvalidArgument(f"{field}.type", "must not be empty")
    check_tags(f"{field}.tags", m.tags)
    check_unit(f"{field}.importance", m.importance)
    check_unit(f"{field}.confidence", m.confidence)
    if not math.isfinite(m.relevance_score):
        raise InvalidArgument(f"{field}.relevance_score", "must be finite")
    check_struct(f"{field}.metadata", m.metadata)
    if not m.HasField("timestamp"):
        raise InvalidArgument(f"{field}.timestamp", "must be set")
    for name in ("timestamp", "updated_at", "last_accessed", "t_valid", "t_invalid"):
        if m.HasField(name):
            check_timestamp(f"{field}.{name}", getattr(m, name))
    if m.access_count < 0:
        raise InvalidArgument(f"{field}.access_count", "must be >= 0")
    if m.version < 0:
        raise InvalidArgument(f"{field}.version", "must be >= 0")


def check_filter(f: common_pb2.Filter) -> None:
    if f.tag_mode not in common_pb2.TagMode.values():
        raise InvalidArgument("filter.tag_mode", f"unknown tag mode {f.tag_mode}")
    if f.tag_match not in common_pb2.TagMatch.values():
        raise InvalidArgument("filter.tag_match", f"unknown tag match {f.tag_match}")
    check_tags("filter.tags", f.tags)
    check_tags("filter.exclude_tags", f.exclude_tags)
    check_names("filter.types", f.types)
    check_names("filter.exclude_types", f.exclude_types)
    for name in ("start", "end"):
        if f.HasField(name):
            check_timestamp(f"filter.{name}", getattr(f, name))
    both = f.HasField("start") and f.HasField("end")
    if both and f.end.ToNanoseconds() < f.start.ToNanoseconds():
        raise InvalidArgument("filter.end", "must not be before filter.start")


def check_access_updates(updates: Sequence[common_pb2.AccessUpdate]) -> None:
    for i, u in enumerate(updates):
        check_id(f"updates[{i}].id", u.id)
        if not u.HasField("last_accessed"):
            raise InvalidArgument(f"updates[{i}].last_accessed", "must be set")
        check_timestamp(f"updates[{i}].last_accessed", u.last_accessed)
        if u.access_count < 0:
            raise InvalidArgument(f"updates[{i}].access_count", "must be >= 0")
