"""The order of a listing without text (trending): the memories passing a filter,
best first by a stored value. Every `TextIndex.top` adapter answers in this order; `best` is
its reference (the fake's whole implementation), `ordered` the stores' tie-breaker over what
their own filter let through.

Order: the sort's value, higher first; then newer first; then id ascending.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from enum import Enum

from engram_core.filters import matches
from engram_core.model import Filter, Memory


class Sort(Enum):
    IMPORTANCE = "importance"
    RECENCY = "recency"
    RELEVANCE = "relevance"  # relevance_score, written by consolidation's decay pass
    ACCESS_COUNT = "access_count"


def sort_value(sort: Sort, m: Memory) -> float:
    """The value a memory is listed by (recency: its timestamp in seconds)."""
    if sort is Sort.IMPORTANCE:
        return m.importance
    if sort is Sort.RELEVANCE:
        return m.relevance_score
    if sort is Sort.ACCESS_COUNT:
        return float(m.access_count)
    return m.timestamp.timestamp()


def order_key(sort: Sort, m: Memory) -> tuple[float, float, str]:
    """Ascending key of the listing order."""
    return (-sort_value(sort, m), -m.timestamp.timestamp(), m.id)


def ordered(memories: Iterable[Memory], sort: Sort, limit: int) -> list[Memory]:
    """The first ``limit`` memories in the listing order."""
    if limit <= 0:
        return []
    return heapq.nsmallest(limit, memories, key=lambda m: order_key(sort, m))


def best(memories: Iterable[Memory], flt: Filter, sort: Sort, limit: int) -> list[Memory]:
    """The first ``limit`` memories passing ``flt`` in the listing order."""
    return ordered((m for m in memories if matches(m, flt)), sort, limit)
