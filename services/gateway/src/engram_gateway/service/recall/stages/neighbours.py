"""The context stage: the best candidates' timeline neighbours join the candidates.

Neighbours come from the vector store, so a mode without it (a single-stream baseline)
goes without; it runs for a profile with ``timeline_context`` (chat turns, whose answer is
often the turn after the one that matches), and ``seeds=0`` turns it off.
"""

from __future__ import annotations

from engram_core import scoring
from engram_gateway.service.context import with_neighbours
from engram_gateway.service.deadline import Budget
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults
from engram_gateway.service.recall.stages.windows import windows

# Seeds are picked before anyone has neighbours, so the context component stays out.
_SEED_WEIGHTS = scoring.Weights(context=0.0)


class Neighbours(StageDefaults):
    name = "context"

    def applies(self, ctx: RecallContext) -> bool:
        cfg = ctx.deps.config.context
        return (
            ctx.profile.timeline_context
            and bool(cfg.seeds)
            and ctx.plan.mode.hybrid
            and "vector" in ctx.answers
        )

    def share(self, config: ReadConfig) -> Budget | None:
        return config.context_budget

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        cfg = ctx.deps.config.context
        # Seeds by the core formula's defaults: the label and time components move turns
        # that no stream ranks high to the top, and those need their neighbours too.
        seeds = scoring.rank(
            ctx.candidates,
            scoring.Query(now=ctx.deps.clock(), text=ctx.text, tags=ctx.plan.flt.tags),
            scoring.Params(limit=cfg.seeds, weights=_SEED_WEIGHTS),
        )
        found = await windows(ctx, [s.memory for s in seeds], timeout)
        if found:
            ctx.candidates = with_neighbours(ctx.candidates, found, cfg.distance, cfg.thread)
