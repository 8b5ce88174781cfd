"""In-process twins of the Lease and RateLimiter ports (the embedded stack: one process),
and the factory that builds cache, lease and limiter from CacheSettings.

They follow the Redis adapters' rules exactly — a try_acquire by the current holder restarts
its TTL, a refused hit still counts, a window starts at its first hit — so the shared
contract suite holds for both. Time is ``time.monotonic``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from engram_core.ports import Cache, Lease, RateDecision, RateLimiter
from engram_platform.cache import MemoryCache
from engram_platform.redis_backend import RedisCache, RedisLease, RedisLink, RedisRateLimiter
from engram_platform.settings import CacheSettings

# Expired entries are swept once the table grows past this, so idle keys do not pile up.
_SWEEP_AT = 10_000


class MemoryLease:
    def __init__(self) -> None:
        self._held: dict[str, tuple[str, float]] = {}  # name -> (holder, expires)

    def _current(self, name: str) -> str | None:
        item = self._held.get(name)
        if item is None:
            return None
        if item[1] <= time.monotonic():
            del self._held[name]
            return None
        return item[0]

    async def try_acquire(self, name: str, holder: str, ttl_s: float) -> bool:
        current = self._current(name)
        if current is not None and current != holder:
            return False
        self._held[name] = (holder, time.monotonic() + ttl_s)
        return True

    async def renew(self, name: str, holder: str, ttl_s: float) -> bool:
        if self._current(name) != holder:
            return False
        self._held[name] = (holder, time.monotonic() + ttl_s)
        return True

    async def release(self, name: str, holder: str) -> None:
        if self._current(name) == holder:
            del self._held[name]

    async def holder(self, name: str) -> str | None:
        return self._current(name)


class MemoryRateLimiter:
    """Fixed windows that start at a key's first hit, like RedisRateLimiter."""

    def __init__(self) -> None:
        self._windows: dict[str, tuple[int, float]] = {}  # key -> (hits, window end)

    async def hit(self, key: str, limit: int, window_s: float, cost: int = 1) -> RateDecision:
        now = time.monotonic()
        hits, end = self._windows.get(key, (0, 0.0))
        if end <= now:
            if len(self._windows) >= _SWEEP_AT:
                self._sweep(now)
            hits, end = 0, now + window_s
        hits += cost
        self._windows[key] = (hits, end)
        if hits <= limit:
            return RateDecision(allowed=True)
        return RateDecision(allowed=False, retry_after_s=end - now)

    def _sweep(self, now: float) -> None:
        for key in [k for k, (_, end) in self._windows.items() if end <= now]:
            del self._windows[key]


@dataclass(frozen=True, slots=True)
class Coordination:
    """Cache, lease and rate limiter of one process, on one backend (one Redis pool)."""

    cache: Cache
    lease: Lease
    limiter: RateLimiter
    closer: Callable[[], Awaitable[None]]

    async def close(self) -> None:
        await self.cache.close()
        await self.closer()


async def _nothing() -> None:
    return None


def open_coordination(settings: CacheSettings, *, max_entries: int) -> Coordination:
    """All three from settings; `max_entries` bounds the in-process cache. No I/O yet."""
    if settings.backend == "memory":
        return Coordination(MemoryCache(max_entries), MemoryLease(), MemoryRateLimiter(), _nothing)
    link = RedisLink.open(settings.redis)
    return Coordination(
        RedisCache(link, owns_link=False), RedisLease(link), RedisRateLimiter(link), link.close
    )


def open_cache(settings: CacheSettings, *, max_entries: int) -> Cache:
    """Just a cache (closing it closes its Redis pool, if any). No I/O yet."""
    if settings.backend == "memory":
        return MemoryCache(max_entries)
    return RedisCache(RedisLink.open(settings.redis))
