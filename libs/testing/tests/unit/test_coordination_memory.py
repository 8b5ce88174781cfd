"""The in-process cache, lease and rate limiter pass the coordination contracts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from engram_platform.cache import MemoryCache
from engram_platform.coordination import (
    MemoryLease,
    MemoryRateLimiter,
    open_cache,
    open_coordination,
)
from engram_platform.redis_backend import RedisCache, RedisLease, RedisRateLimiter, namespaces
from engram_platform.settings import CacheSettings
from engram_testing.contracts.coordination import (
    CacheContract,
    LeaseContract,
    RateLimiterContract,
)


class TestMemoryCache(CacheContract):
    @pytest.fixture
    async def cache(self) -> AsyncIterator[MemoryCache]:
        cache = MemoryCache()
        yield cache
        await cache.close()


class TestMemoryLease(LeaseContract):
    @pytest.fixture
    async def lease(self) -> MemoryLease:
        return MemoryLease()


class TestMemoryRateLimiter(RateLimiterContract):
    @pytest.fixture
    async def limiter(self) -> MemoryRateLimiter:
        return MemoryRateLimiter()


async def test_memory_limiter_sweeps_idle_keys() -> None:
    limiter = MemoryRateLimiter()
    for i in range(10_050):
        await limiter.hit(f"k{i}", 1, 0.000_001)
    assert len(limiter._windows) < 10_050


def test_namespaces_are_every_colon_terminated_prefix() -> None:
    assert namespaces("recall:acme:abc") == ["recall:", "recall:acme:"]
    assert namespaces("bare") == []
    assert namespaces("a::b:") == ["a:", "a::", "a::b:"]


async def test_factory_builds_the_memory_backend_by_default() -> None:
    coordination = open_coordination(CacheSettings(), max_entries=5)
    assert isinstance(coordination.cache, MemoryCache)
    assert isinstance(coordination.lease, MemoryLease)
    assert isinstance(coordination.limiter, MemoryRateLimiter)
    await coordination.close()
    assert isinstance(open_cache(CacheSettings(), max_entries=5), MemoryCache)


async def test_factory_builds_redis_without_connecting() -> None:
    # Nothing listens on port 1: building must not connect (that happens on first use).
    settings = CacheSettings.model_validate(
        {"backend": "redis", "redis": {"url": "redis://127.0.0.1:1/0"}}
    )
    coordination = open_coordination(settings, max_entries=5)
    assert isinstance(coordination.cache, RedisCache)
    assert isinstance(coordination.lease, RedisLease)
    assert isinstance(coordination.limiter, RedisRateLimiter)
    await coordination.close()
    cache = open_cache(settings, max_entries=5)
    assert isinstance(cache, RedisCache)
    await cache.close()
