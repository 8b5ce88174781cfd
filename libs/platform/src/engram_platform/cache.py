"""In-process LRU cache behind the Cache port (the embedded twin of Redis)."""

from __future__ import annotations

import time
from collections import OrderedDict


class MemoryCache:
    """Bounded LRU with per-entry TTL. Shared only within one process."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._max = max_entries
        self._data: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def _live(self, key: str) -> bytes | None:
        item = self._data.get(key)
        if item is None:
            return None
        expires, value = item
        if expires < time.monotonic():
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    async def get(self, key: str) -> bytes | None:
        return self._live(key)

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._data[key] = (time.monotonic() + ttl_s, value)
        self._data.move_to_end(key)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    async def set_if_absent(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        existing = self._live(key)
        if existing is not None:
            return existing
        await self.set(key, value, ttl_s)
        return None

    async def set_max(self, key: str, value: int, ttl_s: float) -> int:
        held = decode_int(self._live(key))
        expires = time.monotonic() + ttl_s
        if held is None or held < value:
            await self.set(key, str(value).encode(), ttl_s)
            return value
        old_expires, data = self._data[key]
        self._data[key] = (max(old_expires, expires), data)
        return held

    async def delete_prefix(self, prefix: str) -> None:
        for key in [k for k in self._data if k.startswith(prefix)]:
            del self._data[key]

    async def close(self) -> None:
        self._data.clear()


def decode_int(data: bytes | None) -> int | None:
    """A ``set_max`` value (ASCII decimal), or None when absent or not one."""
    if data is None:
        return None
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
