"""Memory <-> the JSON document kept on the graph's memory node, and time <-> microseconds.

Access statistics live in their own columns (update_access changes them without rewriting the
document), so they are not part of the document.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from engram_core.model import Memory

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


def _ts(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dt(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def encode(m: Memory) -> str:
    doc = {
        "id": m.id,
        "tenant": m.tenant,
        "content": m.content,
        "type": m.type,
        "tags": list(m.tags),
        "tag_prefixes": list(m.tag_prefixes),
        "importance": m.importance,
        "confidence": m.confidence,
        "metadata": dict(m.metadata),
        "timestamp": _ts(m.timestamp),
        "updated_at": _ts(m.updated_at),
        "t_valid": _ts(m.t_valid),
        "t_invalid": _ts(m.t_invalid),
        "relevance_score": m.relevance_score,
        "archived": m.archived,
        "embedding_model": m.embedding_model,
        "version": m.version,
        "entities": list(m.entities),
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def decode(doc: str, last_accessed_us: int, access_count: int) -> Memory:
    d = json.loads(doc)
    return Memory(
        id=d["id"],
        tenant=d["tenant"],
        content=d["content"],
        type=d["type"],
        tags=tuple(d["tags"]),
        tag_prefixes=tuple(d["tag_prefixes"]),
        importance=d["importance"],
        confidence=d["confidence"],
        metadata=d["metadata"],
        timestamp=datetime.fromisoformat(d["timestamp"]),
        updated_at=datetime.fromisoformat(d["updated_at"]),
        last_accessed=None if last_accessed_us == NEVER else from_us(last_accessed_us),
        access_count=access_count,
        t_valid=_dt(d["t_valid"]),
        t_invalid=_dt(d["t_invalid"]),
        relevance_score=d["relevance_score"],
        archived=d["archived"],
        embedding_model=d["embedding_model"],
        version=d["version"],
        entities=tuple(d["entities"]),
    )
