"""The tools' connection to Engram: the SDK's AsyncEngram (token, TLS, retries, idempotency
keys, read-your-writes for recall, get and related, errors naming the field), answering in
the plain dicts the tools return as structured content."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engram_client import AsyncEngram, Config, EngramError, Memory, NotFound, Written


def _time(when: datetime | None) -> str:
    return when.isoformat() if when is not None else ""


def memory_dict(m: Memory) -> dict[str, Any]:
    """The fields of a memory an agent reads (no index internals)."""
    return {
        "id": m.id,
        "content": m.content,
        "type": m.type,
        "tags": list(m.tags),
        "importance": round(m.importance, 3),
        "confidence": round(m.confidence, 3),
        "metadata": m.metadata,
        "timestamp": _time(m.timestamp),
        "updated_at": _time(m.updated_at),
        "archived": m.archived,
        "entities": list(m.entities),
    }


def _written(w: Written) -> dict[str, Any]:
    return {"id": w.id, "sequence": w.sequence}


class Gateway:
    """MemoryService calls for the configured token, over one AsyncEngram."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._engram: AsyncEngram | None = None
        self._settled = 0

    def _client(self) -> AsyncEngram:
        # grpc.aio binds a channel to the event loop it is made in: the server's, on first use.
        if self._engram is None:
            c = self.config
            self._engram = AsyncEngram(
                c.address, c.token, tls=c.tls, ca=c.ca, cert=c.cert, key=c.key,
                timeout=c.timeout_s, retry=c.retry,
            )  # fmt: skip
        return self._engram

    async def close(self) -> None:
        if self._engram is not None:
            await self._engram.close()
        self._engram = None

    async def _settle(self, id: str) -> AsyncEngram:
        """The client, once the stores applied its writes, so an update, delete or associate
        of a memory stored a moment ago finds it: those calls do not wait, but the SDK's
        Related does (and, unlike Get, records no access). Whatever it answers, the write
        goes ahead and answers for itself (a memory that is not there: its NOT_FOUND)."""
        engram = self._client()
        target = engram.last_sequence
        if target > self._settled:
            try:
                await engram.related(id, limit=1)
            except NotFound:  # answered after the wait: settled all the same
                pass
            except EngramError:  # e.g. a bad id or a token without read scope: no wait
                return engram
            self._settled = target
        return engram

    async def store(self, content: str, **fields: Any) -> dict[str, Any]:
        stored = await self._client().store(content, **fields)
        return {"id": stored.id, "sequence": stored.sequence}

    async def recall(self, query: str, **fields: Any) -> dict[str, Any]:
        found = await self._client().recall(query, **fields)
        results = [{"score": round(h.score, 4), "memory": memory_dict(h.memory)} for h in found]
        return {"results": results, "context": found.context, "degraded": list(found.degraded)}

    async def get(self, id: str) -> dict[str, Any]:
        return memory_dict(await self._client().get(id))

    async def update(self, id: str, **fields: Any) -> dict[str, Any]:
        return _written(await (await self._settle(id)).update(id, **fields))

    async def delete(self, id: str) -> dict[str, Any]:
        return _written(await (await self._settle(id)).delete(id))

    async def associate(
        self, source_id: str, target_id: str, type: str, strength: float
    ) -> dict[str, Any]:
        engram = await self._settle(source_id)
        written = await engram.associate(source_id, target_id, type, strength=strength)
        return {"sequence": written.sequence}

    async def related(self, id: str, **fields: Any) -> list[dict[str, Any]]:
        related = await self._client().related(id, **fields)
        return [
            {"type": r.type, "strength": round(r.strength, 3), "depth": r.depth}
            | {"memory": memory_dict(r.memory)}
            for r in related
        ]

    async def stats(self) -> dict[str, Any]:
        s = await self._client().stats()
        return {
            "tenant": s.tenant,
            "counts": s.counts,
            "watermark": s.watermark,
            "last_sequence": s.last_sequence,
            "dead_letters": s.dead_letters,
        }
