"""For the reranker: the content stored just before each memory it will read.

Read from the vector store's timeline, so a mode without it goes without, and only for a
profile with ``question_before``; a failed read degrades the answer as ``context`` (the
same windows as the context stage).
"""

from __future__ import annotations

from engram_gateway.service.context import preceding
from engram_gateway.service.deadline import Budget
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults
from engram_gateway.service.recall.stages.windows import windows


class Preceding(StageDefaults):
    name = "context"

    def applies(self, ctx: RecallContext) -> bool:
        return (
            ctx.plan.rerank
            and ctx.profile.question_before
            and ctx.deps.models.reads_preceding
            and "vector" in ctx.answers
            and bool(ctx.ranked)
        )

    def share(self, config: ReadConfig) -> Budget | None:
        return config.context_budget

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        head = [s.memory for s in ctx.ranked[: ctx.deps.models.config.rerank_top_n]]
        found = await windows(ctx, head, timeout)
        thread = ctx.deps.config.context.thread
        ctx.before = {i: m.content for i, m in preceding(head, found, thread).items()}
