"""How many recalls one gateway process works on at once, and who goes next.

With more recalls in flight than the backends can serve, every one of them slows down,
the steps with a capped budget (context, relations, state) run out of time, and answers
come back degraded (under a flood, most answers lacked a step).
So a gateway works on at most ``limit`` recalls at once. The others wait their turn, each
no longer than its deadline allows (then DEADLINE_EXCEEDED). A tenant with ``tenant_queue``
recalls waiting already, or a gateway with ``queue`` waiting in all, refuses a new one at
once with RESOURCE_EXHAUSTED and a retry hint, so its client can back off or go to another
replica rather than wait behind a long line. The per-tenant bound keeps one tenant's flood
from filling the whole queue: the others still get in.

Turns go round the tenants: a freed slot goes to the tenant after the last one served, and
within a tenant in arrival order. So one tenant sending a flood of recalls makes the others
wait for at most one of its recalls each, not for the whole flood.

While more than one tenant has recalls in progress or waiting, each holds at most its share
of the slots, ``ceil(limit / tenants)`` (``tenant_share``): a slot one tenant cannot use
stays free rather than going to the flooding one, so the other's recall shares the backends
with fewer of the flood's. A tenant alone still gets every slot.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from engram_core.errors import DeadlineExceeded, ResourceExhausted
from engram_gateway.service import metrics
from engram_gateway.service.deadline import Deadline

# The retry hint before any turn has been timed, and how fast the timing follows changes.
_FIRST_TURN_S = 0.1
_TURN_WEIGHT = 0.2


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    limit: int = 8  # recalls worked on at once; 0 = no limit
    queue: int = 256  # recalls that may wait for a turn, over all tenants
    tenant_queue: int = 32  # recalls one tenant may have waiting
    tenant_label: bool = False  # refusals counted per tenant (a label per tenant: opt in)
    tenant_share: bool = True  # with several tenants, each holds at most its share of limit

    def __post_init__(self) -> None:
        if self.limit < 0 or self.queue < 0 or self.tenant_queue < 0:
            raise ValueError(f"bad admission settings: {self}")


class Admission:
    def __init__(self, config: AdmissionConfig) -> None:
        self._config = config
        self._busy = 0
        self._held: dict[str, int] = {}  # slots each tenant holds now
        # Each tenant's waiters in arrival order; the dict's order is the round of tenants.
        self._queues: dict[str, deque[asyncio.Future[None]]] = {}
        self._waiting = 0
        self._turn_s = _FIRST_TURN_S  # moving average of how long a turn is held

    @property
    def waiting(self) -> int:
        return self._waiting

    @asynccontextmanager
    async def turn(self, tenant: str, deadline: Deadline) -> AsyncIterator[float]:
        """Hold one of the slots for the block; yields the seconds spent waiting for it."""
        if not self._config.limit:
            yield 0.0
            return
        started = time.monotonic()
        if self._busy < self._config.limit and self._may_enter(tenant):
            self._take(tenant)
        else:
            await self._wait(tenant, deadline, started)
        entered = time.monotonic()
        try:
            yield entered - started
        finally:
            held = time.monotonic() - entered
            self._turn_s += _TURN_WEIGHT * (held - self._turn_s)
            self._release(tenant)

    def retry_after_s(self) -> float:
        """About when a refused recall would get in: a slot frees every turn / limit seconds
        and the round serves every waiting tenant once before the same tenant again."""
        return self._turn_s * max(1, len(self._queues)) / max(1, self._config.limit)

    def _refuse_when_full(self, tenant: str) -> None:
        cfg = self._config
        mine = len(self._queues.get(tenant, ()))
        if mine >= cfg.tenant_queue:
            why = f"tenant {tenant!r} already has {mine} recalls waiting for a turn"
            reason = "tenant_queue"
        elif self._waiting >= cfg.queue:
            why = (
                f"this gateway already has {self._waiting} recalls waiting behind the "
                f"{cfg.limit} it is working on"
            )
            reason = "queue"
        else:
            return
        metrics.rejected(reason, tenant, cfg.tenant_label)
        retry = self.retry_after_s()
        raise ResourceExhausted(f"{why}; retry after {retry:.3f}s", retry_after_s=retry)

    async def _wait(self, tenant: str, deadline: Deadline, started: float) -> None:
        """Until a releasing turn hands its slot over (``_busy`` stays counted for it)."""
        self._refuse_when_full(tenant)
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(tenant, deque()).append(handed)
        self._waiting += 1
        try:
            async with asyncio.timeout(max(0.0, deadline.remaining())):
                await handed
        except BaseException as exc:  # the deadline, or the caller went away
            self._leave(tenant, handed)
            if isinstance(exc, TimeoutError):
                metrics.rejected("deadline", tenant, self._config.tenant_label)
                raise DeadlineExceeded(
                    f"the deadline passed after {time.monotonic() - started:.3f}s waiting for "
                    f"a turn ({self._config.limit} recalls in progress)"
                ) from None
            raise

    def _leave(self, tenant: str, handed: asyncio.Future[None]) -> None:
        """A waiter gives up: out of its queue, or, if the slot reached it meanwhile, the slot
        goes on to the next one."""
        if handed.done() and not handed.cancelled():
            self._release(tenant)
            return
        queue = self._queues.get(tenant)
        if queue is not None and handed in queue:
            queue.remove(handed)
            self._waiting -= 1
            if not queue:
                del self._queues[tenant]
                self._hand_over()  # one tenant fewer: the others' shares may have grown

    def _share(self, newcomer: str = "") -> int:
        """The slots one tenant may hold while the tenants holding or waiting (and a
        newcomer, counted among them) contend."""
        limit = self._config.limit
        if not self._config.tenant_share:
            return limit
        tenants = self._held.keys() | self._queues.keys() | ({newcomer} if newcomer else set())
        return math.ceil(limit / max(1, len(tenants)))

    def _may_enter(self, tenant: str) -> bool:
        """A newcomer takes a free slot at once unless its own earlier recalls are waiting or
        it holds its share."""
        return tenant not in self._queues and self._held.get(tenant, 0) < self._share(tenant)

    def _take(self, tenant: str) -> None:
        self._busy += 1
        self._held[tenant] = self._held.get(tenant, 0) + 1

    def _release(self, tenant: str) -> None:
        self._busy -= 1
        left = self._held[tenant] - 1
        if left:
            self._held[tenant] = left
        else:
            del self._held[tenant]
        self._hand_over()

    def _hand_over(self) -> None:
        """Free slots go round the tenants below their share, each to its first waiter."""
        while self._busy < self._config.limit:
            share = self._share()
            tenant = next((t for t in self._queues if self._held.get(t, 0) < share), None)
            if tenant is None:
                return
            queue = self._queues.pop(tenant)
            handed = queue.popleft()
            self._waiting -= 1
            if queue:
                self._queues[tenant] = queue  # to the end of the round
            if not handed.done():
                self._take(tenant)
                handed.set_result(None)
