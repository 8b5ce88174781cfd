"""Expansion (service/expand.py): memories linked to the best results join them by score;
those not current are dropped or replaced by their heads, like the ranked ones were."""

from __future__ import annotations

from engram_core.relations import ORIGIN_USER
from engram_core.scoring import ScoredCandidate
from engram_core.state import StateMode
from engram_gateway.service.deadline import Budget
from engram_gateway.service.expand import expand, merge_expanded
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults
from engram_gateway.service.recall.stages.state import current
from engram_gateway.service.relation_memo import RelationMemo


class Expand(StageDefaults):
    name = "expand"

    def applies(self, ctx: RecallContext) -> bool:
        return ctx.plan.expand.on and bool(ctx.ranked)

    def share(self, config: ReadConfig) -> Budget | None:
        return config.expand_budget

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        deps, plan, ranked = ctx.deps, ctx.plan, ctx.ranked
        found: list[ScoredCandidate] = list(
            await expand(
                deps.graph,
                deps.lookup,
                ctx.tenant,
                ranked,
                plan.flt,
                plan.expand,
                plan.limit,
                timeout,
            )
        )
        if found and plan.state_mode is StateMode.CURRENT:
            memo = RelationMemo(deps.graph, ctx.tenant, ORIGIN_USER)  # the state step's edges
            found = await current(deps, memo, found, True, timeout)
        ctx.ranked = merge_expanded(ranked, found)
