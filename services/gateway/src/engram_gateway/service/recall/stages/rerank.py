"""The cross-encoder re-orders the top of the ranking (service/models.py), reading what
the preceding stage found before each memory."""

from __future__ import annotations

from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults


class Rerank(StageDefaults):
    """The model call bounds itself and reports a failure as a model's (``models_failed``)."""

    name = "rerank"

    def applies(self, ctx: RecallContext) -> bool:
        return ctx.plan.rerank

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        models = ctx.deps.models
        ctx.ranked = await models.rerank(ctx.text, ctx.ranked, ctx.deadline, ctx.before)
