"""An in-memory `VectorIndex` for unit tests: brute-force cosine, the reference filter."""

from __future__ import annotations

import math
from collections.abc import Sequence

from engram_core.errors import InvalidArgument
from engram_core.filters import matches
from engram_core.model import Filter, Hit, Memory, UpsertResult
from engram_testing.fakes.common import FakeStore


def _unit(vector: Sequence[float]) -> tuple[float, ...]:
    norm = math.sqrt(sum(x * x for x in vector))
    return tuple(x / norm for x in vector) if norm else tuple(0.0 for _ in vector)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


class FakeVectorIndex(FakeStore[tuple[float, ...]]):
    """Keeps each memory's unit vector. Set ``failure`` to make every call raise it."""

    def __init__(self, dimension: int = 384) -> None:
        super().__init__()
        self._dimension = dimension

    @property
    def dimension(self) -> int:
        return self._dimension

    def _check_vector(self, vector: Sequence[float]) -> None:
        if len(vector) != self._dimension:
            raise InvalidArgument(
                "vector", f"expected {self._dimension} dimensions, got {len(vector)}"
            )

    async def upsert(
        self, tenant: str, items: Sequence[tuple[Memory, Sequence[float]]]
    ) -> UpsertResult:
        self._check()
        for _, vector in items:
            self._check_vector(vector)
        applied = self._write(tenant, [(m, _unit(vector)) for m, vector in items])
        return UpsertResult(applied=len(applied), skipped=len(items) - len(applied))

    async def search(
        self, tenant: str, vector: Sequence[float], flt: Filter, limit: int
    ) -> list[Hit]:
        self._check()
        self._check_vector(vector)
        query = _unit(vector)
        hits = [
            Hit(id=m.id, score=_dot(query, unit), memory=m)
            for m, unit in self._all_live(tenant)
            if matches(m, flt)
        ]
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[: max(limit, 0)]

    async def search_batch(
        self, tenant: str, vector: Sequence[float], flts: Sequence[Filter], limit: int
    ) -> list[list[Hit]]:
        self._check_vector(vector)
        return [await self.search(tenant, vector, flt, limit) for flt in flts]

    async def neighbours(
        self, tenant: str, ids: Sequence[str], limit: int, min_score: float
    ) -> dict[str, list[Hit]]:
        self._check()
        if limit < 1:
            raise InvalidArgument("limit", f"must be >= 1, got {limit}")
        out: dict[str, list[Hit]] = {}
        for id_ in dict.fromkeys(ids):
            entry = self._live(tenant, id_)
            if entry is None:
                continue
            hits = [
                Hit(id=m.id, score=score)
                for m, unit in self._all_live(tenant)
                if m.id != id_ and (score := _dot(entry[1], unit)) >= min_score
            ]
            hits.sort(key=lambda h: (-h.score, h.id))
            out[id_] = hits[:limit]
        return out
