"""The applied watermark, read at most once per interval however many requests ask, and
the read-your-writes wait on it.

The watermark is the ingest consumer's ack floor: one position for the whole log, so any
tenant's backlog holds it. A tenant's wait therefore also asks the log whether that
tenant's own events up to the sequence are decided (``decided``), and passes as soon as
they are; what it learned is kept per tenant so the next wait starts from there.

A sequence beyond the tenant's own newest write (``tenant_last``) is refused at once: it
would only burn the caller's deadline. The bound is the tenant's own, not the log's end or
the watermark, so neither the answer nor its timing tells one tenant another's volume.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from engram_core.errors import DeadlineExceeded, InvalidArgument, Unavailable
from engram_gateway.service.deadline import Deadline

# (tenant, after, until) -> every event of the tenant in (after, until] is decided
TenantDecided = Callable[[str, int, int], Awaitable[bool]]
# tenant -> the sequence of its newest write
TenantLast = Callable[[str], Awaitable[int]]
# Tenants whose decided position is remembered; the oldest are forgotten first.
MAX_TENANTS = 10_000


class WatermarkCache:
    def __init__(
        self,
        read: Callable[[], Awaitable[int]],
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
        decided: TenantDecided | None = None,
        tenant_last: TenantLast | None = None,
    ) -> None:
        self._read = read
        self._max_age = max_age_s
        self._clock = clock
        self._decided = decided
        self._tenant_last = tenant_last
        self._value = 0
        self._at = float("-inf")
        self._inflight: asyncio.Future[int] | None = None
        self._tenants: OrderedDict[str, int] = OrderedDict()  # known decided up to
        self._issued: OrderedDict[str, int] = OrderedDict()  # known newest write

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
        _remember(self._tenants, tenant, sequence)
        return True

    async def check_issued(self, tenant: str, sequence: int) -> None:
        """InvalidArgument when ``sequence`` is beyond the tenant's newest write."""
        if self._tenant_last is None or sequence <= self._issued.get(tenant, 0):
            return
        try:
            last = await self._tenant_last(tenant)
        except Unavailable:
            return  # the log is down: the wait itself will say so by its deadline
        _remember(self._issued, tenant, last)
        if sequence > last:
            raise InvalidArgument(
                "min_sequence", f"{sequence} is beyond this tenant's newest write"
            )


def _remember(known: OrderedDict[str, int], tenant: str, sequence: int) -> None:
    """Keep the highest sequence seen for the tenant, forgetting the least recent tenants."""
    known[tenant] = max(sequence, known.get(tenant, 0))
    known.move_to_end(tenant)
    while len(known) > MAX_TENANTS:
        known.popitem(last=False)
