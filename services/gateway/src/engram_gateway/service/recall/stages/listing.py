"""A trending recall has no text: the memories passing the filters, best first by the
plan's sort (the lexical service's listing)."""

from __future__ import annotations

from engram_core.ordering import Sort
from engram_gateway.service.deadline import answered_within
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults
from engram_gateway.service.trending import TRENDING_STREAM, scored


class Listing(StageDefaults):
    """Not degradable: without the listing there is no answer."""

    name = "listing"

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        plan, lexical = ctx.plan, ctx.deps.lexical
        sort, limit = plan.sort or Sort.IMPORTANCE, ctx.rank_limit
        listed = await answered_within(
            "lexical",
            ctx.deadline.cap(ctx.deps.config.backend_timeout_s),
            lambda t: lexical.top(ctx.tenant, plan.flt, sort, limit, timeout=t),
        )
        ctx.ranked = scored(listed, sort)
        ctx.streams = (TRENDING_STREAM,)
