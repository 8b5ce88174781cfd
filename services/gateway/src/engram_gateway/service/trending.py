"""Trending (issue #4): a recall without text — empty `query` or "*" and no `queries` —
lists the memories that pass the filters, best first by `sort`.

No text stream can answer it and no store orders by importance, so the gateway scans the
tenant (``scan.scan_memories``: one Scan RPC per 500 memories, at most
``trending_scan_max`` memories per call), filters with ``engram_core.filters.matches`` and
keeps the top with a heap. The recall cache keeps the answer until the next write.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from enum import Enum

from engram_core.errors import InvalidArgument
from engram_core.filters import matches
from engram_core.model import Filter, Memory
from engram_core.scoring import ScoredCandidate

TRENDING_STREAM = "trending"  # what `streams` reports for a trending answer
WILDCARD = "*"


class Sort(Enum):
    IMPORTANCE = "importance"
    RECENCY = "recency"
    RELEVANCE = "relevance"  # relevance_score, written by consolidation's decay pass
    ACCESS_COUNT = "access_count"


def is_trending(query: str, queries: Iterable[str]) -> bool:
    return query.strip() in ("", WILDCARD) and not any(q.strip() for q in queries)


def check_sort(value: str, trending: bool) -> Sort | None:
    """The request's `sort`: None (unset), or a Sort when the recall is a trending one."""
    text = value.strip().lower()
    if not text:
        return Sort.IMPORTANCE if trending else None
    try:
        sort = Sort(text)
    except ValueError:
        known = ", ".join(s.value for s in Sort)
        raise InvalidArgument("sort", f"unknown sort {value[:64]!r}; known: {known}") from None
    if not trending:
        raise InvalidArgument("sort", 'applies only to an empty or "*" query without queries')
    return sort


def _key(sort: Sort, m: Memory) -> float:
    if sort is Sort.IMPORTANCE:
        return m.importance
    if sort is Sort.RELEVANCE:
        return m.relevance_score
    if sort is Sort.ACCESS_COUNT:
        return float(m.access_count)
    return m.timestamp.timestamp()


def _score(sort: Sort, value: float, newest: float, oldest: float) -> float:
    """The result's `score`: the sort key itself, except recency: 1 for the newest memory
    down to 0 for the oldest of those listed (a timestamp is no score)."""
    if sort is not Sort.RECENCY:
        return value
    span = newest - oldest
    return 1.0 if span <= 0 else (value - oldest) / span


def top(memories: Iterable[Memory], flt: Filter, sort: Sort, limit: int) -> list[ScoredCandidate]:
    """The best ``limit`` memories passing ``flt`` by ``sort``; ties: newer, then id."""
    best = heapq.nsmallest(
        limit,
        (m for m in memories if matches(m, flt)),
        key=lambda m: (-_key(sort, m), -m.timestamp.timestamp(), m.id),
    )
    if not best:
        return []
    keys = [_key(sort, m) for m in best]
    newest, oldest = max(keys), min(keys)
    return [
        ScoredCandidate(
            memory=m,
            score=_score(sort, k, newest, oldest),
            components={sort.value: _score(sort, k, newest, oldest)},
            streams={},
        )
        for m, k in zip(best, keys, strict=True)
    ]
