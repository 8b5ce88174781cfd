"""The applied watermark, read at most once per interval however many requests ask, and
the read-your-writes wait on it.

``get`` and ``wait_for`` read the log (for ``min_sequence``); ``known`` never waits on it,
for reads that only label what they computed.

The watermark is the ingest consumer's ack floor: one position for the whole log, so any
tenant's backlog holds it. A tenant's wait therefore also asks the log whether that
tenant's own events up to the sequence are decided (``decided``), and passes as soon as
they are; what it learned is kept per tenant, also when a poll got only part of the way
(a walk looks up a bounded number of events), so the next poll or wait starts from there.

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
from typing import TypeVar

from engram_core.errors import DeadlineExceeded, InvalidArgument, Unavailable
from engram_gateway.service.deadline import Deadline

T = TypeVar("T")
# (tenant, after, until) -> how far from after (at most until) every event of the tenant
# is decided
TenantDecided = Callable[[str, int, int], Awaitable[int]]
# tenant -> the sequence of its newest write
TenantLast = Callable[[str], Awaitable[int]]
# Tenants whose positions are remembered; the least recent are forgotten first.
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

    async def wait_for(
        self, sequence: int, deadline: Deadline, poll_s: float, tenant: str = ""
    ) -> int:
        """Return once ``tenant``'s events up to ``sequence`` are decided (the watermark
        reaching it says so for every tenant): the position the tenant is known to be
        applied at. DeadlineExceeded naming it otherwise."""
        seen = 0
        while True:
            # The log may come back before the deadline: a failed read just polls again.
            seen = max(seen, await _within(deadline, self.get(), 0))
            if seen >= sequence:
                return seen
            if tenant:
                covers = self._tenant_covers(tenant, seen, sequence)
                if await _within(deadline, covers, False):
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
        through = await self._decided(tenant, after, sequence) if after < sequence else sequence
        if through > after:
            _remember(self._tenants, tenant, through)
        return through >= sequence

    async def check_issued(self, tenant: str, sequence: int, deadline: Deadline) -> None:
        """InvalidArgument when ``sequence`` is beyond the tenant's newest write; when the
        log does not answer in time the wait itself will say so by its deadline."""
        if self._tenant_last is None or sequence <= self._issued.get(tenant, 0):
            return
        last = await _within(deadline, self._tenant_last(tenant), None)
        if last is None:
            return
        _remember(self._issued, tenant, last)
        if sequence > last:
            raise InvalidArgument(
                "min_sequence", f"{sequence} is beyond this tenant's newest write"
            )


async def _within(deadline: Deadline, read: Awaitable[T], failed: T) -> T:
    """``read``'s answer, or ``failed`` when the log fails or hangs past the deadline."""
    with contextlib.suppress(Unavailable, TimeoutError):
        async with asyncio.timeout(max(deadline.remaining(), 0.0)):
            return await read
    return failed


def _remember(known: OrderedDict[str, int], tenant: str, sequence: int) -> None:
    """Keep the highest sequence seen for the tenant, forgetting the least recent tenants."""
    known[tenant] = max(sequence, known.get(tenant, 0))
    known.move_to_end(tenant)
    while len(known) > MAX_TENANTS:
        known.popitem(last=False)


def _consume(read: asyncio.Future[int]) -> None:
    """A background read's failure is only a stale value: retrieve it so none is logged
    as never retrieved (the next stale ``known`` or ``get`` reads again)."""
    if not read.cancelled():
        read.exception()
