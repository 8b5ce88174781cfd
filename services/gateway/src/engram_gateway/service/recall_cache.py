"""Recall answers cached per tenant; every write this gateway publishes drops the tenant's.

An entry remembers the watermark it was computed at, so a recall asking for a newer
``min_sequence`` does not get an answer from before it. A per-tenant epoch, bumped by
each write, stops a recall that raced a write from caching what it saw before it.

A write is logged before ingest applies it, so a recall in between reads the stores
without it. The cache remembers the newest sequence this gateway wrote for each tenant
(``written``): until the watermark covers it an answer is not cached, and an entry
computed at an older watermark is not served — an agent that stores a fact and asks
about it a moment later gets it as soon as it is applied, not a cached answer from
before. The sequence is also kept in the cache beside the entries (``WRITTEN``, outside
the tenant's prefix so invalidation keeps it, raised with ``set_max`` so replicas writing
the same tenant at once leave the newest), so with a shared cache a write through one
gateway replica holds back the answers of every replica.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections import defaultdict

from engram_core.ports import Cache
from engram_gateway.service import metrics
from engram_gateway.service.ports import RecallCodec, RecallResult
from engram_platform.cache import decode_int

log = logging.getLogger(__name__)
PREFIX = "recall:"
WRITTEN = "recall-written:"  # + tenant: the newest sequence a gateway wrote for it
_WATERMARK = struct.Struct(">Q")


def tenant_prefix(tenant: str) -> str:
    # Tenants are single tokens without ':' (TENANT_RE), so one tenant's prefix never
    # covers another's keys.
    return f"{PREFIX}{tenant}:"


class RecallCache:
    def __init__(self, cache: Cache, codec: RecallCodec, ttl_s: float) -> None:
        self._cache = cache
        self._codec = codec
        self._ttl = ttl_s
        self._epochs: defaultdict[str, int] = defaultdict(int)
        self._written: defaultdict[str, int] = defaultdict(int)

    @property
    def enabled(self) -> bool:
        return self._ttl > 0

    def key(self, tenant: str, fingerprint: str) -> str:
        digest = hashlib.sha256(fingerprint.encode("utf-8")).hexdigest()[:32]
        return tenant_prefix(tenant) + digest

    def epoch(self, tenant: str) -> int:
        return self._epochs[tenant]

    async def written(self, tenant: str) -> int:
        """The newest log sequence a gateway wrote for ``tenant`` (0: none known): this
        one's, or the one the shared cache holds."""
        local = self._written[tenant]
        if not self.enabled:
            return local
        try:
            data = await self._cache.get(WRITTEN + tenant)
        except Exception as exc:  # a cache that is down caches nothing anyway
            log.warning("recall cache get failed: %s", exc)
            return local
        shared = decode_int(data)
        return local if shared is None else max(local, shared)

    async def get(self, key: str, min_sequence: int) -> RecallResult | None:
        if not self.enabled:
            return None
        found = await self._lookup(key, min_sequence)
        metrics.cache_requests.add(1, {"result": "miss" if found is None else "hit"})
        return found

    async def _lookup(self, key: str, min_sequence: int) -> RecallResult | None:
        try:
            data = await self._cache.get(key)
        except Exception as exc:  # a cache that is down is a miss
            log.warning("recall cache get failed: %s", exc)
            return None
        if data is None or len(data) < _WATERMARK.size:
            return None
        (watermark,) = _WATERMARK.unpack_from(data)
        if watermark < min_sequence:
            return None
        try:
            return self._codec.decode(data[_WATERMARK.size :])
        except Exception as exc:  # e.g. written by another version: recompute
            log.warning("recall cache entry unreadable: %s", exc)
            return None

    async def put(
        self,
        tenant: str,
        key: str,
        epoch: int,
        watermark: int,
        result: RecallResult,
        written: int = 0,
    ) -> None:
        """Cache ``result``, computed at ``watermark`` in ``epoch``, when ``written`` (as
        read before) was the newest write: unless a write came since here, or one was not
        applied when it was computed."""
        if not self.enabled or self._epochs[tenant] != epoch:
            return
        if watermark < max(written, self._written[tenant]):
            return
        data = _WATERMARK.pack(watermark) + self._codec.encode(result)
        try:
            await self._cache.set(key, data, self._ttl)
        except Exception as exc:
            log.warning("recall cache set failed: %s", exc)

    async def invalidate(self, tenant: str, sequence: int = 0) -> None:
        """A write of ``tenant`` was logged at ``sequence``: drop the tenant's answers."""
        self._epochs[tenant] += 1
        self._written[tenant] = max(self._written[tenant], sequence)
        if not self.enabled:
            return
        if sequence:  # first, so an entry a racing replica puts after the drop is refused
            try:  # outlives every entry computed before the write was applied
                await self._cache.set_max(WRITTEN + tenant, self._written[tenant], 2 * self._ttl)
            except Exception as exc:
                log.error("recall cache marker for %s failed: %s", tenant, exc)
        try:
            await self._cache.delete_prefix(tenant_prefix(tenant))
        except Exception as exc:
            log.error("recall cache invalidation for %s failed: %s", tenant, exc)
