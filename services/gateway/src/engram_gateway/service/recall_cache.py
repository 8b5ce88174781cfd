"""Recall answers cached per tenant; every write this gateway publishes drops the tenant's.

An entry remembers the watermark it was computed at, so a recall asking for a newer
``min_sequence`` does not get an answer from before it. A per-tenant epoch, bumped by
each write, stops a recall that raced a write from caching what it saw before it.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections import defaultdict

from engram_core.ports import Cache
from engram_gateway.service.ports import RecallCodec, RecallResult

log = logging.getLogger(__name__)
PREFIX = "recall:"
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

    @property
    def enabled(self) -> bool:
        return self._ttl > 0

    def key(self, tenant: str, fingerprint: str) -> str:
        digest = hashlib.sha256(fingerprint.encode("utf-8")).hexdigest()[:32]
        return tenant_prefix(tenant) + digest

    def epoch(self, tenant: str) -> int:
        return self._epochs[tenant]

    async def get(self, key: str, min_sequence: int) -> RecallResult | None:
        if not self.enabled:
            return None
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
        self, tenant: str, key: str, epoch: int, watermark: int, result: RecallResult
    ) -> None:
        if not self.enabled or self._epochs[tenant] != epoch:
            return
        data = _WATERMARK.pack(watermark) + self._codec.encode(result)
        try:
            await self._cache.set(key, data, self._ttl)
        except Exception as exc:
            log.warning("recall cache set failed: %s", exc)

    async def invalidate(self, tenant: str) -> None:
        self._epochs[tenant] += 1
        if not self.enabled:
            return
        try:
            await self._cache.delete_prefix(tenant_prefix(tenant))
        except Exception as exc:
            log.error("recall cache invalidation for %s failed: %s", tenant, exc)
