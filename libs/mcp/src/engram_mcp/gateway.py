"""The tools' connection to Engram: the SDK's AsyncEngram (token, TLS, retries, idempotency
keys, read-your-writes for recall, errors naming the field), answering in the plain dicts
the tools return as structured content."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from engram_client import AsyncEngram, Config, EngramError, Memory, Written

_SETTLE_POLL_S = 0.05


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

    async def _settle(self) -> AsyncEngram:
        """The client, once the stores applied its writes, so a get, update or associate of
        a memory stored a moment ago finds it (the SDK's recall waits by itself; these calls
        do not). Stats' watermark is the tenant's own; past the timeout, or without Stats,
        the call goes ahead and answers for itself."""
        engram = self._client()
        target = engram.last_sequence
        give_up = time.monotonic() + self.config.timeout_s
        while target > self._settled and time.monotonic() < give_up:
            try:
                stats = await engram.stats()
            except EngramError:  # e.g. a token without read scope: no wait, not a failure
                break
            if stats.watermark >= target:
                self._settled = target
                break
            await asyncio.sleep(_SETTLE_POLL_S)
        return engram

    async def store(self, content: str, **fields: Any) -> dict[str, Any]:
        stored = await self._client().store(content, **fields)
        return {"id": stored.id, "sequence": stored.sequence}

    async def recall(self, query: str, **fields: Any) -> dict[str, Any]:
        found = await self._client().recall(query, **fields)
        results = [{"score": round(h.score, 4), "memory": memory_dict(h.memory)} for h in found]
        return {"results": results, "context": found.context, "degraded": list(found.degraded)}

    async def get(self, id: str) -> dict[str, Any]:
        return memory_dict(await (await self._settle()).get(id))

    async def update(self, id: str, **fields: Any) -> dict[str, Any]:
        return _written(await (await self._settle()).update(id, **fields))

    async def delete(self, id: str) -> dict[str, Any]:
        return _written(await (await self._settle()).delete(id))

    async def associate(
        self, source_id: str, target_id: str, type: str, strength: float
    ) -> dict[str, Any]:
        engram = await self._settle()
        written = await engram.associate(source_id, target_id, type, strength=strength)
        return {"sequence": written.sequence}

    async def related(self, id: str, **fields: Any) -> list[dict[str, Any]]:
        related = await (await self._settle()).related(id, **fields)
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
