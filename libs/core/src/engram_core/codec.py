"""Memory <-> one JSON document, for stores that keep the whole memory beside their index.

Times are ISO-8601 strings as ``datetime.isoformat`` writes them; tuples become lists. Stdlib
only (engram_core stays free of protobuf and pydantic). A store that keeps the access
statistics in columns of their own (so UpdateAccess need not rewrite the document) encodes
with ``access=False`` and hands them back to `memory_from_json`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from engram_core.memo import SizedMemo, memory_size
from engram_core.model import Memory


def _ts(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dt(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def memory_to_json(m: Memory, *, access: bool = True) -> str:
    """Compact JSON of every field of ``m``; without ``last_accessed``/``access_count``
    when ``access`` is False."""
    doc: dict[str, Any] = {
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
    }
    if access:
        doc["last_accessed"] = _ts(m.last_accessed)
        doc["access_count"] = m.access_count
    doc.update(
        t_valid=_ts(m.t_valid),
        t_invalid=_ts(m.t_invalid),
        relevance_score=m.relevance_score,
        archived=m.archived,
        embedding_model=m.embedding_model,
        version=m.version,
        entities=list(m.entities),
    )
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def memory_from_json(
    doc: str | bytes, *, last_accessed: datetime | None = None, access_count: int = 0
) -> Memory:
    """The memory `memory_to_json` wrote. The access statistics come from the document when
    it holds them, else from ``last_accessed``/``access_count``.

    Memoised (Memory is frozen): a store's searches read the same documents again and again,
    and the same object back lets engram_platform.convert reuse its encoding."""
    return _decoded((doc, last_accessed, access_count))


def _decode(key: tuple[str | bytes, datetime | None, int]) -> Memory:
    doc, last_accessed, access_count = key
    d = json.loads(doc)
    if "access_count" in d:
        last_accessed, access_count = _dt(d["last_accessed"]), d["access_count"]
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
        last_accessed=last_accessed,
        access_count=access_count,
        t_valid=_dt(d["t_valid"]),
        t_invalid=_dt(d["t_invalid"]),
        relevance_score=d["relevance_score"],
        archived=d["archived"],
        embedding_model=d["embedding_model"],
        version=d["version"],
        entities=tuple(d["entities"]),
    )


_decoded = SizedMemo(_decode, lambda key, _: memory_size(key[0]))
