"""How many recalls one gateway process works on at once.

With more recalls in flight than the backends can serve, every one of them slows down,
the steps with a capped budget (context, relations, state) run out of time, and answers
come back degraded: on the 10k bench with 64 clients, 305 of 384 answers lacked a step.
So a gateway works on at most ``limit`` recalls at once. The others wait their turn in
arrival order, each no longer than its deadline allows (then DEADLINE_EXCEEDED), and
once ``queue`` are waiting a new one is refused at once with RESOURCE_EXHAUSTED, so its
client can back off or go to another replica rather than wait behind a long line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from engram_core.errors import DeadlineExceeded, ResourceExhausted
from engram_gateway.service.deadline import Deadline


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    limit: int = 8  # recalls worked on at once; 0 = no limit
    queue: int = 256  # recalls that may wait for a turn

    def __post_init__(self) -> None:
        if self.limit < 0 or self.queue < 0:
            raise ValueError(f"bad admission settings: {self}")


class Admission:
    def __init__(self, config: AdmissionConfig) -> None:
        self._config = config
        self._slots = asyncio.Semaphore(config.limit) if config.limit else None
        self._waiting = 0

    @property
    def waiting(self) -> int:
        return self._waiting

    @asynccontextmanager
    async def turn(self, deadline: Deadline) -> AsyncIterator[float]:
        """Hold one of the slots for the block; yields the seconds spent waiting for it."""
        if self._slots is None:
            yield 0.0
            return
        if self._slots.locked() and self._waiting >= self._config.queue:
            raise ResourceExhausted(
                f"this gateway already has {self._waiting} recalls waiting behind the "
                f"{self._config.limit} it is working on; retry with backoff"
            )
        started = time.monotonic()
        self._waiting += 1
        try:
            async with asyncio.timeout(max(0.0, deadline.remaining())):
                await self._slots.acquire()
        except TimeoutError:
            raise DeadlineExceeded(
                f"the deadline passed after {time.monotonic() - started:.3f}s waiting for a "
                f"turn ({self._config.limit} recalls in progress)"
            ) from None
        finally:
            self._waiting -= 1
        try:
            yield time.monotonic() - started
        finally:
            self._slots.release()
