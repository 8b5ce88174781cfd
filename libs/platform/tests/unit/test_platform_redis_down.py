"""The Redis adapters with nothing listening: misses, allow, no lease — at once, no raise.

(The same against a silent server and a Redis that comes back is in
tests/integration/contracts/test_coordination_redis_contract.py.)
"""

from __future__ import annotations

import logging
import socket

import pytest

from engram_platform.redis_backend import RedisCache, RedisLease, RedisLink, RedisRateLimiter
from engram_platform.settings import RedisSettings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_nothing_listening_degrades_without_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = RedisSettings(
        url=f"redis://127.0.0.1:{_closed_port()}/0", socket_timeout_s=0.3, down_retry_s=0.0
    )
    link = RedisLink.open(settings)
    cache, lease, limiter = RedisCache(link), RedisLease(link), RedisRateLimiter(link)
    with caplog.at_level(logging.WARNING, logger="engram_platform.redis_backend"):
        for _ in range(3):
            assert await cache.get("recall:acme:1") is None
            await cache.set("recall:acme:1", b"v", 10)
            assert await cache.set_if_absent("idem:acme:1", b"v", 10) is None
            assert await cache.set_max("recall-written:acme", 4, 10) == 4
            await cache.delete_prefix("recall:acme:")
            await cache.delete_prefix("recall:ac")
            assert not await lease.try_acquire("l", "a", 10)
            assert not await lease.renew("l", "a", 10)
            await lease.release("l", "a")
            assert await lease.holder("l") is None
            decision = await limiter.hit("acme", 1, 1)
            assert decision.allowed
    assert len(caplog.records) == 1  # at most once per log_interval_s
    await cache.close()


async def test_failure_skips_redis_for_down_retry_s() -> None:
    now = [100.0]
    settings = RedisSettings(url=f"redis://127.0.0.1:{_closed_port()}/0", down_retry_s=5.0)
    link = RedisLink(RedisLink.open(settings).client, settings, clock=lambda: now[0])
    calls = []

    async def call() -> bytes:
        calls.append(1)
        raise ConnectionRefusedError("refused")

    assert await link.run("op", call) is None
    assert await link.run("op", call) is None  # skipped: Redis is not asked
    assert len(calls) == 1
    now[0] += 5.0
    assert await link.run("op", call) is None
    assert len(calls) == 2
    await link.close()
