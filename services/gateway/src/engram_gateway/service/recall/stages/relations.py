"""The relation component: edges between the best candidates, from the graph service."""

from __future__ import annotations

from engram_gateway.service.deadline import Budget
from engram_gateway.service.merge import with_relations
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults


class Relations(StageDefaults):
    name = "relations"

    def applies(self, ctx: RecallContext) -> bool:
        # A graph signal: a mode that leaves the graph out (a single-stream baseline)
        # leaves it out too, and so does a graph that already failed.
        return (
            ctx.deps.config.relation_pool > 0
            and len(ctx.candidates) > 1
            and "graph" in ctx.backends
            and "graph" not in ctx.degraded
        )

    def share(self, config: ReadConfig) -> Budget | None:
        return config.relations_budget

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        cfg = ctx.deps.config
        top = [c.memory.id for c in ctx.candidates[: cfg.relation_pool]]
        relations = await ctx.memo.relations(top, timeout)
        ctx.candidates = with_relations(ctx.candidates, relations, cfg.relation_system_edges)
