"""The breadth-first walk behind ``related`` in both graph adapters.

Each level is complete before the next (nearest first); a node keeps the strongest
product of strengths over its shortest paths (ties: the smaller first edge type); the
walk stops at the level that fills ``limit``, so the work is bounded by the answer where
a variable-length pattern would enumerate every path. The adapters only fetch the edges
leaving a level.
"""

from __future__ import annotations

from collections.abc import Iterable

from engram_core.model import RelatedHit


class Walk:
    def __init__(self, start: str) -> None:
        self.seen = {start}
        # id -> (product of strengths from the start, type of the first edge on the path)
        self.frontier: dict[str, tuple[float, str]] = {start: (1.0, "")}
        self.hits: list[RelatedHit] = []

    def add_level(
        self, depth: int, edges: Iterable[tuple[str, str, str, float]], limit: int
    ) -> bool:
        """Take the edges ``(source, other, type, strength)`` leaving the frontier; return
        whether another level is worth fetching."""
        level: dict[str, tuple[float, str]] = {}
        for source, other, type_, s in edges:
            if other in self.seen:
                continue
            strength, first = self.frontier[source]
            candidate = (strength * float(s), first or type_)
            best = level.get(other)
            if best is None or (-candidate[0], candidate[1]) < (-best[0], best[1]):
                level[other] = candidate
        if not level:
            return False
        self.seen.update(level)
        ranked = sorted(level.items(), key=lambda kv: (-kv[1][0], kv[0]))
        self.hits.extend(RelatedHit(id=k, type=v[1], strength=v[0], depth=depth) for k, v in ranked)
        self.frontier = level
        return len(self.hits) < limit

    def result(self, limit: int) -> list[RelatedHit]:
        return self.hits[: max(limit, 0)]
