"""What ladybug answered, kept between reads: each memory's relations, for the lookup recall
makes on every call (`relations` of its 50 best candidates: 23 ms of ladybug queries on 10k
memories), and each tenant's count of live memories, the graph stream's IDF n (a pass over
the memory table: 3-5 ms on 100k memories, on every search).

Coherent because one process owns a ladybug file: every write that can change an edge runs
on this store's writer, which invalidates what it touched AFTER its commit. A read takes the
epoch before its query and its answer is kept only if no invalidation happened meanwhile,
so an answer read before a commit can never be kept after that commit's invalidation; one
kept before it is dropped by it. (Neo4j has other writers: its store has no such cache.)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from engram_core.model import Relation

Edges = tuple[Relation, ...]
V = TypeVar("V")


class ReadCache(Generic[V]):
    """LRU of key → what a read answered (e.g. a memory key → its relations, both
    directions); thread-safe."""

    def __init__(self, max_keys: int) -> None:
        self._max = max_keys
        self._values: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()
        self._epoch = 0

    def epoch(self) -> int:
        with self._lock:
            return self._epoch

    def get(self, keys: Sequence[str]) -> tuple[dict[str, V], list[str]]:
        """The cached keys' values, and the keys not cached."""
        found: dict[str, V] = {}
        missing: list[str] = []
        with self._lock:
            for key in keys:
                value = self._values.get(key)
                if value is None:
                    missing.append(key)
                else:
                    self._values.move_to_end(key)
                    found[key] = value
        return found, missing

    def put(self, epoch: int, read: Mapping[str, V]) -> bool:
        """Keep ``read`` (queried after ``epoch`` was taken) unless an invalidation came
        since; whether it was kept."""
        if self._max <= 0:
            return False
        with self._lock:
            if epoch != self._epoch:
                return False
            for key, value in read.items():
                self._values[key] = value
                self._values.move_to_end(key)
            while len(self._values) > self._max:
                self._values.popitem(last=False)
            return True

    def invalidate(self, keys: Iterable[str]) -> None:
        with self._lock:
            self._epoch += 1
            for key in keys:
                self._values.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._epoch += 1
            self._values.clear()


EdgeCache = ReadCache[Edges]
