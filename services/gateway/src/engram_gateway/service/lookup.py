"""Reading memories by id: the vector store, and lexical for what vector cannot give.

Lexical answers when vector is down, and also for the ids vector does not hold: each store
applies the log on its own, so one that was down or is behind may not have a memory the
other has (ingest retries the store that failed). Only a memory neither holds is absent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from engram_core.errors import DeadlineExceeded, NotFound, Unavailable
from engram_core.model import Memory
from engram_gateway.service.ports import LexicalPort, VectorPort
from engram_platform.telemetry import tracer

log = logging.getLogger(__name__)
_tracer = tracer(__name__)
_DOWN = (Unavailable, DeadlineExceeded, TimeoutError)


class Lookup:
    def __init__(self, vector: VectorPort, lexical: LexicalPort) -> None:
        self._vector = vector
        self._lexical = lexical

    async def many(self, tenant: str, ids: Sequence[str], timeout: float) -> dict[str, Memory]:
        """The memories that exist among ids, by id; Unavailable when neither store answers."""
        if not ids:
            return {}
        with _tracer.start_as_current_span("engram.gateway/get") as span:
            span.set_attribute("engram.ids", len(ids))
            try:
                async with asyncio.timeout(timeout):
                    found = await self._vector.get(tenant, ids, timeout=timeout)
            except _DOWN as exc:
                log.warning("vector get failed (%s); reading from lexical", exc)
                span.set_attribute("engram.fallback", "lexical")
                try:
                    async with asyncio.timeout(timeout):
                        found = await self._lexical.get(tenant, ids, timeout=timeout)
                except _DOWN as exc2:
                    raise Unavailable(f"no store could read memories: {exc2}") from exc2
                return {m.id: m for m in found}
            by_id = {m.id: m for m in found}
            missing = [i for i in ids if i not in by_id]
            if missing:
                span.set_attribute("engram.fallback", "lexical")
                by_id |= await self._lexical_only(tenant, missing, timeout)
        return by_id

    async def _lexical_only(
        self, tenant: str, ids: Sequence[str], timeout: float
    ) -> dict[str, Memory]:
        """What lexical holds of the ids vector lacks; none when lexical is down too."""
        try:
            async with asyncio.timeout(timeout):
                found = await self._lexical.get(tenant, ids, timeout=timeout)
        except _DOWN as exc:
            log.warning("lexical get of %d ids vector lacks failed: %s", len(ids), exc)
            return {}
        return {m.id: m for m in found}

    async def one(self, tenant: str, id: str, timeout: float, what: str = "memory") -> Memory:
        found = await self.many(tenant, [id], timeout)
        if id not in found:
            raise NotFound(f"{what} {id} not found")
        return found[id]
