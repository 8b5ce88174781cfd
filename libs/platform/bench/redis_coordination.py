"""Latency of the coordination adapters: in-process twins vs Redis, one call at a time.

    uv run python libs/platform/bench/redis_coordination.py --url redis://127.0.0.1:6379/0

Prints p50/p99 per operation (µs) and the cost of invalidating a tenant with many entries
(generation bump vs SCAN + UNLINK). Uses its own key prefix and deletes it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from engram_core.ports import Cache, Lease, RateLimiter
from engram_platform.cache import MemoryCache
from engram_platform.coordination import MemoryLease, MemoryRateLimiter
from engram_platform.redis_backend import RedisCache, RedisLease, RedisLink, RedisRateLimiter
from engram_platform.settings import RedisSettings


async def _time(n: int, op: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    for i in range(min(n, 200)):  # warm up: connections, script cache
        await op(i)
    took = []
    for i in range(n):
        started = time.perf_counter()
        await op(i)
        took.append((time.perf_counter() - started) * 1e6)
    q = statistics.quantiles(took, n=100)
    return q[49], q[98]


async def _measure(
    backend: str, cache: Cache, lease: Lease, limiter: RateLimiter, n: int
) -> list[tuple[str, str, tuple[float, float]]]:
    value = b"x" * 1024
    ops: list[tuple[str, Callable[[int], Awaitable[Any]]]] = [
        ("cache set 1 KiB", lambda i: cache.set(f"recall:acme:{i}", value, 60)),
        ("cache get (hit)", lambda i: cache.get(f"recall:acme:{i}")),
        ("cache get (miss)", lambda i: cache.get(f"recall:acme:x{i}")),
        ("cache set_if_absent", lambda i: cache.set_if_absent(f"idem:acme:{i}", b"id", 60)),
        ("cache delete_prefix (namespace)", lambda i: cache.delete_prefix("recall:acme:")),
        ("lease try_acquire", lambda i: lease.try_acquire("l", "a", 30)),
        ("rate limiter hit", lambda i: limiter.hit("acme", 10**9, 1)),
    ]
    return [(backend, name, await _time(n, op)) for name, op in ops]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("-n", type=int, default=5000, help="calls per operation")
    parser.add_argument("--entries", type=int, default=20_000, help="entries of one tenant")
    args = parser.parse_args()
    prefix = f"engram-bench:{uuid.uuid4().hex[:8]}:"
    link = RedisLink.open(RedisSettings(url=args.url, key_prefix=prefix))
    value = b"x" * 1024
    rows: list[tuple[str, str, tuple[float, float]]] = []
    try:
        rows += await _measure("memory", MemoryCache(), MemoryLease(), MemoryRateLimiter(), args.n)
        rows += await _measure(
            "redis",
            RedisCache(link, owns_link=False),
            RedisLease(link),
            RedisRateLimiter(link),
            args.n,
        )
        raw = link.client
        await raw.set(prefix + "raw", value, px=60_000)
        rows.append(
            (
                "redis",
                "plain GET (redis-py, baseline)",
                await _time(args.n, lambda i: raw.get(prefix + "raw")),
            )
        )
        for backend, op, (p50, p99) in rows:
            print(f"{backend:7} {op:34} p50 {p50:8.1f} µs   p99 {p99:8.1f} µs")

        cache = RedisCache(link, owns_link=False)
        pipe = raw.pipeline(transaction=False)
        for i in range(args.entries):
            pipe.set(f"{prefix}cache:scan:acme:{i}", value, px=60_000)
        await pipe.execute()
        for i in range(200):
            await cache.set(f"big:acme:{i}", value, 60)
        started = time.perf_counter()
        await cache.delete_prefix("big:acme:")
        bump = time.perf_counter() - started
        started = time.perf_counter()
        await cache.delete_prefix("scan:acme")  # no trailing ':' → SCAN + UNLINK
        scan = time.perf_counter() - started
        print(
            f"invalidate one tenant: generation bump {bump * 1e3:.2f} ms (any size); "
            f"SCAN+UNLINK of {args.entries} entries {scan * 1e3:.1f} ms"
        )
    finally:
        names = [n async for n in link.client.scan_iter(match=f"{prefix}*", count=1000)]
        for i in range(0, len(names), 1000):
            await link.client.unlink(*names[i : i + 1000])
        await link.close()


if __name__ == "__main__":
    asyncio.run(main())
