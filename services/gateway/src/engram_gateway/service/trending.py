"""Trending: a recall without text — empty `query` or "*" and no `queries` —
lists the memories that pass the filters, best first by `sort`.

No text stream can answer it: the lexical service lists them (its `Top` RPC: the filter and
the order applied inside the text index, `engram_core.ordering`), and this module turns the
listing into scored candidates. The recall cache keeps the answer until the next write.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engram_core.errors import InvalidArgument
from engram_core.model import Memory
from engram_core.ordering import Sort, sort_value
from engram_core.scoring import ScoredCandidate

TRENDING_STREAM = "trending"  # what `streams` reports for a trending answer
WILDCARD = "*"


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


def _score(sort: Sort, value: float, newest: float, oldest: float) -> float:
    """The result's `score`: the sort value itself, except recency: 1 for the newest memory
    down to 0 for the oldest of those listed (a timestamp is no score)."""
    if sort is not Sort.RECENCY:
        return value
    span = newest - oldest
    return 1.0 if span <= 0 else (value - oldest) / span


def scored(listed: Sequence[Memory], sort: Sort) -> list[ScoredCandidate]:
    """The listing, in its order, as candidates scored by ``sort``."""
    if not listed:
        return []
    values = [sort_value(sort, m) for m in listed]
    newest, oldest = max(values), min(values)
    out = []
    for m, value in zip(listed, values, strict=True):
        score = _score(sort, value, newest, oldest)
        out.append(
            ScoredCandidate(memory=m, score=score, components={sort.value: score}, streams={})
        )
    return out
