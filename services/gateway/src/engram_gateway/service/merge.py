"""Merging the retrieval streams into candidates (DESIGN §4 step 3). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from engram_core.model import Filter, Hit, Memory, Relation
from engram_core.relations import ORIGIN_SYSTEM
from engram_core.scoring import DEFAULT_RRF_K, Candidate, StreamScore

# Backend name (what `streams`/`degraded` report) → stream name scoring knows.
STREAM_OF_BACKEND: Mapping[str, str] = {
    "vector": "vector",
    "lexical": "keyword",
    "graph": "graph",
}


def pool_size(limit: int, max_pool: int) -> int:
    """Over-fetch per stream: max(limit, min(4 × limit, max_pool))."""
    return max(limit, min(4 * limit, max_pool))


def vector_pool(pool: int, flt: Filter, factor: int, max_pool: int) -> int:
    """The vector stream's pool: widened ``factor`` times (up to ``max_pool``, never below
    ``pool``) when tags scope the search, since a filtered approximate search misses some."""
    return max(pool, min(pool * factor, max_pool)) if flt.tags else pool


def merge(answers: Mapping[str, Sequence[Hit]], fetched: Mapping[str, Memory]) -> list[Candidate]:
    """Candidates by id with each stream's score and 1-based rank, ordered by a local RRF.

    The memory comes from whichever stream returned it (the newest version when several
    did) or from ``fetched``; an id with no memory anywhere is dropped.
    """
    streams: dict[str, dict[str, StreamScore]] = {}
    memories: dict[str, Memory] = {}
    for backend, hits in answers.items():
        name = STREAM_OF_BACKEND[backend]
        for rank, hit in enumerate(hits, start=1):
            per_id = streams.setdefault(hit.id, {})
            if name in per_id:  # a stream listing an id twice: keep its best rank
                continue
            per_id[name] = StreamScore(hit.score, rank)
            m = hit.memory
            if m is not None and (hit.id not in memories or m.version > memories[hit.id].version):
                memories[hit.id] = m
    candidates = [
        Candidate(memory=memories.get(i) or fetched[i], streams=s)
        for i, s in streams.items()
        if i in memories or i in fetched
    ]
    candidates.sort(key=lambda c: (-_rrf(c), c.memory.id))
    return candidates


def missing_memories(answers: Mapping[str, Sequence[Hit]]) -> list[str]:
    """Ids some stream returned without the memory and no stream returned with it."""
    have = {h.id for hits in answers.values() for h in hits if h.memory is not None}
    return list(dict.fromkeys(h.id for hits in answers.values() for h in hits if h.id not in have))


def _rrf(c: Candidate) -> float:
    return sum(1.0 / (DEFAULT_RRF_K + s.rank) for s in c.streams.values())


def with_relations(
    candidates: Sequence[Candidate], relations: Iterable[Relation], system_edges: bool = False
) -> list[Candidate]:
    """Each candidate's ``relation``: summed strength of its edges to other candidates.

    Edges consolidation drew (origin ``system``: SIMILAR_TO, PRECEDED_BY…) say two memories
    resemble or follow each other, not that either answers the query; counted, they lifted
    every memory with neighbours in the pool once the associate pass had run, pushing the
    answers down, so they count only when ``system_edges`` says so."""
    ids = {c.memory.id for c in candidates}
    sums: dict[str, float] = {}
    seen: set[tuple[str, str, str]] = set()
    for r in relations:
        edge = (r.source_id, r.target_id, r.type)
        if r.source_id == r.target_id or edge in seen:
            continue
        if r.origin == ORIGIN_SYSTEM and not system_edges:
            continue
        seen.add(edge)
        if r.source_id in ids and r.target_id in ids:
            for end in (r.source_id, r.target_id):
                sums[end] = sums.get(end, 0.0) + r.strength
    return [
        replace(c, relation=sums[c.memory.id]) if c.memory.id in sums else c for c in candidates
    ]
