"""The applied watermark, read at most once per interval however many requests ask, and
the read-your-writes wait on it.

The watermark is the ingest consumer's ack floor: one position for the whole log, so any
tenant's backlog holds it. A tenant's wait therefore also asks the log whether that
tenant's own events up to the sequence are decided (``decided``), and passes as soon as
they are; what it learned is kept per tenant so the next wait starts from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from engram_core.errors import DeadlineExceeded, Unavailable
from engram_gateway.service.deadline import Deadline

# (tenant, after, until) -> every event of the tenant in (after, until] is decided
TenantDecided = Callable[[str, int, int], Awaitable[bool]]
# Tenants whose decided position is remembered; the oldest are forgotten first.
MAX_TENANTS = 10_000


class WatermarkCache:
    def __init__(
        self,
        read: Callable[[], Awaitable[int]],
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
        decided: TenantDecided | None = None,
    ) -> None:
        self._read = read
        self._max_age = max_age_s
        self._clock = clock
        self._decided = decided
        self._value = 0
        self._at = float("-inf")
        self._inflight: asyncio.Future[int] | None = None
        self._tenants: OrderedDict[str, int] = OrderedDict()

    async def get(self) -> int:
        if self._clock() - self._at <= self._max_age:
            return self._value
        # One read in flight at a time; concurrent callers share its answer.
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._refresh())
        return await asyncio.shield(self._inflight)

    async def _refresh(self) -> int:
        try:
            value = await self._read()
        finally:
            self._inflight = None
        # The watermark never goes back; a lagging read must not make it seem so.
        self._value = max(self._value, value)
        self._at = self._clock()
        return self._value

    async def wait_for(
        self, sequence: int, deadline: Deadline, poll_s: float, tenant: str = ""
    ) -> int:
        """Return once ``tenant``'s events up to ``sequence`` are decided (the watermark
        reaching it says so for every tenant): the position the tenant is known to be
        applied at. DeadlineExceeded naming it otherwise."""
        seen = 0
        while True:
            # The log may come back before the deadline: a failed read just polls again.
            with contextlib.suppress(Unavailable):
                seen = await self.get()
            if seen >= sequence:
                return seen
            if tenant and await self._tenant_covers(tenant, seen, sequence):
                return sequence
            left = deadline.remaining()
            if left <= 0:
                raise DeadlineExceeded(
                    f"min_sequence {sequence} not applied before the deadline (watermark {seen})"
                )
            await asyncio.sleep(min(poll_s, left))

    async def _tenant_covers(self, tenant: str, watermark: int, sequence: int) -> bool:
        if self._decided is None:
            return False
        after = max(watermark, self._tenants.get(tenant, 0))
        if after < sequence:
            try:
                if not await self._decided(tenant, after, sequence):
                    return False
            except Unavailable:
                return False
        self._tenants[tenant] = max(sequence, self._tenants.get(tenant, 0))
        self._tenants.move_to_end(tenant)
        while len(self._tenants) > MAX_TENANTS:
            self._tenants.popitem(last=False)
        return True
