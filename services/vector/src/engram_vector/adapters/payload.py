"""How a memory is laid out as a Qdrant point, shared by the Edge and server adapters.

Payload = the whole memory as one JSON string under ``memory`` (engram_core.codec, the
document the lexical and graph stores keep too; so Get is served from the index) plus flat
fields the filters run on. One string rather than a nested object because qdrant-edge-py
converts every payload value on its own (~5 us each): a nested memory made upserts 4x
slower, and JSON keeps metadata exactly as given.
Flags are stored as 0/1 integers, not booleans: qdrant-edge-py 0.9 turns
``MatchValue(False)`` into the integer 0, so a boolean field never matches, and
local-mode qdrant-client cross-matches bools and ints.
A tombstone is a point without a vector holding only tenant, id, version, deleted=1.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from engram_core.codec import memory_from_json, memory_to_json
from engram_core.errors import InvalidArgument
from engram_core.model import Filter, Hit, Memory, TagMatch, TagMode
from engram_core.tags import normalise_tag, tag_prefixes

VECTOR_NAME = "dense"
# Fixed namespace: point ids must stay the same across releases, or data is orphaned.
_POINT_NAMESPACE = uuid.UUID("6f1d3c52-8a4e-5b7f-9c0d-2e6a1b4f7d83")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Payload keys the filters use; each backend indexes them.
TENANT = "tenant"
ID = "id"
DELETED = "deleted"
VERSION = "version"
TYPE = "type"
TAGS = "tags"
TAG_PREFIXES = "tag_prefixes"
TS = "ts_us"
ARCHIVED = "archived"
MEMORY = "memory"


def point_id(tenant: str, memory_id: str) -> str:
    """A UUID per (tenant, id): two tenants holding the same id never share a point."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{tenant}\x1f{memory_id}"))


def epoch_us(dt: datetime) -> int:
    """Whole microseconds since the epoch: exact, so inclusive bounds stay inclusive."""
    delta = dt.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def stored_model(records: Iterable[Any]) -> str | None:
    """The embedding model the first of scrolled points (with the memory payload) names:
    what a store made before it recorded its model was embedded with."""
    for r in records:
        if model := memory_from_json((r.payload or {})[MEMORY]).embedding_model:
            return model
    return None


def memory_payload(tenant: str, m: Memory) -> dict[str, Any]:
    m = replace(m, tenant=tenant)
    return {
        TENANT: tenant,
        ID: m.id,
        DELETED: 0,
        VERSION: m.version,
        TYPE: m.type,
        TAGS: list(m.tags),
        # The same source of prefixes as engram_core.filters.matches.
        TAG_PREFIXES: list(m.tag_prefixes or tag_prefixes(m.tags)),
        TS: epoch_us(m.timestamp),
        ARCHIVED: int(m.archived),
        MEMORY: memory_to_json(m),
    }


def tombstone_payload(tenant: str, memory_id: str, version: int) -> dict[str, Any]:
    return {TENANT: tenant, ID: memory_id, DELETED: 1, VERSION: version}


@dataclass(frozen=True, slots=True)
class Stored:
    """What the version guard needs to know about a point already in the index."""

    version: int
    deleted: bool
    memory: Memory | None


def stored_from_payload(payload: Mapping[str, Any] | None) -> Stored | None:
    if not payload:
        return None
    deleted = bool(payload.get(DELETED))
    memory = None if deleted or MEMORY not in payload else memory_from_json(payload[MEMORY])
    return Stored(version=int(payload.get(VERSION) or 0), deleted=deleted, memory=memory)


def live_in_order(stored: Mapping[str, Stored], tenant: str, ids: Sequence[str]) -> list[Memory]:
    """The live memories among ``ids`` (point id -> stored state), in the order asked."""
    out = []
    for memory_id in ids:
        st = stored.get(point_id(tenant, memory_id))
        if st is not None and st.memory is not None:
            out.append(st.memory)
    return out


def hit_from_payload(payload: Mapping[str, Any] | None, score: float) -> Hit:
    """A search hit from a point that carries its memory (``with_payload=[MEMORY]``)."""
    memory = memory_from_json((payload or {})[MEMORY])
    return Hit(id=memory.id, score=float(score), memory=memory)


def plan_tombstones(
    tenant: str, ids: Sequence[str], version: int, current: Mapping[str, Stored]
) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """(point id, tombstone payload) for each id a delete at ``version`` may replace, and how
    many of them are live memories. ``current`` is what the store holds, by point id."""
    tombstones: list[tuple[str, dict[str, Any]]] = []
    deleted = 0
    for memory_id in ids:
        pid = point_id(tenant, memory_id)
        st = current.get(pid)
        if st is not None and version <= st.version:
            continue
        if st is not None and not st.deleted:
            deleted += 1
        tombstones.append((pid, tombstone_payload(tenant, memory_id, version)))
    return tombstones, deleted


def newest_per_id(
    items: Sequence[tuple[Memory, Sequence[float]]],
) -> dict[str, tuple[Memory, Sequence[float]]]:
    """Within one batch only the highest version of an id counts; the rest are skipped."""
    newest: dict[str, tuple[Memory, Sequence[float]]] = {}
    for memory, vector in items:
        seen = newest.get(memory.id)
        if seen is None or memory.version > seen[0].version:
            newest[memory.id] = (memory, vector)
    return newest


def scan_offset(cursor: str | None, limit: int) -> str | None:
    """The point id a scan resumes from (None: the start), after checking the page size. The
    cursor is the next page's first point id, the ``next_page_offset`` Qdrant returned."""
    if limit < 1:
        raise InvalidArgument("limit", f"must be >= 1, got {limit}")
    if cursor is None:
        return None
    try:
        return str(uuid.UUID(cursor))
    except ValueError:
        raise InvalidArgument("cursor", "not a cursor this index returned") from None


def check_neighbour_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidArgument("limit", f"must be >= 1, got {limit}")


def check_vector(vector: Any, dimension: int, field: str = "vector") -> list[float]:
    values = [float(x) for x in vector]
    if len(values) != dimension:
        raise InvalidArgument(field, f"expected {dimension} dimensions, got {len(values)}")
    return values


# A backend-neutral filter: each adapter turns these conditions into its client's types.
@dataclass(frozen=True, slots=True)
class Match:
    key: str
    value: str | int


@dataclass(frozen=True, slots=True)
class MatchAnyOf:
    key: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Range:
    key: str
    gte: int | None
    lte: int | None


Condition = Match | MatchAnyOf | Range


@dataclass(frozen=True, slots=True)
class Conditions:
    must: tuple[Condition, ...]
    must_not: tuple[Condition, ...]


def live_conditions(tenant: str) -> list[Condition]:
    return [Match(TENANT, tenant), Match(DELETED, 0)]


def filter_conditions(tenant: str, flt: Filter) -> Conditions:
    """`engram_core.filters.matches` as conditions the backend evaluates, for vector search."""
    # No deleted=0 here: a tombstone has no vector, so a nearest-vector query never
    # scores it, and every condition costs a check per candidate (~0.4 ms at 100k).
    must: list[Condition] = [Match(TENANT, tenant)]
    must_not: list[Condition] = []
    if not flt.include_archived:
        must.append(Match(ARCHIVED, 0))
    if flt.types:
        must.append(MatchAnyOf(TYPE, tuple(flt.types)))
    if flt.exclude_types:
        must_not.append(MatchAnyOf(TYPE, tuple(flt.exclude_types)))
    if flt.start is not None or flt.end is not None:
        must.append(
            Range(
                TS,
                gte=None if flt.start is None else epoch_us(flt.start),
                lte=None if flt.end is None else epoch_us(flt.end),
            )
        )
    if flt.exclude_tags:
        must_not.append(MatchAnyOf(TAG_PREFIXES, _normalised(flt.exclude_tags)))
    if flt.tags:
        key = TAG_PREFIXES if flt.tag_match is TagMatch.PREFIX else TAGS
        wanted = _normalised(flt.tags)
        if flt.tag_mode is TagMode.ALL:
            must.extend(Match(key, tag) for tag in wanted)
        else:
            must.append(MatchAnyOf(key, wanted))
    return Conditions(must=tuple(must), must_not=tuple(must_not))


def _normalised(tags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(normalise_tag(t) for t in tags))
