"""Expansion after ranking: memories linked to the best results join them.

The seeds are the best ``seeds`` results (at most ``limit``). Two ways out of them:

* **relations** (``expansion.relations``): one ``graph.relations`` call for the seeds; an edge
  of an asked type (``expand_types``, empty = all) with ``strength ≥ expand_min_strength``
  links a seed to the memory at its other end, whichever way it points. Each seed keeps its
  ``expand_per_seed`` strongest neighbours. A neighbour kept by two or more seeds is a
  **bridge**: bridges come first, by the sum of their strengths; then the single-seed
  neighbours by seed score × strength.
* **entities** (``expansion.entities``): one ``graph.search`` for the entities the seeds
  mention; the memories found share at least one with a seed.

What a result already holds is not expanded again. The linked memories are read by id
(at most ``FETCH_FACTOR × expand_limit`` of them), those under ``expand_min_importance``
or outside the scope are dropped, and at most ``expand_limit`` join, bridges first, then
relations, then entities. The scope is the request's filter without its ``tags``
(exclude_tags, types, the time window and archived always hold); with ``expand_in_scope``
the tags too.

Scores (so an expanded memory ranks below or with the seed it came from, never above):

* relation: seed score × strength;
* bridge: best linked seed's score × min(1, sum of strengths);
* entity: ``entity_factor`` × the score of the best seed sharing an entity with it (a flat
  share, whatever the number of entities in common).

Each is an ``ExpandedCandidate``: a ``ScoredCandidate`` that says how (``expansion``) and
from which seed (``expanded_from``; a bridge: its seeds, strongest link first, joined by
","); its only component is ``expansion``, the factor applied to the seed's score.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from engram_core import validation as v
from engram_core.filters import matches
from engram_core.model import Filter, Memory, Relation
from engram_core.scoring import ScoredCandidate
from engram_gateway.service.lookup import Lookup
from engram_gateway.service.ports import GraphPort

EXPANSION_COMPONENT = "expansion"
FETCH_FACTOR = 3  # linked memories read per expand_limit: the filters may drop some
MAX_ENTITY_KEYS = 64  # the graph service's bound on entity keys per search


class Expansion(StrEnum):
    RELATION = "relation"
    BRIDGE = "bridge"
    ENTITY = "entity"


@dataclass(frozen=True, slots=True)
class ExpandedCandidate(ScoredCandidate):
    """A result added by expansion rather than found by the retrieval streams."""

    expansion: str = ""
    expanded_from: str = ""


def expansion_of(s: ScoredCandidate) -> tuple[str, str] | None:
    """(expansion, expanded_from) of an expanded result; None for a seed or ranked one."""
    if isinstance(s, ExpandedCandidate) and s.expansion:
        return s.expansion, s.expanded_from
    return None


@dataclass(frozen=True, slots=True)
class ExpandRequest:
    """The expansion fields of a recall as the client sent them (unvalidated)."""

    relations: bool = False
    entities: bool = False
    per_seed: int = 0  # 0: the configured default
    limit: int = 0  # 0: the configured default
    min_strength: float = 0.0
    min_importance: float = 0.0
    in_scope: bool = False
    types: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class ExpandConfig:
    """Settings: the request may change per_seed and limit, never the seeds or the factor."""

    seeds: int = 5
    per_seed: int = 3
    limit: int = 10
    entity_factor: float = 0.5

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.per_seed < 1 or self.limit < 1:
            raise ValueError(f"bad expansion settings: {self}")
        if not 0.0 <= self.entity_factor <= 1.0:
            raise ValueError(f"bad expansion settings: {self}")


@dataclass(frozen=True, slots=True)
class ExpandOptions:
    """Validated; part of the recall's plan (and so of its cache key)."""

    relations: bool = False
    entities: bool = False
    seeds: int = 5
    per_seed: int = 3
    limit: int = 10
    min_strength: float = 0.0
    min_importance: float = 0.0
    in_scope: bool = False
    types: tuple[str, ...] = ()
    entity_factor: float = 0.5

    @property
    def on(self) -> bool:
        return self.relations or self.entities


def plan_expansion(req: ExpandRequest, config: ExpandConfig, max_limit: int) -> ExpandOptions:
    """The request's expansion, validated (every field, even with expansion off)."""
    return ExpandOptions(
        relations=req.relations,
        entities=req.entities,
        seeds=config.seeds,
        per_seed=v.check_limit(req.per_seed, "expansion.per_seed", config.per_seed, max_limit),
        limit=v.check_limit(req.limit, "expansion.limit", min(config.limit, max_limit), max_limit),
        min_strength=v.check_unit(req.min_strength, "expansion.min_strength", 0.0),
        min_importance=v.check_unit(req.min_importance, "expansion.min_importance", 0.0),
        in_scope=req.in_scope,
        types=v.check_relation_types(req.types, "expansion.types"),
        entity_factor=config.entity_factor,
    )


@dataclass(frozen=True, slots=True)
class Link:
    """A memory linked to seeds: (seed id, strength) per seed, strongest first."""

    id: str
    seeds: tuple[tuple[str, float], ...] = field(default_factory=tuple)

    @property
    def bridge(self) -> bool:
        return len(self.seeds) >= 2

    @property
    def strength(self) -> float:
        return sum(s for _, s in self.seeds)


def relation_links(
    seeds: Sequence[ScoredCandidate],
    relations: Iterable[Relation],
    *,
    types: Sequence[str],
    min_strength: float,
    per_seed: int,
    exclude: Iterable[str] = (),
) -> list[Link]:
    """The seeds' neighbours over ``relations``: bridges first (by summed strength), then the
    others by seed score × strength; ties by id. Pure."""
    score = {s.memory.id: s.score for s in seeds}
    skip = set(score) | set(exclude)
    kinds = set(types)
    best: dict[str, dict[str, float]] = {i: {} for i in score}  # seed → neighbour → strength
    for r in relations:
        if r.type == "MENTIONS" or (kinds and r.type not in kinds) or r.strength < min_strength:
            continue
        for seed, other in ((r.source_id, r.target_id), (r.target_id, r.source_id)):
            if seed in best and other not in skip:
                row = best[seed]
                row[other] = max(row.get(other, 0.0), r.strength)
    linked: dict[str, list[tuple[str, float]]] = {}
    for seed, row in best.items():
        kept = sorted(row.items(), key=lambda kv: (-kv[1], kv[0]))[:per_seed]
        for other, strength in kept:
            linked.setdefault(other, []).append((seed, strength))
    links = [
        Link(i, tuple(sorted(ss, key=lambda x: (-x[1], -score[x[0]], x[0]))))
        for i, ss in linked.items()
    ]

    def order(link: Link) -> tuple[int, float, str]:
        if link.bridge:
            return (0, -link.strength, link.id)
        seed, strength = link.seeds[0]
        return (1, -score[seed] * strength, link.id)

    return sorted(links, key=order)


def link_candidate(
    link: Link, memory: Memory, seeds: Mapping[str, ScoredCandidate]
) -> ExpandedCandidate:
    """The expanded result for a relation link (the score rule in the module doc)."""
    if link.bridge:
        factor = min(1.0, link.strength)
        base = max(seeds[s].score for s, _ in link.seeds)
        kind, source = Expansion.BRIDGE, ",".join(s for s, _ in link.seeds)
    else:
        seed, factor = link.seeds[0]
        base, kind, source = seeds[seed].score, Expansion.RELATION, seed
    return ExpandedCandidate(
        memory=memory,
        score=base * factor,
        components={EXPANSION_COMPONENT: factor},
        streams={},
        expansion=kind.value,
        expanded_from=source,
    )


def entity_candidate(
    memory: Memory, seeds: Sequence[ScoredCandidate], factor: float
) -> ExpandedCandidate:
    """The expanded result for a memory sharing an entity with the seeds (the best such seed;
    the best seed of all when the memory does not list its entities)."""
    mine = set(memory.entities)
    sharing = [s for s in seeds if mine & set(s.memory.entities)] or list(seeds[:1])
    seed = max(sharing, key=lambda s: s.score)
    return ExpandedCandidate(
        memory=memory,
        score=seed.score * factor,
        components={EXPANSION_COMPONENT: factor},
        streams={},
        expansion=Expansion.ENTITY.value,
        expanded_from=seed.memory.id,
    )


def scope_of(flt: Filter, opts: ExpandOptions) -> Filter:
    """What expanded memories must match: the request's filter, its tags only when asked."""
    return flt if opts.in_scope else replace(flt, tags=())


def merge_expanded(
    ranked: Sequence[ScoredCandidate], expanded: Sequence[ScoredCandidate]
) -> list[ScoredCandidate]:
    """Ranked and expanded results by score; on a tie the ranked result comes first."""
    both = [(s, 0, i) for i, s in enumerate(ranked)] + [(s, 1, i) for i, s in enumerate(expanded)]
    both.sort(key=lambda t: (-t[0].score, t[1], t[2]))
    return [s for s, _, _ in both]


async def expand(
    graph: GraphPort,
    lookup: Lookup,
    tenant: str,
    ranked: Sequence[ScoredCandidate],
    flt: Filter,
    opts: ExpandOptions,
    limit: int,
    timeout: float,
) -> list[ExpandedCandidate]:
    """The expanded results for ``ranked`` (best first), best first, at most
    ``opts.limit``. Seeds: the first ``min(opts.seeds, limit)``."""
    seeds = list(ranked[: min(opts.seeds, limit)])
    if not seeds or not opts.on:
        return []
    have = {s.memory.id for s in ranked}
    scope = scope_of(flt, opts)
    fetch = FETCH_FACTOR * opts.limit

    async def by_relations() -> list[Link]:
        if not opts.relations:
            return []
        relations = await graph.relations(tenant, [s.memory.id for s in seeds], timeout=timeout)
        return relation_links(
            seeds,
            relations,
            types=opts.types,
            min_strength=opts.min_strength,
            per_seed=opts.per_seed,
            exclude=have,
        )[:fetch]

    async def by_entities() -> list[str]:
        keys = list(dict.fromkeys(k for s in seeds for k in s.memory.entities))[:MAX_ENTITY_KEYS]
        if not opts.entities or not keys:
            return []
        hits = await graph.search(tenant, keys, [], scope, fetch + len(have), timeout=timeout)
        return [h.id for h in hits if h.id not in have][:fetch]

    links, entity_ids = await asyncio.gather(by_relations(), by_entities())
    wanted = list(dict.fromkeys([link.id for link in links] + entity_ids))
    memories = await lookup.many(tenant, wanted, timeout) if wanted else {}
    return _assemble(links, entity_ids, memories, seeds, scope, opts)


def _assemble(
    links: Sequence[Link],
    entity_ids: Sequence[str],
    memories: Mapping[str, Memory],
    seeds: Sequence[ScoredCandidate],
    scope: Filter,
    opts: ExpandOptions,
) -> list[ExpandedCandidate]:
    """Relation links first, in their order, then entity neighbours, each once: those
    read back, important enough and in scope, at most ``opts.limit``."""

    def keep(mid: str) -> Memory | None:
        m = memories.get(mid)
        if m is None or m.importance < opts.min_importance or not matches(m, scope):
            return None
        return m

    by_id = {s.memory.id: s for s in seeds}
    out: list[ExpandedCandidate] = []
    taken: set[str] = set()
    for link in links:
        if (m := keep(link.id)) is not None:
            out.append(link_candidate(link, m, by_id))
            taken.add(link.id)
    for mid in entity_ids:
        if mid not in taken and (m := keep(mid)) is not None:
            out.append(entity_candidate(m, seeds, opts.entity_factor))
            taken.add(mid)
    return out[: opts.limit]
