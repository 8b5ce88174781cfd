"""Proto <-> domain conversions shared by every service, client and worker."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from engram.common.v1 import common_pb2
from engram_core.errors import InvalidArgument
from engram_core.memo import SizedMemo, memory_size
from engram_core.model import (
    AccessUpdate,
    Entity,
    Filter,
    Generation,
    Hit,
    Memory,
    Relation,
    TagMatch,
    TagMode,
)
from engram_core.relations import ORIGIN_USER
from engram_core.scoring import Focus, RecencyBias

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_MICROSECOND = timedelta(microseconds=1)

# Every recall converts a few hundred memories (each stream's hits, scoring's candidates and
# results), so these run hot: plain arithmetic and a direct walk of the Struct instead of
# Timestamp.FromDatetime/ToDatetime and json_format.MessageToDict (several times slower).


def ts_to_proto(dt: datetime) -> timestamp_pb2.Timestamp:
    if dt.tzinfo is None:  # naive means local time, as astimezone reads it
        dt = dt.astimezone(UTC)
    seconds, micros = divmod((dt - _EPOCH) // _MICROSECOND, 1_000_000)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=micros * 1000)


def ts_from_proto(ts: timestamp_pb2.Timestamp) -> datetime:
    # Truncated to microseconds, as ToDatetime does (nanos is never negative). One
    # timedelta multiplied, not one built from keywords: 0.56 against 0.99 µs
    # (timeit, best of 5), and a recall reads hundreds.
    return _EPOCH + _MICROSECOND * (ts.seconds * 1_000_000 + ts.nanos // 1000)


def _value_to_py(v: struct_pb2.Value, finite: bool) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return v.string_value
    if kind == "number_value":
        x = v.number_value
        if finite and not math.isfinite(x):  # as MessageToDict: JSON has no Infinity or NaN
            raise ValueError(f"cannot convert {x} in a Struct to JSON")
        return x
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return struct_to_dict(v.struct_value, finite=finite)
    if kind == "list_value":
        return [_value_to_py(item, finite) for item in v.list_value.values]
    return None  # null_value, or unset


def struct_to_dict(value: struct_pb2.Struct, *, finite: bool = True) -> dict[str, Any]:
    """What json_format.MessageToDict returns for a Struct, without its generic machinery.

    ``finite=False`` keeps NaN and ±Infinity as floats (a client's input, which validation
    then refuses naming where they are) instead of raising ValueError."""
    return {key: _value_to_py(v, finite) for key, v in value.fields.items()}


def dict_to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(dict(value))
    return out


def _opt_ts(msg: Any, name: str) -> datetime | None:
    return ts_from_proto(getattr(msg, name)) if msg.HasField(name) else None


# A recall meets the same memories many times over (each stream's hits, the context step's
# windows, scoring's candidates, and the next recall's), and building a message or a Memory
# field by field costs 15-20 µs where parsing or copying its bytes costs 1-2. So both
# directions are memoised (engram_core.memo, bounded by bytes): a Memory decoded from the
# same bytes is the same (frozen) object, and an object encoded once keeps its bytes. The
# encoding memo is keyed by identity (Memory holds a dict, so it has no hash), and holds the
# object, so an id is never reused while remembered.


class _Same:
    """``obj`` as a cache key by identity."""

    __slots__ = ("obj",)

    def __init__(self, obj: Memory) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


def _memory_message(m: Memory, scored_only: bool) -> common_pb2.Memory:
    fields: dict[str, Any] = {
        "id": m.id,
        "content": m.content,
        "type": m.type,
        "tags": m.tags,
        "tag_prefixes": m.tag_prefixes,
        "importance": m.importance,
        "confidence": m.confidence,
        "metadata": dict_to_struct(m.metadata),
        "timestamp": ts_to_proto(m.timestamp),
        "relevance_score": m.relevance_score,
    }
    if scored_only:
        return common_pb2.Memory(**fields)
    out = common_pb2.Memory(
        **fields,
        tenant=m.tenant,
        updated_at=ts_to_proto(m.updated_at),
        access_count=m.access_count,
        archived=m.archived,
        embedding_model=m.embedding_model,
        version=m.version,
        entities=m.entities,
    )
    for name in ("last_accessed", "t_valid", "t_invalid"):
        value = getattr(m, name)
        if value is not None:
            getattr(out, name).CopyFrom(ts_to_proto(value))
    return out


def _encode(key: tuple[_Same, bool]) -> bytes:
    return _memory_message(key[0].obj, key[1]).SerializeToString()


_encoded = SizedMemo(_encode, lambda _, data: memory_size(data))


def _memory_bytes(m: Memory, scored_only: bool) -> bytes:
    return _encoded((_Same(m), scored_only))


def memory_to_proto(m: Memory, *, scored_only: bool = False) -> common_pb2.Memory:
    """``scored_only``: just engram_core.scoring.SCORED_FIELDS, what ranking reads (the
    gateway's candidates to the scoring service: less to encode and decode)."""
    return common_pb2.Memory.FromString(_memory_bytes(m, scored_only))


def merge_memory(into: common_pb2.Memory, m: Memory, *, scored_only: bool = False) -> None:
    """``m`` into the (empty) message field ``into``: parsed once from the memoised bytes,
    where assigning a `memory_to_proto` message would parse it and then copy it."""
    into.MergeFromString(_memory_bytes(m, scored_only))


def memory_from_proto(p: common_pb2.Memory) -> Memory:
    return _decoded(p.SerializeToString(deterministic=True))


def _decode(data: bytes) -> Memory:
    p = common_pb2.Memory.FromString(data)
    return Memory(
        id=p.id,
        tenant=p.tenant,
        content=p.content,
        type=p.type,
        tags=tuple(p.tags),
        tag_prefixes=tuple(p.tag_prefixes),
        importance=p.importance,
        confidence=p.confidence,
        metadata=struct_to_dict(p.metadata),
        timestamp=_opt_ts(p, "timestamp") or _EPOCH,
        updated_at=_opt_ts(p, "updated_at") or _EPOCH,
        last_accessed=_opt_ts(p, "last_accessed"),
        access_count=p.access_count,
        t_valid=_opt_ts(p, "t_valid"),
        t_invalid=_opt_ts(p, "t_invalid"),
        relevance_score=p.relevance_score,
        archived=p.archived,
        embedding_model=p.embedding_model,
        version=p.version,
        entities=tuple(p.entities),
    )


_decoded = SizedMemo(_decode, lambda data, _: memory_size(data))


_TAG_MODE = {TagMode.ANY: common_pb2.TAG_MODE_ANY, TagMode.ALL: common_pb2.TAG_MODE_ALL}
_TAG_MATCH = {
    TagMatch.EXACT: common_pb2.TAG_MATCH_EXACT,
    TagMatch.PREFIX: common_pb2.TAG_MATCH_PREFIX,
}


def tag_mode_from_proto(value: int) -> TagMode:
    return TagMode.ALL if value == common_pb2.TAG_MODE_ALL else TagMode.ANY


def tag_match_from_proto(value: int) -> TagMatch:
    return TagMatch.PREFIX if value == common_pb2.TAG_MATCH_PREFIX else TagMatch.EXACT


def filter_to_proto(f: Filter) -> common_pb2.Filter:
    out = common_pb2.Filter(
        tags=list(f.tags),
        tag_mode=_TAG_MODE[f.tag_mode],
        tag_match=_TAG_MATCH[f.tag_match],
        exclude_tags=list(f.exclude_tags),
        types=list(f.types),
        exclude_types=list(f.exclude_types),
        include_archived=f.include_archived,
    )
    if f.start is not None:
        out.start.CopyFrom(ts_to_proto(f.start))
    if f.end is not None:
        out.end.CopyFrom(ts_to_proto(f.end))
    return out


def filter_from_proto(p: common_pb2.Filter) -> Filter:
    return Filter(
        tags=tuple(p.tags),
        tag_mode=tag_mode_from_proto(p.tag_mode),
        tag_match=tag_match_from_proto(p.tag_match),
        exclude_tags=tuple(p.exclude_tags),
        types=tuple(p.types),
        exclude_types=tuple(p.exclude_types),
        start=_opt_ts(p, "start"),
        end=_opt_ts(p, "end"),
        include_archived=p.include_archived,
    )


def add_memories(
    into: RepeatedCompositeFieldContainer[common_pb2.Memory], ms: Iterable[Memory]
) -> None:
    """Append each memory to a repeated field: cheaper than a list of messages, which the
    field would copy one by one."""
    for m in ms:
        merge_memory(into.add(), m)


def add_hits(into: RepeatedCompositeFieldContainer[common_pb2.Hit], hits: Iterable[Hit]) -> None:
    """`add_memories` for search hits."""
    for h in hits:
        out = into.add(id=h.id, score=h.score)
        if h.memory is not None:
            merge_memory(out.memory, h.memory)


def hit_from_proto(p: common_pb2.Hit) -> Hit:
    return Hit(
        id=p.id,
        score=p.score,
        memory=memory_from_proto(p.memory) if p.HasField("memory") else None,
    )


def relation_to_proto(r: Relation) -> common_pb2.Relation:
    return common_pb2.Relation(
        source_id=r.source_id,
        target_id=r.target_id,
        type=r.type,
        strength=r.strength,
        properties=dict_to_struct(r.properties),
        origin=r.origin,
        created_at=ts_to_proto(r.created_at),
    )


def relation_from_proto(p: common_pb2.Relation) -> Relation:
    return Relation(
        source_id=p.source_id,
        target_id=p.target_id,
        type=p.type,
        strength=p.strength,
        properties=struct_to_dict(p.properties),
        origin=p.origin or ORIGIN_USER,
        created_at=_opt_ts(p, "created_at") or _EPOCH,
    )


def entity_to_proto(e: Entity) -> common_pb2.Entity:
    return common_pb2.Entity(kind=e.kind, slug=e.slug, name=e.name)


def entity_from_proto(p: common_pb2.Entity) -> Entity:
    return Entity(kind=p.kind, slug=p.slug, name=p.name)


def access_update_to_proto(a: AccessUpdate) -> common_pb2.AccessUpdate:
    return common_pb2.AccessUpdate(
        id=a.id, last_accessed=ts_to_proto(a.last_accessed), access_count=a.access_count
    )


def access_update_from_proto(p: common_pb2.AccessUpdate) -> AccessUpdate:
    return AccessUpdate(
        id=p.id,
        last_accessed=_opt_ts(p, "last_accessed") or _EPOCH,
        access_count=p.access_count,
    )


def generation_to_proto(g: Generation) -> common_pb2.Generation:
    return common_pb2.Generation(
        name=g.name,
        live=g.live,
        embedding_model=g.embedding_model,
        count=g.count,
        created_at=ts_to_proto(g.created_at),
        dimension=g.dimension,
    )


def generation_from_proto(p: common_pb2.Generation) -> Generation:
    return Generation(
        name=p.name,
        live=p.live,
        embedding_model=p.embedding_model,
        count=p.count,
        created_at=ts_from_proto(p.created_at),
        dimension=p.dimension,
    )


def focus_to_proto(f: Focus) -> common_pb2.Focus:
    return common_pb2.Focus(
        tags=f.tags, types=f.types, keywords=f.keywords, ids=f.ids, pinned=f.pinned
    )


def focus_from_proto(p: common_pb2.Focus) -> Focus:
    """As sent; the gateway validates (engram_core.validation.check_focus)."""
    return Focus(tuple(p.tags), tuple(p.types), tuple(p.keywords), tuple(p.ids), p.pinned)


_RECENCY_BIAS: Mapping[int, RecencyBias | None] = {
    common_pb2.RECENCY_BIAS_UNSPECIFIED: None,
    common_pb2.RECENCY_BIAS_OFF: RecencyBias.OFF,
    common_pb2.RECENCY_BIAS_ON: RecencyBias.ON,
    common_pb2.RECENCY_BIAS_AUTO: RecencyBias.AUTO,
}
_RECENCY_BIAS_TO_PROTO: Mapping[RecencyBias | None, common_pb2.RecencyBias.ValueType] = {
    v: common_pb2.RecencyBias.ValueType(k) for k, v in _RECENCY_BIAS.items()
}


def recency_bias_from_proto(value: int) -> RecencyBias | None:
    """None for UNSPECIFIED (the server default); proto3 enums are open, so check the rest."""
    if value not in _RECENCY_BIAS:
        raise InvalidArgument("recency_bias", f"unknown recency bias {value}")
    return _RECENCY_BIAS[value]


def recency_bias_to_proto(value: RecencyBias | None) -> common_pb2.RecencyBias.ValueType:
    return _RECENCY_BIAS_TO_PROTO[value]
