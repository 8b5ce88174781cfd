"""The caller's deadline, and the share of it each backend call may spend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from engram_core.errors import DeadlineExceeded, Unavailable

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Budget:
    fraction: float  # of the time remaining when the call starts
    cap_s: float


@dataclass(frozen=True, slots=True)
class Deadline:
    at: float  # on `clock`
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def within(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(clock() + seconds, clock)

    def remaining(self) -> float:
        return self.at - self.clock()

    def budget(self, share: Budget) -> float:
        """min(cap, fraction × remaining); DeadlineExceeded when nothing is left."""
        left = self.remaining()
        if left <= 0:
            raise DeadlineExceeded("the call's deadline has passed")
        return min(share.cap_s, share.fraction * left)

    def cap(self, seconds: float) -> float:
        return self.budget(Budget(1.0, seconds))


async def bounded(awaitable: Awaitable[T], timeout_s: float, what: str) -> T:
    """Await with a timeout; running out is DeadlineExceeded naming ``what``."""
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except TimeoutError as exc:
        raise DeadlineExceeded(f"{what} took longer than {timeout_s:.1f}s") from exc


async def answered_within(name: str, timeout: float, call: Callable[[float], Awaitable[T]]) -> T:
    """One backend call within ``timeout`` (also its RPC deadline); a hang is Unavailable."""
    try:
        async with asyncio.timeout(timeout):
            return await call(timeout)
    except TimeoutError as exc:
        raise Unavailable(f"{name} did not answer within {timeout:.2f}s") from exc
