"""Validation of what clients send. Pure: no I/O, no clock, no randomness.

Every check raises ``InvalidArgument(field, reason)`` naming the offending field by its
proto path, e.g. ``memory.importance`` or ``memories[3].tags[2]``; callers pass the path
prefix. Inputs are plain values (the gateway maps protos into them), so the rules live in
one place whatever the transport.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, time, timedelta
from typing import Any

from engram_core.errors import InvalidArgument
from engram_core.ids import normalise_id
from engram_core.limits import MAX_METADATA_DEPTH, MAX_TAG_LENGTH, MAX_TAGS, nesting_depth
from engram_core.model import DEFAULT_CONFIDENCE, DEFAULT_IMPORTANCE, DEFAULT_TYPE, Memory
from engram_core.relations import DEFAULT_STRENGTH, USER_TYPES, RelationType, parse_relation_type
from engram_core.scoring import Focus
from engram_core.tags import normalise_tag, tag_prefixes, tag_problem

TYPE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z.
MIN_TIMESTAMP_SECONDS = -62_135_596_800
MAX_TIMESTAMP_SECONDS = 253_402_300_799
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Limits:
    """Sizes and ranges a request must respect; the gateway fills them from settings.

    Tag and nesting limits are not settings: they are ``engram_core.limits``, shared with
    every store."""

    max_content_bytes: int = 16 * 1024
    max_metadata_bytes: int = 16 * 1024
    max_type_length: int = 64
    max_batch: int = 1000
    max_query_bytes: int = 16 * 1024
    max_idempotency_key_length: int = 256
    default_limit: int = 10
    max_limit: int = 100
    default_related_limit: int = 20
    max_depth: int = 3


@dataclass(frozen=True, slots=True)
class RawTimestamp:
    """A timestamp as sent (seconds, nanos since the epoch), checked before conversion."""

    seconds: int
    nanos: int = 0


@dataclass(frozen=True, slots=True)
class MemoryInput:
    """What a client sends to create or change a memory. None / empty means "not given"."""

    id: str = ""
    content: str = ""
    type: str = ""
    tags: tuple[str, ...] = ()
    importance: float | None = None
    confidence: float | None = None
    metadata: Mapping[str, Any] | None = None
    timestamp: RawTimestamp | None = None
    t_valid: RawTimestamp | None = None
    t_invalid: RawTimestamp | None = None
    embedding: tuple[float, ...] = ()  # the client's own vector of the content


INPUT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MemoryInput))
# Fields an update may set; the id names the memory and cannot change.
UPDATABLE_FIELDS: tuple[str, ...] = tuple(f for f in INPUT_FIELDS if f != "id")


def _at(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def present_fields(inp: MemoryInput) -> tuple[str, ...]:
    """The fields the client set: non-empty strings and lists, non-None values."""
    out = []
    for name in INPUT_FIELDS:
        value = getattr(inp, name)
        if value is not None and value != "" and value != ():
            out.append(name)
    return tuple(out)


# --- single fields -------------------------------------------------------------------


def check_id(value: str, field_path: str) -> str:
    """A required UUID, returned in canonical form."""
    if not value.strip():
        raise InvalidArgument(field_path, "must not be empty")
    canonical = normalise_id(value.strip())
    if canonical is None:
        raise InvalidArgument(field_path, f"not a UUID: {value[:64]!r}")
    return canonical


def check_optional_id(value: str, field_path: str) -> str:
    """A UUID or "" (meaning: the server assigns one)."""
    return check_id(value, field_path) if value else ""


def check_content(value: str, field_path: str, limits: Limits) -> str:
    if not value.strip():
        raise InvalidArgument(field_path, "must not be empty")
    size = len(value.encode("utf-8"))
    if size > limits.max_content_bytes:
        raise InvalidArgument(
            field_path, f"{size} bytes (UTF-8) exceeds the limit of {limits.max_content_bytes}"
        )
    return value


def check_type(value: str, field_path: str, limits: Limits) -> str:
    """Types are open-ended (DESIGN §2 "…"): any identifier; "" takes the default."""
    if not value:
        return DEFAULT_TYPE
    if len(value) > limits.max_type_length:
        raise InvalidArgument(field_path, f"longer than {limits.max_type_length} characters")
    if not TYPE_RE.match(value):
        raise InvalidArgument(
            field_path, "must start with a letter and hold only letters, digits and '_'"
        )
    return value


def check_unit(value: float | None, field_path: str, default: float) -> float:
    """A number in [0, 1]; None takes the default. NaN is refused."""
    if value is None:
        return default
    if not (0.0 <= value <= 1.0):
        raise InvalidArgument(field_path, f"must be within [0, 1], got {value!r}")
    return float(value)


def check_tag(value: str, field_path: str, limits: Limits) -> str:
    """One tag, normalised (lower-case, ``/`` → ``:``)."""
    problem = tag_problem(value)
    if problem is not None:
        raise InvalidArgument(field_path, problem)
    tag = normalise_tag(value)
    if len(tag) > MAX_TAG_LENGTH:  # lower-casing can lengthen it ("İ" → "i̇")
        raise InvalidArgument(field_path, f"longer than {MAX_TAG_LENGTH} characters lower-cased")
    if any(not part for part in tag.split(":")):
        raise InvalidArgument(field_path, "empty segment between separators ('/' or ':')")
    return tag


def check_tags(values: Sequence[str], field_path: str, limits: Limits) -> tuple[str, ...]:
    """Normalised tags, duplicates dropped, order kept."""
    if len(values) > MAX_TAGS:
        raise InvalidArgument(field_path, f"{len(values)} tags; at most {MAX_TAGS}")
    tags = (check_tag(t, f"{field_path}[{i}]", limits) for i, t in enumerate(values))
    return tuple(dict.fromkeys(tags))


def check_types(values: Sequence[str], field_path: str, limits: Limits) -> tuple[str, ...]:
    """A list of memory types to filter on (each a non-empty identifier)."""
    out = []
    for i, value in enumerate(values):
        item = f"{field_path}[{i}]"
        if not value:
            raise InvalidArgument(item, "must not be empty")
        out.append(check_type(value, item, limits))
    return tuple(dict.fromkeys(out))


_MAX_KEY_IN_PATH = 64


def non_finite_path(value: Mapping[str, Any], field_path: str) -> str | None:
    """The path of the first number JSON cannot write (NaN, ±Infinity) in ``value``, if any:
    ``metadata.a.b``, ``metadata.list[2]``. A walk with a stack, so any depth is fine."""
    stack: list[tuple[Any, str]] = [(value, field_path)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path
        if isinstance(item, Mapping):
            pairs = [(x, f"{path}.{str(k)[:_MAX_KEY_IN_PATH]}") for k, x in item.items()]
        elif isinstance(item, list | tuple):
            pairs = [(x, f"{path}[{i}]") for i, x in enumerate(item)]
        else:
            continue
        stack.extend(reversed(pairs))  # first in document order
    return None


def check_finite(value: Mapping[str, Any], field_path: str) -> None:
    """Every number in ``value`` finite; the first that is not is named by its path."""
    where = non_finite_path(value, field_path)
    if where is not None:
        raise InvalidArgument(where, "must be a finite number (JSON has no NaN or Infinity)")


def check_metadata(
    value: Mapping[str, Any] | None, field_path: str, limits: Limits
) -> dict[str, Any]:
    """A JSON object no deeper than ``MAX_METADATA_DEPTH`` and no larger than the limit once
    serialised (depth first: serialising a deep value would exhaust the stack)."""
    if value is None:
        return {}
    if nesting_depth(value) > MAX_METADATA_DEPTH:
        raise InvalidArgument(
            field_path, f"nested deeper than {MAX_METADATA_DEPTH} objects or lists"
        )
    check_finite(value, field_path)
    try:
        encoded = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(field_path, f"not representable as JSON: {exc}") from exc
    size = len(encoded.encode("utf-8"))
    if size > limits.max_metadata_bytes:
        raise InvalidArgument(
            field_path, f"{size} bytes serialised exceeds the limit of {limits.max_metadata_bytes}"
        )
    return dict(value)


def check_timestamp(value: RawTimestamp, field_path: str) -> datetime:
    if not MIN_TIMESTAMP_SECONDS <= value.seconds <= MAX_TIMESTAMP_SECONDS:
        raise InvalidArgument(field_path, f"seconds {value.seconds} outside 0001-01-01..9999-12-31")
    if not 0 <= value.nanos <= 999_999_999:
        raise InvalidArgument(field_path, f"nanos {value.nanos} outside 0..999999999")
    return _EPOCH + timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)


def _opt_timestamp(value: RawTimestamp | None, field_path: str) -> datetime | None:
    return None if value is None else check_timestamp(value, field_path)


def check_validity(t_valid: datetime | None, t_invalid: datetime | None, prefix: str) -> None:
    if t_valid is not None and t_invalid is not None and t_valid > t_invalid:
        raise InvalidArgument(_at(prefix, "t_valid"), "must not be after t_invalid")


# --- memories -----------------------------------------------------------------------


def new_memory(
    inp: MemoryInput, *, tenant: str, prefix: str, now: datetime, limits: Limits
) -> Memory:
    """A validated Memory with defaults. ``id`` is the client's (canonical) or "" to assign."""
    t_valid = _opt_timestamp(inp.t_valid, _at(prefix, "t_valid"))
    t_invalid = _opt_timestamp(inp.t_invalid, _at(prefix, "t_invalid"))
    tags = check_tags(inp.tags, _at(prefix, "tags"), limits)
    memory = Memory(
        id=check_optional_id(inp.id, _at(prefix, "id")),
        tenant=tenant,
        content=check_content(inp.content, _at(prefix, "content"), limits),
        type=check_type(inp.type, _at(prefix, "type"), limits),
        tags=tags,
        tag_prefixes=tag_prefixes(tags),
        importance=check_unit(inp.importance, _at(prefix, "importance"), DEFAULT_IMPORTANCE),
        confidence=check_unit(inp.confidence, _at(prefix, "confidence"), DEFAULT_CONFIDENCE),
        metadata=check_metadata(inp.metadata, _at(prefix, "metadata"), limits),
        timestamp=_opt_timestamp(inp.timestamp, _at(prefix, "timestamp")) or now,
        updated_at=now,
        t_valid=t_valid,
        t_invalid=t_invalid,
    )
    check_validity(t_valid, t_invalid, prefix)
    return memory


def check_update_mask(paths: Sequence[str], inp: MemoryInput) -> tuple[str, ...]:
    """The fields an update takes: the mask, or when it is empty every field set in the input."""
    if not paths:
        chosen = tuple(f for f in present_fields(inp) if f != "id")
        if not chosen:
            raise InvalidArgument("update_mask", "nothing to update: no field set and no mask")
        return chosen
    for i, path in enumerate(paths):
        if path == "id":
            raise InvalidArgument(f"update_mask.paths[{i}]", "the id cannot be changed")
        if path not in UPDATABLE_FIELDS:
            raise InvalidArgument(
                f"update_mask.paths[{i}]",
                f"unknown field {path[:64]!r}; known: {', '.join(UPDATABLE_FIELDS)}",
            )
    return tuple(dict.fromkeys(paths))


def merge_update(
    current: Memory,
    inp: MemoryInput,
    mask: Sequence[str],
    *,
    prefix: str,
    now: datetime,
    limits: Limits,
) -> Memory:
    """``current`` with the masked fields taken from ``inp`` (validated), ``updated_at = now``.

    A masked field the input leaves unset takes the default it would get on Store
    (type "Memory", no tags, importance 0.5, confidence 0.9, empty metadata,
    timestamp now, no validity bounds); content cannot be cleared.
    """
    if inp.id and check_id(inp.id, _at(prefix, "id")) != current.id:
        raise InvalidArgument(_at(prefix, "id"), "must be empty or the id being updated")
    changes: dict[str, Any] = {"updated_at": now}
    for name in mask:
        path = _at(prefix, name)
        if name == "content":
            changes["content"] = check_content(inp.content, path, limits)
        elif name == "type":
            changes["type"] = check_type(inp.type, path, limits)
        elif name == "tags":
            changes["tags"] = check_tags(inp.tags, path, limits)
            changes["tag_prefixes"] = tag_prefixes(changes["tags"])
        elif name == "importance":
            changes["importance"] = check_unit(inp.importance, path, DEFAULT_IMPORTANCE)
        elif name == "confidence":
            changes["confidence"] = check_unit(inp.confidence, path, DEFAULT_CONFIDENCE)
        elif name == "metadata":
            changes["metadata"] = check_metadata(inp.metadata, path, limits)
        elif name == "timestamp":
            changes["timestamp"] = _opt_timestamp(inp.timestamp, path) or now
        elif name in ("t_valid", "t_invalid"):
            changes[name] = _opt_timestamp(getattr(inp, name), path)
    merged = replace(current, **changes)
    check_validity(merged.t_valid, merged.t_invalid, prefix)
    return merged


def check_batch_size(count: int, field_path: str, limits: Limits) -> None:
    if count == 0:
        raise InvalidArgument(field_path, "must not be empty")
    if count > limits.max_batch:
        raise InvalidArgument(field_path, f"{count} memories; at most {limits.max_batch}")


def check_idempotency_key(value: str, field_path: str, limits: Limits) -> str:
    if len(value) > limits.max_idempotency_key_length:
        raise InvalidArgument(
            field_path, f"longer than {limits.max_idempotency_key_length} characters"
        )
    return value


# --- queries ------------------------------------------------------------------------


def check_query(value: str, field_path: str, limits: Limits) -> str:
    if not value.strip():
        raise InvalidArgument(field_path, "must not be empty")
    size = len(value.encode("utf-8"))
    if size > limits.max_query_bytes:
        raise InvalidArgument(
            field_path, f"{size} bytes (UTF-8) exceeds the limit of {limits.max_query_bytes}"
        )
    return value


def check_limit(value: int, field_path: str, default: int, maximum: int) -> int:
    """0 takes the default; otherwise 1..maximum."""
    if value == 0:
        return default
    if not 1 <= value <= maximum:
        raise InvalidArgument(field_path, f"must be within 1..{maximum}, got {value}")
    return value


def _parse_iso(value: str, field_path: str, end_of_day: bool) -> datetime:
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidArgument(field_path, f"not an ISO-8601 date or time: {value[:64]!r}") from exc
    # A bare date as an inclusive end means the whole of that day.
    if end_of_day and len(text) <= len("YYYY-MM-DD"):
        parsed = datetime.combine(parsed.date(), time.max)
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError as exc:  # e.g. 0001-01-01T00:00+05:00 is in year 0 in UTC
        raise InvalidArgument(
            field_path, f"{value[:64]!r} is outside the years 1..9999 in UTC"
        ) from exc


def check_time_range(
    start: str, end: str, start_field: str = "start", end_field: str = "end"
) -> tuple[datetime | None, datetime | None]:
    """Inclusive ISO-8601 bounds ("" = open); naive values are UTC."""
    lo = _parse_iso(start, start_field, end_of_day=False) if start.strip() else None
    hi = _parse_iso(end, end_field, end_of_day=True) if end.strip() else None
    if lo is not None and hi is not None and lo > hi:
        raise InvalidArgument(start_field, "must not be after end")
    return lo, hi


def check_user_relation_type(value: str, field_path: str) -> RelationType:
    """A relation type clients may create (system edges are the workers')."""
    parsed = parse_relation_type(value)
    if parsed is None or parsed not in USER_TYPES:
        known = ", ".join(sorted(USER_TYPES))
        raise InvalidArgument(field_path, f"unknown relation type {value[:64]!r}; one of {known}")
    return parsed


def check_relation_types(values: Sequence[str], field_path: str) -> tuple[str, ...]:
    """Relation types to follow when reading: any type of the registry."""
    out = []
    for i, value in enumerate(values):
        parsed = parse_relation_type(value)
        if parsed is None:
            raise InvalidArgument(f"{field_path}[{i}]", f"unknown relation type {value[:64]!r}")
        out.append(parsed.value)
    return tuple(dict.fromkeys(out))


def check_strength(value: float, field_path: str) -> float:
    """[0, 1]; exactly 0 means "not given" (proto3 default) and takes DEFAULT_STRENGTH."""
    if value == 0.0:
        return DEFAULT_STRENGTH
    if math.isnan(value) or not 0.0 < value <= 1.0:
        raise InvalidArgument(field_path, f"must be within [0, 1], got {value!r}")
    return float(value)


def check_depth(value: int, field_path: str, limits: Limits) -> int:
    return check_limit(value, field_path, 1, limits.max_depth)


MAX_FOCUS_IDS = 100
MAX_FOCUS_KEYWORDS = 32
MAX_KEYWORD_LENGTH = 64


def check_focus(focus: Focus, field_path: str, limits: Limits) -> Focus:
    """A recall's focus with its tags normalised, ids canonical and duplicates dropped."""
    keywords = []
    if len(focus.keywords) > MAX_FOCUS_KEYWORDS:
        raise InvalidArgument(
            f"{field_path}.keywords",
            f"{len(focus.keywords)} keywords; at most {MAX_FOCUS_KEYWORDS}",
        )
    for i, word in enumerate(focus.keywords):
        item = f"{field_path}.keywords[{i}]"
        if not word.strip():
            raise InvalidArgument(item, "must not be empty")
        if len(word) > MAX_KEYWORD_LENGTH:
            raise InvalidArgument(item, f"longer than {MAX_KEYWORD_LENGTH} characters")
        keywords.append(word.strip().lower())
    if len(focus.ids) > MAX_FOCUS_IDS:
        raise InvalidArgument(f"{field_path}.ids", f"{len(focus.ids)} ids; at most {MAX_FOCUS_IDS}")
    if len(focus.types) > MAX_TAGS:
        raise InvalidArgument(
            f"{field_path}.types", f"{len(focus.types)} types; at most {MAX_TAGS}"
        )
    return Focus(
        tags=check_tags(focus.tags, f"{field_path}.tags", limits),
        types=check_types(focus.types, f"{field_path}.types", limits),
        keywords=tuple(dict.fromkeys(keywords)),
        ids=tuple(
            dict.fromkeys(check_id(x, f"{field_path}.ids[{i}]") for i, x in enumerate(focus.ids))
        ),
        pinned=focus.pinned,
    )


MAX_EMBEDDING_DIMENSION = 4096


def check_embedding(
    values: Sequence[float], field_path: str, *, has_query: bool = True, dimension: int = 0
) -> tuple[float, ...]:
    """A client's own vector (a recall's query, a memory's content): finite numbers, not all
    zero (no direction for cosine), at most ``MAX_EMBEDDING_DIMENSION``, and with
    ``dimension`` (the live model's size) exactly that many; where the caller does not know
    the size, the vector service checks it. A recall's also needs a query text beside it
    (BM25, the graph and scoring read the text)."""
    if not values:
        return ()
    if not has_query:
        raise InvalidArgument(field_path, "needs a query text beside it")
    if len(values) > MAX_EMBEDDING_DIMENSION:
        raise InvalidArgument(
            field_path, f"{len(values)} values; at most {MAX_EMBEDDING_DIMENSION}"
        )
    if dimension and len(values) != dimension:
        raise InvalidArgument(
            field_path, f"{len(values)} values; the embedding model's vectors have {dimension}"
        )
    if not all(math.isfinite(x) for x in values):
        raise InvalidArgument(field_path, "every value must be a finite number")
    if not any(values):
        raise InvalidArgument(field_path, "must not be all zeros (no direction for cosine)")
    return tuple(float(x) for x in values)
