"""Memory <-> JSON bytes, for the copy of the memory kept in the index's stored field."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from engram_core.model import Memory


def _ts(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dt(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def encode(m: Memory) -> bytes:
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
        "last_accessed": _ts(m.last_accessed),
        "access_count": m.access_count,
        "t_valid": _ts(m.t_valid),
        "t_invalid": _ts(m.t_invalid),
        "relevance_score": m.relevance_score,
        "archived": m.archived,
        "embedding_model": m.embedding_model,
        "version": m.version,
        "entities": list(m.entities),
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def decode(raw: bytes) -> Memory:
    d = json.loads(raw)
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
        last_accessed=_dt(d["last_accessed"]),
        access_count=d["access_count"],
        t_valid=_dt(d["t_valid"]),
        t_invalid=_dt(d["t_invalid"]),
        relevance_score=d["relevance_score"],
        archived=d["archived"],
        embedding_model=d["embedding_model"],
        version=d["version"],
        entities=tuple(d["entities"]),
    )
