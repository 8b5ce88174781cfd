"""hybrid_graph mode: the fused ranking re-ordered by personalised PageRank (pagerank.py)."""

from __future__ import annotations

from dataclasses import replace

from engram_gateway.service.deadline import Budget
from engram_gateway.service.pagerank import graph_rerank
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults
from engram_gateway.service.recall.plan import RecallMode


class GraphRerank(StageDefaults):
    name = "graph_rerank"

    def applies(self, ctx: RecallContext) -> bool:
        return ctx.plan.mode is RecallMode.HYBRID_GRAPH and len(ctx.ranked) > 1

    def share(self, config: ReadConfig) -> Budget | None:
        return config.expand_budget  # the steps after ranking share one budget setting

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        ranked = ctx.ranked
        relations = await ctx.memo.relations([s.memory.id for s in ranked], timeout)
        config = replace(ctx.deps.config.graph_rerank, alpha=ctx.plan.graph_alpha)
        ctx.ranked = graph_rerank(ranked, relations, config)
