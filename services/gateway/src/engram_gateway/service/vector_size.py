"""The size a client's own vector of a memory must have: the live vector generation's.

Only the vector service knows it (its live generation's model); the gateway asks it when a
write carries a vector, and keeps the answer a short while, since it changes only when a
rebuild swaps in another model. A vector checked against a size that changed meanwhile is
not lost: ingest embeds the content instead of writing a vector of another size.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from engram_core.errors import Unavailable
from engram_gateway.service.ports import VectorPort

# How long an answer is kept: a swap of the live model is rare and ingest covers the gap.
DIMENSION_TTL_S = 30.0


class LiveDimension:
    def __init__(
        self,
        vector: VectorPort,
        ttl_s: float = DIMENSION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._vector = vector
        self._ttl_s = ttl_s
        self._clock = clock
        self._value = 0
        self._until = 0.0
        self._lock = asyncio.Lock()

    async def get(self, timeout: float | None = None) -> int:
        """The live generation's vector size (Unavailable when the vector service names none)."""
        if self._value and self._clock() < self._until:
            return self._value
        async with self._lock:  # concurrent writes ask once
            if self._value and self._clock() < self._until:
                return self._value
            generations = await self._vector.list_generations(timeout)
            live = next((g for g in generations if g.live), None)
            if live is None or live.dimension <= 0:
                raise Unavailable("the vector service names no live generation with a size")
            self._value, self._until = live.dimension, self._clock() + self._ttl_s
        return self._value
