"""The ``hybrid_graph`` rerank: personalised PageRank from the best results. Pure.

After scoring, the ranked pool becomes a small undirected graph: its memories, the
memories at the other end of their relations (pass-through nodes), and one node per
entity that two or more of them mention. Relations weigh their ``strength``; a memory–entity
edge weighs ``entity_weight`` × the entity's rarity in the pool (an entity every result
mentions, like the speaker of a conversation, says nothing about which result matters
and gets weight 0). A random walk that restarts at the seeds — the best ``seeds`` results,
in proportion to their fused score — then visits most often the memories tied to
several good results. The blend keeps the fused scale:

    score = (1 - alpha) · fused + alpha · top · ppr / max_ppr

``top`` is the best fused score of the pool and ``max_ppr`` the largest PageRank among
the pool, so alpha = 0 is plain hybrid and alpha = 1 orders by PageRank alone; the
normalised PageRank is reported as the component ``ppr``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from engram_core import validation as v
from engram_core.model import Relation
from engram_core.scoring import ScoredCandidate

PPR_COMPONENT = "ppr"
_ENTITY_NODE = "entity:"  # memory ids are UUIDs, so this prefix cannot collide with one


@dataclass(frozen=True, slots=True)
class GraphRerankConfig:
    # Measured on LoCoMo (gateway README): alpha 0.1 with 10 seeds was the best of 0.1-0.5.
    alpha: float = 0.1  # weight of PageRank in the blend (the request's graph_alpha)
    seeds: int = 10  # best results the walk restarts from
    pool: int = 50  # results asked of scoring and reranked
    damping: float = 0.85  # probability of following an edge rather than restarting
    entity_weight: float = 0.5  # weight of a memory–entity edge for the rarest entity

    def __post_init__(self) -> None:
        if not (0.0 <= self.alpha <= 1.0 and 0.0 < self.damping < 1.0):
            raise ValueError(f"bad graph rerank settings: {self}")
        if self.seeds < 1 or self.pool < 1 or self.entity_weight < 0:
            raise ValueError(f"bad graph rerank settings: {self}")


def personalised_pagerank(
    edges: Iterable[tuple[str, str, float]],
    personalisation: Mapping[str, float],
    damping: float = 0.85,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> dict[str, float]:
    """PageRank of every node of an undirected weighted graph, restarting at
    ``personalisation`` (weights ≥ 0, normalised here). Sums to 1.

    Parallel edges add up; self-loops and weights ≤ 0 are ignored. A node without edges
    sends its mass back to the restart distribution (the usual dangling-node rule), so
    an isolated seed keeps its own restart share. Power iteration until the L1 change is
    below ``tol`` or ``max_iter`` rounds.
    """
    restart = {n: w for n, w in personalisation.items() if w > 0}
    total = sum(restart.values())
    if not restart or not math.isfinite(total):
        raise ValueError("personalisation needs a positive, finite weight")
    restart = {n: w / total for n, w in restart.items()}
    adjacency: dict[str, dict[str, float]] = {n: {} for n in restart}
    for a, b, w in edges:
        if a == b or not w > 0:
            continue
        for x, y in ((a, b), (b, a)):
            row = adjacency.setdefault(x, {})
            row[y] = row.get(y, 0.0) + w
    degree = {n: sum(row.values()) for n, row in adjacency.items()}
    rank = dict.fromkeys(adjacency, 0.0)
    rank.update(restart)
    for _ in range(max_iter):
        nxt = dict.fromkeys(adjacency, 0.0)
        dangling = 0.0
        for node, mass in rank.items():
            if not mass:
                continue
            row = adjacency[node]
            if not row:
                dangling += mass
                continue
            share = damping * mass / degree[node]
            for other, w in row.items():
                nxt[other] += share * w
        back = (1.0 - damping) + damping * dangling
        for node, r in restart.items():
            nxt[node] += back * r
        change = sum(abs(nxt[n] - rank[n]) for n in adjacency)
        rank = nxt
        if change < tol:
            break
    return rank


def pool_edges(
    ranked: Sequence[ScoredCandidate], relations: Iterable[Relation], entity_weight: float
) -> list[tuple[str, str, float]]:
    """The pool's graph: relations touching it, and memory–entity edges weighted by rarity.

    An entity mentioned by ``df`` of the ``n`` results weighs
    ``entity_weight · log(n / df) / log(n / 2)``: the rarest shared entity (df = 2) weighs
    ``entity_weight``, one every result mentions 0; an entity only one result mentions
    links nothing and is left out.
    """
    edges = [(r.source_id, r.target_id, r.strength) for r in relations if r.type != "MENTIONS"]
    n = len(ranked)
    mentions: dict[str, list[str]] = {}
    for s in ranked:
        for key in dict.fromkeys(s.memory.entities):
            mentions.setdefault(key, []).append(s.memory.id)
    if n > 2 and entity_weight > 0:
        norm = math.log(n / 2)
        for key, ids in mentions.items():
            df = len(ids)
            if 2 <= df < n:
                w = entity_weight * math.log(n / df) / norm
                edges += [(i, _ENTITY_NODE + key, w) for i in ids]
    return edges


def graph_rerank(
    ranked: Sequence[ScoredCandidate], relations: Iterable[Relation], config: GraphRerankConfig
) -> list[ScoredCandidate]:
    """``ranked`` (best first) re-ordered by the blend of fused score and PageRank."""
    if len(ranked) < 2 or config.alpha == 0.0:
        return list(ranked)
    seeds = ranked[: config.seeds]
    weights = {s.memory.id: max(s.score, 0.0) for s in seeds}
    if not any(weights.values()):
        weights = dict.fromkeys(weights, 1.0)
    ppr = personalised_pagerank(
        pool_edges(ranked, relations, config.entity_weight), weights, config.damping
    )
    best = max(ppr.get(s.memory.id, 0.0) for s in ranked)
    top = max(s.score for s in ranked)
    out = []
    for s in ranked:
        norm = ppr.get(s.memory.id, 0.0) / best if best > 0 else 0.0
        score = (1.0 - config.alpha) * s.score + config.alpha * top * norm
        out.append(replace(s, score=score, components={**s.components, PPR_COMPONENT: norm}))
    order = sorted(range(len(out)), key=lambda i: (-out[i].score, i))
    return [out[i] for i in order]


def check_alpha(value: float, default: float) -> float:
    """A request's ``graph_alpha``: 0 (unset) takes the default; otherwise within [0, 1]."""
    if value == 0.0:
        return default
    return v.check_unit(value, "graph_rerank.alpha", default)
