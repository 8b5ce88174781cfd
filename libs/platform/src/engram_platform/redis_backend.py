"""Redis behind the Cache, Lease and RateLimiter ports (redis-py asyncio).

Key layout, all under ``RedisSettings.key_prefix`` (``P``, default ``engram:``):

==============================  ===========================================  ====================
key                             value                                        TTL
==============================  ===========================================  ====================
``P cache:<key>``               ``<stamp>|<bytes>`` (stamp: see RedisCache)  the caller's ttl_s
``P cache-gen:<namespace>``     random token of the namespace's generation   >= every entry below
``P lease:<name>``              the holder                                   the lease's ttl_s
``P rate:<key>``                hits in the current window                   what is left of it
==============================  ===========================================  ====================

Every key carries a TTL; nothing here lives forever. Multi-key scripts name all their keys,
but a cache entry and its namespaces hash to different slots: this is for one Redis primary
(with replicas or Sentinel), not Redis Cluster.

When Redis does not answer (refused, reset, slower than ``socket_timeout_s``) every call
returns what the port says a down backend means — cache get is a miss, set a no-op, the rate
limiter allows, a lease is not granted — never an exception. After a failure, calls skip
Redis for ``down_retry_s`` so a dead Redis costs one timeout per interval rather than one per
request; the failure is logged at most once per ``log_interval_s``, the recovery once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis import exceptions as rx
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from engram_core.ports import RateDecision
from engram_platform.cache import decode_int
from engram_platform.settings import RedisSettings

log = logging.getLogger(__name__)
T = TypeVar("T")
# What "Redis is down" looks like; anything else (a script error, WRONGTYPE) is a bug that
# still must not reach the caller, but does not make the adapters skip Redis.
_DOWN = (rx.ConnectionError, rx.TimeoutError, TimeoutError, OSError)
_SCAN_BATCH = 500


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


class RedisLink:
    """One client (and connection pool) shared by the adapters of a process, and the one
    place that turns a failing Redis into the ports' down-behaviour."""

    def __init__(
        self,
        client: Redis,
        settings: RedisSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.prefix = settings.key_prefix
        self._where = settings.url
        # A backstop over the socket timeouts: connect, read and waiting for a pooled
        # connection are each bounded by socket_timeout_s.
        self._timeout = 3 * settings.socket_timeout_s
        self._retry_after = settings.down_retry_s
        self._log_every = settings.log_interval_s
        self._clock = clock
        self._skip_until = -math.inf
        self._logged_at = -math.inf
        self._unlogged = 0
        self._failing = False

    @classmethod
    def open(cls, settings: RedisSettings) -> RedisLink:
        """A link to settings.url; no I/O until the first call."""
        kwargs: dict[str, Any] = {}
        if settings.password_file is not None:
            kwargs["password"] = settings.password_file.read_text(encoding="utf-8").strip()
        pool = BlockingConnectionPool.from_url(
            settings.url,
            max_connections=settings.max_connections,
            timeout=settings.socket_timeout_s,
            socket_timeout=settings.socket_timeout_s,
            socket_connect_timeout=settings.socket_timeout_s,
            # One immediate reconnect for a pooled connection Redis closed (restart, idle
            # timeout); a timeout is not retried: it already cost socket_timeout_s.
            retry=Retry(NoBackoff(), 1, (rx.ConnectionError,)),
            **kwargs,
        )
        return cls(Redis.from_pool(pool), settings)

    async def run(
        self, what: str, call: Callable[[], Awaitable[T]], *, bounded: bool = True
    ) -> T | None:
        """The call's result, or None when Redis failed (or is being skipped after a failure).

        `bounded=False` drops the whole-call backstop for calls of many commands (a SCAN),
        each of which is still bounded by the socket timeout.
        """
        if self._clock() < self._skip_until:
            return None
        try:
            async with asyncio.timeout(self._timeout if bounded else None):
                result = await call()
        except _DOWN as exc:
            self._skip_until = self._clock() + self._retry_after
            self._report(what, exc, down=True)
            return None
        except rx.RedisError as exc:
            self._report(what, exc, down=False)
            return None
        if self._failing:
            self._failing = False
            log.info("redis at %s answers again", self._where)
        return result

    def _report(self, what: str, exc: Exception, *, down: bool) -> None:
        self._failing = self._failing or down
        now = self._clock()
        if now - self._logged_at < self._log_every:
            self._unlogged += 1
            return
        consequence = (
            "cache misses, rate limits allow, leases are not granted until it answers"
            if down
            else "treated as a miss / allow / no lease"
        )
        log.warning(
            "redis at %s failed on %s (%s: %s); %s [%d more failures since the last report]",
            self._where,
            what,
            type(exc).__name__,
            exc,
            consequence,
            self._unlogged,
        )
        self._logged_at = now
        self._unlogged = 0

    async def close(self) -> None:
        await self.client.aclose()


# --- cache ------------------------------------------------------------------------------

# KEYS: the entry, then the generation key of each namespace of its key (outermost first).
# Entries carry the generations they were written under; any change is a miss.
_CACHE_GET = """
local stamp = ''
for i = 2, #KEYS do
  local g = redis.call('GET', KEYS[i])
  if not g then return false end
  stamp = stamp .. g .. '.'
end
stamp = stamp .. '|'
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #stamp) ~= stamp then return false end
return string.sub(v, #stamp + 1)
"""

# ARGV: value, ttl in ms, a fresh token for a namespace without a generation yet, and a
# mode: 'nx' keeps (and returns) a current entry; 'max' keeps a current entry holding a
# number ≥ the value (its TTL only lengthened) and returns the number kept. A namespace's
# generation key is made to outlive every entry written under it, so when it expires
# nothing of it is left.
_CACHE_SET = """
local ttl = tonumber(ARGV[2])
local stamp = ''
for i = 2, #KEYS do
  local g = redis.call('GET', KEYS[i])
  if g then
    redis.call('PEXPIRE', KEYS[i], ttl, 'GT')
  else
    g = ARGV[3] .. i
    redis.call('SET', KEYS[i], g, 'PX', ttl)
  end
  stamp = stamp .. g .. '.'
end
stamp = stamp .. '|'
if ARGV[4] == 'nx' then
  local v = redis.call('GET', KEYS[1])
  if v and string.sub(v, 1, #stamp) == stamp then return string.sub(v, #stamp + 1) end
elseif ARGV[4] == 'max' then
  local v = redis.call('GET', KEYS[1])
  if v and string.sub(v, 1, #stamp) == stamp then
    local held = tonumber(string.sub(v, #stamp + 1))
    if held and held >= tonumber(ARGV[1]) then
      redis.call('PEXPIRE', KEYS[1], ttl, 'GT')
      return string.sub(v, #stamp + 1)
    end
  end
  redis.call('SET', KEYS[1], stamp .. ARGV[1], 'PX', ttl)
  return ARGV[1]
end
redis.call('SET', KEYS[1], stamp .. ARGV[1], 'PX', ttl)
return false
"""


def namespaces(key: str) -> list[str]:
    """Every prefix of `key` that ends with ':' ("recall:", "recall:acme:"), outermost first."""
    return [key[: i + 1] for i, ch in enumerate(key) if ch == ":"]


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "\\*?[]" else ch for ch in text)


class RedisCache:
    """The Cache port on Redis: GET / SET PX in one script each, O(1) prefix invalidation.

    ``delete_prefix`` of a prefix ending with ':' (a namespace, e.g. ``recall:acme:``, a
    tenant's recall answers) does not find and delete keys: every namespace has a
    generation — a random token in ``cache-gen:<namespace>`` — and an entry is stored with
    the generations of all namespaces of its key. Invalidation replaces the token
    (``SET … XX KEEPTTL``, one command however many entries the tenant has); entries of the
    old generation are misses from then on and expire with their own TTL. A generation key
    is created with the first entry under it and its TTL is pushed out (``PEXPIRE … GT``)
    to cover every entry written since, so once it has expired no entry of it is left, and
    a token is never reused (random), so no old entry can come back. Any other prefix falls
    back to SCAN + UNLINK, O(keys under the prefix).
    """

    def __init__(self, link: RedisLink, *, owns_link: bool = True) -> None:
        self._link = link
        self._owns = owns_link
        self._entry = f"{link.prefix}cache:"
        self._gen = f"{link.prefix}cache-gen:"
        self._get = link.client.register_script(_CACHE_GET)
        self._set = link.client.register_script(_CACHE_SET)

    def _keys(self, key: str) -> list[str]:
        return [self._entry + key, *(self._gen + ns for ns in namespaces(key))]

    async def get(self, key: str) -> bytes | None:
        found = await self._link.run("cache get", lambda: self._get(keys=self._keys(key)))
        return bytes(found) if found is not None else None

    async def _store(self, key: str, value: bytes, ttl_s: float, mode: str) -> Any:
        args: list[bytes | int | str] = [value, _ms(ttl_s), secrets.token_hex(8), mode]
        return await self._link.run(
            f"cache {mode}", lambda: self._set(keys=self._keys(key), args=args)
        )

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._store(key, value, ttl_s, "set")

    async def set_if_absent(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        held = await self._store(key, value, ttl_s, "nx")
        return bytes(held) if held is not None else None

    async def set_max(self, key: str, value: int, ttl_s: float) -> int:
        held = decode_int(await self._store(key, str(value).encode(), ttl_s, "max"))
        return value if held is None else held

    async def delete_prefix(self, prefix: str) -> None:
        if prefix.endswith(":"):
            token = secrets.token_hex(8)
            gen = self._gen + prefix
            # Only an existing generation can have entries; XX leaves a missing one missing.
            await self._link.run(
                "cache invalidate",
                lambda: self._link.client.set(gen, token, xx=True, keepttl=True),
            )
            return
        await self._link.run("cache delete", lambda: self._scan_unlink(prefix), bounded=False)

    async def _scan_unlink(self, prefix: str) -> None:
        client = self._link.client
        batch: list[bytes] = []
        async for name in client.scan_iter(
            match=self._entry + _glob_escape(prefix) + "*", count=_SCAN_BATCH
        ):
            batch.append(name)
            if len(batch) >= _SCAN_BATCH:
                await client.unlink(*batch)
                batch.clear()
        if batch:
            await client.unlink(*batch)

    async def close(self) -> None:
        if self._owns:
            await self._link.close()


# --- lease ------------------------------------------------------------------------------

_LEASE_ACQUIRE = """
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

_LEASE_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_LEASE_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLease:
    """The Lease port: the holder's name under ``lease:<name>`` with the lease's TTL; take,
    renew and release compare the holder and act in one script, so they are atomic."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._key = f"{link.prefix}lease:"
        client = link.client
        self._acquire = client.register_script(_LEASE_ACQUIRE)
        self._renew = client.register_script(_LEASE_RENEW)
        self._release = client.register_script(_LEASE_RELEASE)

    async def _call(self, what: str, script: Any, name: str, args: Sequence[Any]) -> bool:
        done = await self._link.run(what, lambda: script(keys=[self._key + name], args=args))
        return bool(done)  # None (Redis down) is no lease: fail closed

    async def try_acquire(self, name: str, holder: str, ttl_s: float) -> bool:
        return await self._call("lease acquire", self._acquire, name, [holder, _ms(ttl_s)])

    async def renew(self, name: str, holder: str, ttl_s: float) -> bool:
        return await self._call("lease renew", self._renew, name, [holder, _ms(ttl_s)])

    async def release(self, name: str, holder: str) -> None:
        await self._call("lease release", self._release, name, [holder])

    async def holder(self, name: str) -> str | None:
        key = self._key + name
        value = await self._link.run("lease holder", lambda: self._link.client.get(key))
        return value.decode("utf-8") if isinstance(value, bytes) else None


# --- rate limiter -----------------------------------------------------------------------

# A fixed window that starts at the key's first hit: INCRBY the cost, and PEXPIRE when the
# counter is new (or lost its TTL somehow, so it can never stick). Returns the count and the
# window's remaining ms.
_RATE_HIT = """
local n = redis.call('INCRBY', KEYS[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if n == tonumber(ARGV[2]) or ttl < 0 then
  ttl = tonumber(ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {n, ttl}
"""


class RedisRateLimiter:
    """The RateLimiter port: one counter per key and window (``rate:<key>``), INCR and
    PEXPIRE in one script. Across a window boundary up to 2 × limit hits can pass within
    one window's length — the price of one key and one round trip per hit."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._key = f"{link.prefix}rate:"
        self._hit = link.client.register_script(_RATE_HIT)

    async def hit(self, key: str, limit: int, window_s: float, cost: int = 1) -> RateDecision:
        reply = await self._link.run(
            "rate limit",
            lambda: self._hit(keys=[self._key + key], args=[_ms(window_s), cost]),
        )
        if reply is None:  # Redis down: fail open
            return RateDecision(allowed=True)
        hits, ttl_ms = int(reply[0]), int(reply[1])
        if hits <= limit:
            return RateDecision(allowed=True)
        return RateDecision(allowed=False, retry_after_s=max(ttl_ms, 1) / 1000.0)
