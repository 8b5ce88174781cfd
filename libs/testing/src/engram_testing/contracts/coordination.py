"""The behaviour every Cache, Lease and RateLimiter adapter must show (engram_core.ports).

Subclass `CacheContract`, `LeaseContract` or `RateLimiterContract` in a ``Test*`` class and
override its fixture (``cache``, ``lease`` or ``limiter``) to yield an EMPTY store, fresh per
test. TTLs are a few hundred milliseconds, so expiry is waited for, not faked: the same test
must hold for a Redis server that keeps its own clock.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from engram_core.ports import Cache, Lease, RateLimiter

__all__ = ["SHORT_S", "CacheContract", "LeaseContract", "RateLimiterContract"]

SHORT_S = 0.2  # a TTL the tests wait out
LONG_S = 30.0  # a TTL no test outlives
_SETTLE_S = 0.15  # margin past an expiry: Redis expiry has millisecond steps


async def _wait_past(ttl_s: float) -> None:
    await asyncio.sleep(ttl_s + _SETTLE_S)


class CacheContract:
    @pytest.fixture
    async def cache(self) -> Cache:
        raise NotImplementedError("override the cache fixture to yield an empty Cache")

    async def test_missing_key_is_a_miss(self, cache: Cache) -> None:
        assert await cache.get("recall:acme:nothing") is None

    @pytest.mark.parametrize(
        "value", [b"plain", b"", b"\x00|.:\xff binary", bytes(range(256)) * 40]
    )
    async def test_value_round_trips_byte_for_byte(self, cache: Cache, value: bytes) -> None:
        await cache.set("recall:acme:k", value, LONG_S)
        assert await cache.get("recall:acme:k") == value

    async def test_set_overwrites(self, cache: Cache) -> None:
        await cache.set("recall:acme:k", b"one", LONG_S)
        await cache.set("recall:acme:k", b"two", LONG_S)
        assert await cache.get("recall:acme:k") == b"two"

    async def test_entry_expires_after_its_ttl(self, cache: Cache) -> None:
        await cache.set("recall:acme:short", b"v", SHORT_S)
        await cache.set("recall:acme:long", b"w", LONG_S)
        assert await cache.get("recall:acme:short") == b"v"
        await _wait_past(SHORT_S)
        assert await cache.get("recall:acme:short") is None
        assert await cache.get("recall:acme:long") == b"w"

    async def test_a_short_lived_entry_does_not_shorten_its_neighbours(self, cache: Cache) -> None:
        await cache.set("recall:acme:long", b"w", LONG_S)
        await cache.set("recall:acme:short", b"v", SHORT_S)
        await _wait_past(SHORT_S)
        assert await cache.get("recall:acme:long") == b"w"

    async def test_keys_without_a_namespace_work(self, cache: Cache) -> None:
        await cache.set("bare", b"v", LONG_S)
        assert await cache.get("bare") == b"v"
        assert await cache.set_if_absent("bare", b"x", LONG_S) == b"v"

    async def test_set_if_absent_stores_once_and_returns_the_holder(self, cache: Cache) -> None:
        assert await cache.set_if_absent("idem:acme:k", b"first", LONG_S) is None
        assert await cache.set_if_absent("idem:acme:k", b"second", LONG_S) == b"first"
        assert await cache.get("idem:acme:k") == b"first"

    async def test_set_if_absent_returns_an_empty_value_as_held(self, cache: Cache) -> None:
        assert await cache.set_if_absent("idem:acme:e", b"", LONG_S) is None
        assert await cache.set_if_absent("idem:acme:e", b"x", LONG_S) == b""

    async def test_set_if_absent_stores_again_after_expiry(self, cache: Cache) -> None:
        assert await cache.set_if_absent("idem:acme:k", b"first", SHORT_S) is None
        await _wait_past(SHORT_S)
        assert await cache.set_if_absent("idem:acme:k", b"second", LONG_S) is None
        assert await cache.get("idem:acme:k") == b"second"

    async def test_concurrent_set_if_absent_has_one_winner(self, cache: Cache) -> None:
        values = [f"v{i}".encode() for i in range(20)]
        held = await asyncio.gather(
            *(cache.set_if_absent("idem:acme:race", v, LONG_S) for v in values)
        )
        winners = [v for v, h in zip(values, held, strict=True) if h is None]
        assert len(winners) == 1
        assert all(h == winners[0] for h in held if h is not None)
        assert await cache.get("idem:acme:race") == winners[0]

    async def test_set_max_keeps_the_largest(self, cache: Cache) -> None:
        assert await cache.set_max("recall-written:acme", 7, LONG_S) == 7
        assert await cache.set_max("recall-written:acme", 3, LONG_S) == 7
        assert await cache.set_max("recall-written:acme", 2**40, LONG_S) == 2**40
        assert await cache.get("recall-written:acme") == str(2**40).encode()

    async def test_set_max_replaces_what_is_not_a_number(self, cache: Cache) -> None:
        await cache.set("recall-written:acme", b"\x00\x01", LONG_S)
        assert await cache.set_max("recall-written:acme", 5, LONG_S) == 5
        assert await cache.set_max("recall-written:acme", 4, LONG_S) == 5

    async def test_set_max_does_not_shorten_a_kept_value(self, cache: Cache) -> None:
        await cache.set_max("recall-written:acme", 9, LONG_S)
        assert await cache.set_max("recall-written:acme", 1, SHORT_S) == 9
        await _wait_past(SHORT_S)
        assert await cache.get("recall-written:acme") == b"9"

    async def test_set_max_starts_again_after_expiry(self, cache: Cache) -> None:
        await cache.set_max("recall-written:acme", 9, SHORT_S)
        await _wait_past(SHORT_S)
        assert await cache.set_max("recall-written:acme", 1, LONG_S) == 1

    async def test_concurrent_set_max_leaves_the_largest(self, cache: Cache) -> None:
        values = [17, 3, 42, 8, 41, 1] * 4
        await asyncio.gather(*(cache.set_max("recall-written:race", v, LONG_S) for v in values))
        assert await cache.get("recall-written:race") == b"42"

    async def _fill(self, cache: Cache, keys: list[str]) -> None:
        for k in keys:
            await cache.set(k, k.encode(), LONG_S)

    async def _alive(self, cache: Cache, keys: list[str]) -> list[str]:
        return [k for k in keys if await cache.get(k) == k.encode()]

    KEYS = [
        "recall:acme:1",
        "recall:acme:2",
        "recall:acme:deep:3",
        "recall:acme2:1",
        "recall:globex:1",
        "idem:acme:1",
        "recall",
    ]

    async def test_delete_prefix_drops_only_that_namespace(self, cache: Cache) -> None:
        await self._fill(cache, self.KEYS)
        await cache.delete_prefix("recall:acme:")
        assert await self._alive(cache, self.KEYS) == [
            "recall:acme2:1",
            "recall:globex:1",
            "idem:acme:1",
            "recall",
        ]

    async def test_delete_prefix_of_an_outer_namespace_drops_everything_under_it(
        self, cache: Cache
    ) -> None:
        await self._fill(cache, self.KEYS)
        await cache.delete_prefix("recall:")
        assert await self._alive(cache, self.KEYS) == ["idem:acme:1", "recall"]

    async def test_delete_prefix_not_ending_a_namespace(self, cache: Cache) -> None:
        await self._fill(cache, self.KEYS)
        await cache.delete_prefix("recall:acme")
        assert await self._alive(cache, self.KEYS) == ["recall:globex:1", "idem:acme:1", "recall"]

    async def test_delete_prefix_takes_glob_characters_literally(self, cache: Cache) -> None:
        keys = ["q:*a", "q:xa", "q:[a]b", "q:ab", "q:?c", "q:zc", "q:\\d", "q:d"]
        await self._fill(cache, keys)
        for prefix in ("q:*", "q:[a]", "q:?", "q:\\"):
            await cache.delete_prefix(prefix)
        assert await self._alive(cache, keys) == ["q:xa", "q:ab", "q:zc", "q:d"]

    async def test_writes_after_delete_prefix_are_seen(self, cache: Cache) -> None:
        await cache.set("recall:acme:1", b"old", LONG_S)
        await cache.delete_prefix("recall:acme:")
        assert await cache.get("recall:acme:1") is None
        assert await cache.set_if_absent("recall:acme:1", b"new", LONG_S) is None
        assert await cache.get("recall:acme:1") == b"new"
        await cache.delete_prefix("recall:acme:")
        await cache.delete_prefix("recall:acme:")  # twice in a row, nothing in between
        assert await cache.get("recall:acme:1") is None
        await cache.set("recall:acme:1", b"newer", LONG_S)
        assert await cache.get("recall:acme:1") == b"newer"

    async def test_delete_prefix_of_nothing_is_fine(self, cache: Cache) -> None:
        await cache.delete_prefix("never:seen:")
        await cache.delete_prefix("never")
        await cache.set("never:seen:1", b"v", LONG_S)
        assert await cache.get("never:seen:1") == b"v"

    async def test_invalidated_namespace_survives_its_entries_expiring(self, cache: Cache) -> None:
        # An entry written before an invalidation must not come back once the entries
        # written after it (and whatever bookkeeping they keep) have expired.
        await cache.set("recall:acme:old", b"stale", LONG_S)
        await cache.delete_prefix("recall:acme:")
        await cache.set("recall:acme:new", b"fresh", SHORT_S)
        await _wait_past(SHORT_S)
        assert await cache.get("recall:acme:old") is None
        assert await cache.get("recall:acme:new") is None


class LeaseContract:
    @pytest.fixture
    async def lease(self) -> Lease:
        raise NotImplementedError("override the lease fixture to yield an empty Lease")

    async def test_free_lease_has_no_holder(self, lease: Lease) -> None:
        assert await lease.holder("consolidate:acme") is None

    async def test_exclusive_between_holders(self, lease: Lease) -> None:
        assert await lease.try_acquire("consolidate:acme", "a", LONG_S)
        assert not await lease.try_acquire("consolidate:acme", "b", LONG_S)
        assert await lease.holder("consolidate:acme") == "a"

    async def test_concurrent_acquire_has_one_winner(self, lease: Lease) -> None:
        holders = [f"replica-{i}" for i in range(20)]
        won = await asyncio.gather(
            *(lease.try_acquire("consolidate:acme", h, LONG_S) for h in holders)
        )
        assert sum(won) == 1
        assert await lease.holder("consolidate:acme") == holders[won.index(True)]

    async def test_names_are_independent(self, lease: Lease) -> None:
        assert await lease.try_acquire("consolidate:acme", "a", LONG_S)
        assert await lease.try_acquire("consolidate:globex", "b", LONG_S)
        assert await lease.holder("consolidate:globex") == "b"

    async def test_acquire_again_by_the_holder_restarts_its_ttl(self, lease: Lease) -> None:
        assert await lease.try_acquire("l", "a", SHORT_S)
        await asyncio.sleep(SHORT_S * 0.6)
        assert await lease.try_acquire("l", "a", SHORT_S)
        await asyncio.sleep(SHORT_S * 0.6)  # past the first TTL, inside the second
        assert await lease.holder("l") == "a"
        assert not await lease.try_acquire("l", "b", SHORT_S)

    async def test_renew_only_by_the_holder(self, lease: Lease) -> None:
        assert await lease.try_acquire("l", "a", LONG_S)
        assert not await lease.renew("l", "b", LONG_S)
        assert await lease.renew("l", "a", LONG_S)
        assert await lease.holder("l") == "a"

    async def test_renew_does_not_acquire_a_free_lease(self, lease: Lease) -> None:
        assert not await lease.renew("l", "a", LONG_S)
        assert await lease.holder("l") is None

    async def test_renew_extends_the_ttl(self, lease: Lease) -> None:
        assert await lease.try_acquire("l", "a", SHORT_S)
        started = time.monotonic()
        while time.monotonic() - started < SHORT_S * 2:
            await asyncio.sleep(SHORT_S / 4)
            assert await lease.renew("l", "a", SHORT_S)
        assert await lease.holder("l") == "a"

    async def test_takeover_after_the_holder_stops_renewing(self, lease: Lease) -> None:
        assert await lease.try_acquire("l", "a", SHORT_S)
        await _wait_past(SHORT_S)
        assert await lease.holder("l") is None
        assert await lease.try_acquire("l", "b", LONG_S)
        assert not await lease.renew("l", "a", LONG_S)  # the old holder learns it lost it
        await lease.release("l", "a")  # and cannot release the new holder's
        assert await lease.holder("l") == "b"

    async def test_release_only_by_the_holder(self, lease: Lease) -> None:
        assert await lease.try_acquire("l", "a", LONG_S)
        await lease.release("l", "b")
        assert await lease.holder("l") == "a"
        await lease.release("l", "a")
        assert await lease.holder("l") is None
        assert await lease.try_acquire("l", "b", LONG_S)

    async def test_release_of_a_free_lease_is_fine(self, lease: Lease) -> None:
        await lease.release("l", "a")
        assert await lease.holder("l") is None


class RateLimiterContract:
    WINDOW_S = 0.4

    @pytest.fixture
    async def limiter(self) -> RateLimiter:
        raise NotImplementedError("override the limiter fixture to yield an empty RateLimiter")

    async def _hits(self, limiter: RateLimiter, key: str, n: int, limit: int) -> list[bool]:
        return [(await limiter.hit(key, limit, self.WINDOW_S)).allowed for _ in range(n)]

    async def test_allows_limit_then_refuses_until_the_window_ends(
        self, limiter: RateLimiter
    ) -> None:
        assert await self._hits(limiter, "acme", 3, limit=3) == [True, True, True]
        refused = await limiter.hit("acme", 3, self.WINDOW_S)
        assert not refused.allowed
        assert 0 < refused.retry_after_s <= self.WINDOW_S
        await asyncio.sleep(refused.retry_after_s + 0.05)
        assert await self._hits(limiter, "acme", 4, limit=3) == [True, True, True, False]

    async def test_retry_after_counts_down(self, limiter: RateLimiter) -> None:
        await self._hits(limiter, "acme", 1, limit=1)
        first = await limiter.hit("acme", 1, self.WINDOW_S)
        await asyncio.sleep(0.1)
        later = await limiter.hit("acme", 1, self.WINDOW_S)
        assert not first.allowed
        assert not later.allowed
        assert later.retry_after_s < first.retry_after_s

    async def test_refused_hits_do_not_extend_the_window(self, limiter: RateLimiter) -> None:
        started = time.monotonic()
        assert await self._hits(limiter, "acme", 2, limit=2) == [True, True]
        while time.monotonic() - started < self.WINDOW_S * 0.75:
            assert not (await limiter.hit("acme", 2, self.WINDOW_S)).allowed
            await asyncio.sleep(0.02)
        await asyncio.sleep(max(0.0, self.WINDOW_S - (time.monotonic() - started)) + 0.05)
        assert (await limiter.hit("acme", 2, self.WINDOW_S)).allowed

    async def test_a_hit_counts_its_cost(self, limiter: RateLimiter) -> None:
        assert (await limiter.hit("acme", 5, self.WINDOW_S, cost=3)).allowed
        assert (await limiter.hit("acme", 5, self.WINDOW_S, cost=2)).allowed
        assert not (await limiter.hit("acme", 5, self.WINDOW_S)).allowed

    async def test_keys_are_counted_apart(self, limiter: RateLimiter) -> None:
        assert await self._hits(limiter, "acme", 3, limit=2) == [True, True, False]
        assert await self._hits(limiter, "globex", 2, limit=2) == [True, True]

    async def test_allowed_hits_carry_no_wait(self, limiter: RateLimiter) -> None:
        decision = await limiter.hit("acme", 5, self.WINDOW_S)
        assert decision.allowed
        assert decision.retry_after_s == 0
