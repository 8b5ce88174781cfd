"""The applied watermark, read at most once per interval however many requests ask.

``get`` and ``wait_for`` read the log (for ``min_sequence``); ``known`` never waits on it,
for reads that only label what they computed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from engram_core.errors import DeadlineExceeded, Unavailable
from engram_gateway.service.deadline import Deadline


class WatermarkCache:
    def __init__(
        self,
        read: Callable[[], Awaitable[int]],
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._max_age = max_age_s
        self._clock = clock
        self._value = 0
        self._at = float("-inf")
        self._inflight: asyncio.Future[int] | None = None

    async def get(self) -> int:
        if self._clock() - self._at <= self._max_age:
            return self._value
        # One read in flight at a time; concurrent callers share its answer.
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._refresh())
        return await asyncio.shield(self._inflight)

    def known(self) -> int:
        """The last value read (0 before any), never waiting: a stale one starts a read in
        the background for later callers. It is never ahead of the log, so an answer
        labelled with it claims no write it may lack."""
        if self._clock() - self._at > self._max_age and self._inflight is None:
            self._inflight = asyncio.ensure_future(self._refresh())
            self._inflight.add_done_callback(_consume)
        return self._value

    async def _refresh(self) -> int:
        try:
            value = await self._read()
        finally:
            self._inflight = None
        # The watermark never goes back; a lagging read must not make it seem so.
        self._value = max(self._value, value)
        self._at = self._clock()
        return self._value

    async def wait_for(self, sequence: int, deadline: Deadline, poll_s: float) -> int:
        """Return once the watermark is >= sequence; DeadlineExceeded naming it otherwise."""
        seen = 0
        while True:
            # The log may come back before the deadline: a failed read just polls again.
            left = deadline.remaining()
            with contextlib.suppress(Unavailable, TimeoutError):
                # A log that hangs must not hold the caller past the deadline.
                async with asyncio.timeout(max(left, 0.0)):
                    seen = await self.get()
            if seen >= sequence:
                return seen
            left = deadline.remaining()
            if left <= 0:
                raise DeadlineExceeded(
                    f"min_sequence {sequence} not applied before the deadline (watermark {seen})"
                )
            await asyncio.sleep(min(poll_s, left))


def _consume(read: asyncio.Future[int]) -> None:
    """A background read's failure is only a stale value: retrieve it so none is logged
    as never retrieved (the next stale ``known`` or ``get`` reads again)."""
    if not read.cancelled():
        read.exception()
