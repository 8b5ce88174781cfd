"""The state stage: what is not current is left out, and a superseded memory gives its
place to the head(s) of its INVALIDATED_BY/EVOLVED_INTO chain. When the graph fails,
only the memories' own fields say what is current."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from engram_core.model import Relation
from engram_core.scoring import ScoredCandidate
from engram_core.state import StateMode, apply_state, chain_frontier, heads_to_fetch, validity
from engram_gateway.service.deadline import Budget
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.pipeline import Deps, RecallContext, StageDefaults
from engram_gateway.service.relation_memo import RelationMemo


class State(StageDefaults):
    name = "state"

    def __init__(self, when_empty: bool = True) -> None:
        # False: nothing ranked, nothing to check (a listing's empty page).
        self._when_empty = when_empty

    def applies(self, ctx: RecallContext) -> bool:
        wanted = self._when_empty or bool(ctx.ranked)
        return ctx.plan.state_mode is StateMode.CURRENT and wanted

    def share(self, config: ReadConfig) -> Budget | None:
        return config.relations_budget

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        # Supersession needs the graph's edges; a mode without the graph (a single-stream
        # baseline) checks only the memories' own fields.
        graph = "graph" in ctx.backends and "graph" not in ctx.degraded
        ctx.ranked = await current(ctx.deps, ctx.memo, ctx.ranked, graph, timeout)

    def fallback(self, ctx: RecallContext) -> None:
        now = ctx.deps.clock()
        ctx.ranked = [s for s in ctx.ranked if validity(s.memory, now) is None]


async def current(
    deps: Deps,
    memo: RelationMemo,
    ranked: Sequence[ScoredCandidate],
    graph: bool,
    timeout: float,
) -> list[ScoredCandidate]:
    """``ranked`` with what is not current left out or replaced by its chain's heads."""
    now = deps.clock()
    ids = [s.memory.id for s in ranked]
    relations: list[Relation] = []
    if graph and ids:
        asked: set[str] = set(ids)
        relations = await memo.relations(ids, timeout)
        for _ in range(deps.config.supersession_max_hops):
            frontier = chain_frontier(ids, relations, asked)
            if not frontier:
                break
            asked.update(frontier)
            relations += await memo.relations(frontier, timeout)
    have = {s.memory.id: s.memory for s in ranked}
    missing = heads_to_fetch(ids, relations, have)
    fetched = await deps.lookup.many(memo.tenant, missing, timeout) if missing else {}
    out = apply_state(
        ranked,
        relations,
        mode=StateMode.CURRENT,
        now=now,
        memory_of=lambda s: s.memory,
        memories=fetched,
        substitute=lambda s, head: replace(s, memory=head),
    )
    return out.items
