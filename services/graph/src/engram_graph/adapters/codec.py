"""Memory <-> the JSON document kept on the graph's memory node, time <-> microseconds, and
the per-relation versions both adapters read.

Access statistics live in their own columns (update_access changes them without rewriting the
document), so they are not part of the document. So does the relevance_score once written: the
document keeps the score its upsert carried, the column (when set) is the one that counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from engram_core.codec import memory_from_json, memory_to_json
from engram_core.model import Memory, Relation
from engram_core.relations import relation_versions

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
# "Never accessed": below every real time, so `last_accessed <= $new` accepts any first access.
NEVER = -(2**63)


def to_us(value: datetime) -> int:
    """Exact microseconds since the epoch (naive datetimes are taken as UTC)."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return (aware - _EPOCH) // _US


def from_us(value: int) -> datetime:
    return _EPOCH + value * _US


def access_time(value: int) -> datetime | None:
    """The ``last_accessed`` column as a time (None: never accessed)."""
    return None if value == NEVER else from_us(value)


def encode(m: Memory) -> str:
    return memory_to_json(m, access=False)


def decode(
    doc: str, last_accessed_us: int, access_count: int, relevance: float | None = None
) -> Memory:
    m = memory_from_json(
        doc, last_accessed=access_time(last_accessed_us), access_count=access_count
    )
    return m if relevance is None else replace(m, relevance_score=float(relevance))


def with_versions(
    relations: Sequence[Relation], version: int, versions: Sequence[int]
) -> list[tuple[Relation, int]]:
    """Each relation with its version: ``versions`` (one per relation) or ``version`` for all."""
    return list(zip(relations, relation_versions(len(relations), version, versions), strict=True))
