"""Several queries in one recall: `query`, `queries` and decomposed sub-queries.

Every sub-query asks each stream for its own pool; the answers are merged per stream by id
keeping the best score, so the candidates look to scoring as if one query had found them.
BM25 and graph scores depend on the query (a longer query scores higher), so with more than
one sub-query they are divided by that sub-query's best first; cosines are comparable as
they are. With one sub-query nothing changes. Pure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from engram_core import validation as v
from engram_core.entities import EntityRules
from engram_core.errors import InvalidArgument
from engram_core.model import Hit
from engram_core.scoring import DEFAULT_RRF_K, ScoredCandidate, StreamScore
from engram_gateway.service.ports import QueryDecomposer

log = logging.getLogger(__name__)

DEFAULT_MAX_QUERIES = 8
QUERY_STREAM_PREFIX = "query:"  # streams entry naming the sub-query that found a result
_QUERY_DEPENDENT = frozenset({"lexical", "graph"})  # backends whose scores scale with the query


@dataclass(frozen=True, slots=True)
class SubQuery:
    text: str
    pool: int  # hits asked of each stream


def check_queries(
    queries: Sequence[str], limits: v.Limits, max_queries: int = DEFAULT_MAX_QUERIES
) -> tuple[str, ...]:
    if len(queries) > max_queries:
        raise InvalidArgument("queries", f"at most {max_queries}, got {len(queries)}")
    return tuple(v.check_query(q, f"queries[{i}]", limits) for i, q in enumerate(queries))


def check_per_query_limit(value: int, max_pool: int) -> int:
    """0 = each sub-query gets the recall's pool; else 1..max_pool."""
    if value != 0 and not 1 <= value <= max_pool:
        raise InvalidArgument("per_query_limit", f"must be within 1..{max_pool}, got {value}")
    return value


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def sub_queries(
    texts: Sequence[str], pool: int, per_query_limit: int, max_queries: int
) -> list[SubQuery]:
    """The distinct texts (first one kept) as sub-queries, at most ``max_queries``."""
    seen: set[str] = set()
    out: list[SubQuery] = []
    for text in texts:
        key = _key(text)
        if key and key not in seen and len(out) < max_queries:
            seen.add(key)
            out.append(SubQuery(text, per_query_limit or pool))
    return out


async def decomposed(decomposer: QueryDecomposer, query: str, rules: EntityRules) -> list[str]:
    """The decomposer's sub-queries; [] when it fails (the recall goes on without them)."""
    try:
        return [q for q in await decomposer.decompose(query, rules) if q.strip()]
    except Exception as exc:  # a model-backed decomposer may time out or answer garbage
        log.warning("decomposition failed, recalling without it: %s", exc)
        return []


def merge_answers(
    per_query: Sequence[Mapping[str, Sequence[Hit]]],
) -> tuple[dict[str, list[Hit]], dict[str, dict[int, StreamScore]]]:
    """Per backend, the hits of every sub-query merged by id (best score first); and per id,
    for each sub-query that found it, that sub-query's local RRF score and rank."""
    if len(per_query) == 1:
        return {b: list(h) for b, h in per_query[0].items()}, {}
    best: dict[str, dict[str, Hit]] = {}
    for answers in per_query:
        for backend, hits in answers.items():
            top = max((h.score for h in hits), default=0.0)
            scale = 1.0 / top if backend in _QUERY_DEPENDENT and top > 0 else 1.0
            merged = best.setdefault(backend, {})
            for h in hits:
                scored = replace(h, score=h.score * scale)
                had = merged.get(h.id)
                if had is None or scored.score > had.score:
                    memory = scored.memory or (had.memory if had else None)
                    merged[h.id] = replace(scored, memory=memory)
                elif had.memory is None and h.memory is not None:
                    merged[h.id] = replace(had, memory=h.memory)
    answers_out = {b: sorted(hits.values(), key=lambda h: -h.score) for b, hits in best.items()}
    return answers_out, _provenance(per_query)


def _provenance(
    per_query: Sequence[Mapping[str, Sequence[Hit]]],
) -> dict[str, dict[int, StreamScore]]:
    found: dict[str, dict[int, StreamScore]] = {}
    for i, answers in enumerate(per_query):
        rrf: dict[str, float] = {}
        for hits in answers.values():
            seen: set[str] = set()
            for rank, h in enumerate(hits, start=1):
                if h.id not in seen:
                    seen.add(h.id)
                    rrf[h.id] = rrf.get(h.id, 0.0) + 1.0 / (DEFAULT_RRF_K + rank)
        ordered = sorted(rrf.items(), key=lambda kv: (-kv[1], kv[0]))
        for rank, (id_, score) in enumerate(ordered, start=1):
            found.setdefault(id_, {})[i] = StreamScore(score, rank)
    return found


def with_provenance(
    ranked: Sequence[ScoredCandidate], found: Mapping[str, Mapping[int, StreamScore]]
) -> list[ScoredCandidate]:
    """Each result's streams plus a "query:<i>" entry per sub-query that found it; added
    after ranking, so scoring never sees them."""
    if not found:
        return list(ranked)
    out: list[ScoredCandidate] = []
    for c in ranked:
        extra = found.get(c.memory.id)
        if not extra:
            out.append(c)
            continue
        streams = dict(c.streams)
        streams.update({f"{QUERY_STREAM_PREFIX}{i}": s for i, s in sorted(extra.items())})
        out.append(replace(c, streams=streams))
    return out


@dataclass(frozen=True, slots=True)
class CandidateConfig:
    """Settings of candidate generation beyond the streams' pools (gateway config.py)."""

    max_queries: int = DEFAULT_MAX_QUERIES  # sub-queries per recall, `query` included
    decompose: bool = False  # a request's default for `decompose`
