"""The scoring service ranks the candidates; while it is down, a local RRF of the streams
keeps the answer ranked."""

from __future__ import annotations

from engram_core import scoring
from engram_gateway.service.deadline import Budget
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults

_PLAIN_RRF_WEIGHTS = scoring.Weights(context=0.0)


class Scoring(StageDefaults):
    name = "scoring"

    def share(self, config: ReadConfig) -> Budget | None:
        return config.scoring_budget

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        plan = ctx.plan
        ctx.ranked = await ctx.deps.ranker.rank(
            ctx.text,
            ctx.candidates,
            plan.fusion,
            ctx.rank_limit,
            plan.flt.tags,
            timeout=timeout,
            focus=plan.focus,
            recency_bias=plan.recency_bias,
            profile=plan.profile,
        )

    def fallback(self, ctx: RecallContext) -> None:
        plan = ctx.plan
        ctx.ranked = scoring.rank(
            ctx.candidates,
            scoring.Query(
                now=ctx.deps.clock(), text=ctx.text, tags=plan.flt.tags, focus=plan.focus
            ),
            scoring.Params(
                fusion=scoring.Fusion.RRF, limit=ctx.rank_limit, weights=_PLAIN_RRF_WEIGHTS
            ),
        )
