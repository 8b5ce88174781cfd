"""A least-recently-used memo bounded by the bytes it holds, safe across threads.

``functools.lru_cache`` bounds the number of entries, not their size: 8 192 memories of
16 KB would hold a quarter of a gigabyte. The conversions between protobuf, JSON and
``Memory`` (engram_platform.convert, engram_core.codec) memoise through this instead.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MEMO_BUDGET = 16 * 1024 * 1024
"""Bytes each of the conversion memos may hold (an estimate of the keys and values kept)."""


def memory_size(serialized: str | bytes) -> int:
    """What the memory memos count for an entry: a memory's serialized form (bytes, JSON)
    and the object decoded from or encoded to it, about twice its length, plus overhead."""
    return 2 * len(serialized) + 1024


class SizedMemo(Generic[K, V]):
    """``fn(key)``, remembered for the most recently used keys while the sizes of what is
    kept (``size(key, value)``, an estimate in bytes) add up to at most ``budget``. A value
    larger than a sixteenth of the budget is returned but not kept."""

    def __init__(
        self, fn: Callable[[K], V], size: Callable[[K, V], int], budget: int = MEMO_BUDGET
    ) -> None:
        if budget < 1:
            raise ValueError(f"memo budget must be positive, not {budget}")
        self._fn = fn
        self._size = size
        self._budget = budget
        self._largest = budget // 16
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()

    def __call__(self, key: K) -> V:
        # A hit takes no lock: OrderedDict's get and move_to_end are each one step under the
        # GIL; the entry may have been evicted in between, which only costs its freshness.
        found = self._items.get(key)
        if found is not None:
            with contextlib.suppress(KeyError):
                self._items.move_to_end(key)
            return found[0]
        value = self._fn(key)
        n = self._size(key, value)
        if n <= self._largest:
            with self._lock:
                if key not in self._items:
                    self._items[key] = (value, n)
                    self._used += n
                    while self._used > self._budget:
                        _, (_, freed) = self._items.popitem(last=False)
                        self._used -= freed
        return value

    @property
    def used(self) -> int:
        """Bytes held, by the ``size`` estimates."""
        return self._used

    def __len__(self) -> int:
        return len(self._items)
