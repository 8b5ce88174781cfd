"""The Redis cache, lease and rate limiter pass the coordination contracts, and degrade as
the ports say when Redis is gone: misses, allow, no lease — promptly, never an exception.

Each test gets its own key prefix on the shared Redis and deletes its keys afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from engram_platform.redis_backend import RedisCache, RedisLease, RedisLink, RedisRateLimiter
from engram_platform.settings import RedisSettings
from engram_testing.contracts.coordination import (
    CacheContract,
    LeaseContract,
    RateLimiterContract,
)

TIMEOUT_S = 0.3


def _settings(url: str, **kw: Any) -> RedisSettings:
    base: dict[str, Any] = {
        "url": url,
        "key_prefix": f"engram-test:{uuid.uuid4().hex[:12]}:",
        "socket_timeout_s": TIMEOUT_S,
    }
    base.update(kw)
    return RedisSettings.model_validate(base)


@pytest.fixture
async def link(redis_url: str) -> AsyncIterator[RedisLink]:
    link = RedisLink.open(_settings(redis_url))
    try:
        yield link
    finally:
        names = [n async for n in link.client.scan_iter(match=f"{link.prefix}*", count=500)]
        if names:
            await link.client.unlink(*names)
        await link.close()


class TestRedisCache(CacheContract):
    @pytest.fixture
    async def cache(self, link: RedisLink) -> RedisCache:
        return RedisCache(link, owns_link=False)


class TestRedisLease(LeaseContract):
    @pytest.fixture
    async def lease(self, link: RedisLink) -> RedisLease:
        return RedisLease(link)


class TestRedisRateLimiter(RateLimiterContract):
    @pytest.fixture
    async def limiter(self, link: RedisLink) -> RedisRateLimiter:
        return RedisRateLimiter(link)


async def test_every_key_is_under_the_prefix_with_a_ttl(link: RedisLink) -> None:
    cache, lease, limiter = (
        RedisCache(link, owns_link=False),
        RedisLease(link),
        RedisRateLimiter(link),
    )
    await cache.set("recall:acme:1", b"v", 30)
    await cache.set_if_absent("idem:acme:1", b"v", 60)
    await cache.delete_prefix("recall:acme:")
    await cache.delete_prefix("never:written:")
    await lease.try_acquire("consolidate:acme", "a", 30)
    await limiter.hit("acme", 5, 1)
    client = link.client
    names = sorted([n async for n in client.scan_iter(match="*", count=1000)])
    ours = [n for n in names if n.startswith(link.prefix.encode())]
    assert {n.decode()[len(link.prefix) :].split(":", 1)[0] for n in ours} == {
        "cache",
        "cache-gen",
        "lease",
        "rate",
    }
    for name in ours:
        assert await client.pttl(name) > 0, name


async def test_invalidation_is_one_command_however_many_entries(link: RedisLink) -> None:
    cache = RedisCache(link, owns_link=False)
    for i in range(300):
        await cache.set(f"recall:acme:{i}", b"v", 30)
    keys_before = await link.client.dbsize()
    await cache.delete_prefix("recall:acme:")
    assert all([await cache.get(f"recall:acme:{i}") is None for i in range(300)])
    # Nothing was deleted: the entries are unreachable and expire on their own.
    assert await link.client.dbsize() == keys_before


async def test_replicas_sharing_redis_share_invalidation(redis_url: str, link: RedisLink) -> None:
    other = RedisLink(link.client, _settings(redis_url, key_prefix=link.prefix))
    a, b = RedisCache(link, owns_link=False), RedisCache(other, owns_link=False)
    await a.set("recall:acme:1", b"v", 30)
    assert await b.get("recall:acme:1") == b"v"
    await b.delete_prefix("recall:acme:")
    assert await a.get("recall:acme:1") is None


# --- Redis gone -------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (kernel backlog) but never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


async def _timed(call: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    started = time.monotonic()
    result = await call()
    return result, time.monotonic() - started


async def _assert_degraded(link: RedisLink, within_s: float) -> None:
    cache, lease, limiter = (
        RedisCache(link, owns_link=False),
        RedisLease(link),
        RedisRateLimiter(link),
    )
    checks: list[tuple[str, Callable[[], Awaitable[Any]], Any]] = [
        ("get", lambda: cache.get("recall:acme:1"), None),
        ("set", lambda: cache.set("recall:acme:1", b"v", 30), None),
        ("set_if_absent", lambda: cache.set_if_absent("idem:acme:1", b"v", 30), None),
        ("delete_prefix", lambda: cache.delete_prefix("recall:acme:"), None),
        ("delete_prefix scan", lambda: cache.delete_prefix("recall:ac"), None),
        ("try_acquire", lambda: lease.try_acquire("consolidate:acme", "a", 30), False),
        ("renew", lambda: lease.renew("consolidate:acme", "a", 30), False),
        ("release", lambda: lease.release("consolidate:acme", "a"), None),
        ("holder", lambda: lease.holder("consolidate:acme"), None),
    ]
    for what, call, expected in checks:
        result, took = await _timed(call)
        assert result == expected, what
        assert took < within_s, f"{what} took {took:.3f}s"
    decision, took = await _timed(lambda: limiter.hit("acme", 1, 1))
    assert decision.allowed
    assert took < within_s


@pytest.mark.parametrize("down_retry_s", [0.0, 1.0])
async def test_refused_connection_degrades_at_once(down_retry_s: float) -> None:
    link = RedisLink.open(
        _settings(f"redis://127.0.0.1:{_closed_port()}/0", down_retry_s=down_retry_s)
    )
    try:
        await _assert_degraded(link, within_s=TIMEOUT_S)
    finally:
        await link.close()


async def test_silent_server_degrades_within_the_socket_timeout(silent_port: int) -> None:
    link = RedisLink.open(_settings(f"redis://127.0.0.1:{silent_port}/0", down_retry_s=5.0))
    try:
        miss, took = await _timed(lambda: RedisCache(link, owns_link=False).get("recall:a:1"))
        assert miss is None
        assert took < TIMEOUT_S + 0.2, f"first call took {took:.3f}s"
        # Then Redis is skipped for down_retry_s: no call waits for the timeout again.
        await _assert_degraded(link, within_s=0.05)
    finally:
        await link.close()


async def test_silent_server_every_call_bounded_when_not_skipping(silent_port: int) -> None:
    link = RedisLink.open(_settings(f"redis://127.0.0.1:{silent_port}/0", down_retry_s=0.0))
    try:
        await _assert_degraded(link, within_s=TIMEOUT_S + 0.2)
    finally:
        await link.close()


async def test_down_is_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    link = RedisLink.open(
        _settings(f"redis://127.0.0.1:{_closed_port()}/0", down_retry_s=0.0, log_interval_s=60)
    )
    cache = RedisCache(link, owns_link=False)
    try:
        with caplog.at_level(logging.WARNING, logger="engram_platform.redis_backend"):
            for _ in range(20):
                assert await cache.get("recall:acme:1") is None
        assert len(caplog.records) == 1
        assert "cache misses" in caplog.records[0].getMessage()
    finally:
        await link.close()


@pytest.fixture
def own_redis() -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Starts a private redis-server on a free port (so it can be stopped and started)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (Debian package redis-server)")
    port = _closed_port()
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(proc)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return proc
            except OSError:
                time.sleep(0.02)
        pytest.fail(f"private redis-server on port {port} did not start")

    start.port = port  # type: ignore[attr-defined]
    yield start
    for proc in started:
        proc.terminate()
        proc.wait(5)


async def test_recovers_when_redis_comes_back(
    own_redis: Callable[[], subprocess.Popen[bytes]],
) -> None:
    proc = own_redis()
    port = own_redis.port  # type: ignore[attr-defined]
    link = RedisLink.open(_settings(f"redis://127.0.0.1:{port}/0", down_retry_s=0.1))
    cache, lease = RedisCache(link, owns_link=False), RedisLease(link)
    try:
        await cache.set("recall:acme:1", b"v", 30)
        assert await cache.get("recall:acme:1") == b"v"
        assert await lease.try_acquire("l", "a", 30)
        proc.terminate()
        proc.wait(5)
        assert await cache.get("recall:acme:1") is None  # pooled connection is dead: a miss
        assert not await lease.renew("l", "a", 30)  # fail closed: the holder must stop
        own_redis()  # a fresh, empty Redis on the same port
        await asyncio.sleep(0.15)  # past down_retry_s
        await cache.set("recall:acme:1", b"w", 30)
        assert await cache.get("recall:acme:1") == b"w"
        assert await lease.try_acquire("l", "b", 30)
    finally:
        await link.close()
