"""An in-memory `VectorIndex` for unit tests: brute-force cosine, the reference filter."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engram_core.errors import EngramError, InvalidArgument
from engram_core.filters import matches
from engram_core.model import AccessUpdate, Filter, Hit, Memory, UpsertResult


@dataclass(frozen=True, slots=True)
class _Entry:
    version: int
    memory: Memory | None  # None: a tombstone
    unit: tuple[float, ...] = ()


def _unit(vector: Sequence[float]) -> tuple[float, ...]:
    norm = math.sqrt(sum(x * x for x in vector))
    return tuple(x / norm for x in vector) if norm else tuple(0.0 for _ in vector)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


class FakeVectorIndex:
    """Holds everything in dicts. Set ``failure`` to make every call raise it (a backend down)."""

    def __init__(self, dimension: int = 384) -> None:
        self._dimension = dimension
        self._entries: dict[tuple[str, str], _Entry] = {}
        self.failure: EngramError | None = None

    @property
    def dimension(self) -> int:
        return self._dimension

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _check_vector(self, vector: Sequence[float]) -> None:
        if len(vector) != self._dimension:
            raise InvalidArgument(
                "vector", f"expected {self._dimension} dimensions, got {len(vector)}"
            )

    def _live(self, tenant: str, id_: str) -> _Entry | None:
        entry = self._entries.get((tenant, id_))
        return None if entry is None or entry.memory is None else entry

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[float]]]
    ) -> UpsertResult:
        self._check()
        for _, vector in items:
            self._check_vector(vector)
        newest: dict[str, tuple[Memory, Sequence[float]]] = {}
        for m, vector in items:
            if m.id not in newest or m.version > newest[m.id][0].version:
                newest[m.id] = (m, vector)
        applied = 0
        for m, vector in newest.values():
            entry = self._entries.get((tenant, m.id))
            if entry is not None and m.version <= entry.version:
                continue
            stored = replace(m, tenant=tenant)
            self._entries[(tenant, m.id)] = _Entry(m.version, stored, _unit(vector))
            applied += 1
        return UpsertResult(applied=applied, skipped=len(items) - applied)

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        self._check()
        deleted = 0
        for id_ in dict.fromkeys(ids):
            entry = self._entries.get((tenant, id_))
            if entry is not None and version <= entry.version:
                continue
            if entry is not None and entry.memory is not None:
                deleted += 1
            self._entries[(tenant, id_)] = _Entry(version, None)
        return deleted

    async def search(
        self, tenant: str, vector: Sequence[float], flt: Filter, limit: int
    ) -> list[Hit]:
        self._check()
        self._check_vector(vector)
        query = _unit(vector)
        hits = [
            Hit(id=e.memory.id, score=_dot(query, e.unit), memory=e.memory)
            for (t, _), e in self._entries.items()
            if t == tenant and e.memory is not None and matches(e.memory, flt)
        ]
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[: max(limit, 0)]

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        self._check()
        found = (self._live(tenant, i) for i in dict.fromkeys(ids))
        return [e.memory for e in found if e is not None and e.memory is not None]

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        self._check()
        updated = 0
        for u in updates:
            entry = self._live(tenant, u.id)
            if entry is None or entry.memory is None:
                continue
            m = entry.memory
            if m.last_accessed is not None and u.last_accessed < m.last_accessed:
                continue
            changed = replace(m, last_accessed=u.last_accessed, access_count=u.access_count)
            self._entries[(tenant, u.id)] = replace(entry, memory=changed)
            updated += 1
        return updated

    async def count(self, tenant: str) -> int:
        self._check()
        return sum(1 for (t, _), e in self._entries.items() if t == tenant and e.memory is not None)

    async def close(self) -> None:
        return None
