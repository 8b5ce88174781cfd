"""Once per recall, before its first round (escalation reuses them): HyDE's answer and
the decomposer's sub-queries. Their models bound themselves and report into the recall's
model trace (service/models.py), not ``degraded``."""

from __future__ import annotations

from engram_gateway.service.multiquery import decomposed
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults


class Hyde(StageDefaults):
    name = "hyde"

    def applies(self, ctx: RecallContext) -> bool:
        return ctx.plan.hyde and bool(ctx.plan.hyde_subject)

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        subject = ctx.plan.hyde_subject
        ctx.hypothesis = await ctx.deps.models.hypothesis(subject, ctx.deadline)


class Decompose(StageDefaults):
    name = "decompose"

    def applies(self, ctx: RecallContext) -> bool:
        return ctx.plan.decompose

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        parts = await decomposed(ctx.deps.decomposer, ctx.plan.query, ctx.rules)
        ctx.decomposed = tuple(parts)
