"""The end of a round: post-ranking (service/postrank.py) makes the answer."""

from __future__ import annotations

from engram_core import scoring
from engram_gateway.service.multiquery import with_provenance
from engram_gateway.service.ports import RecallResult
from engram_gateway.service.postrank import postrank
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults


class Provenance(StageDefaults):
    """A pinned focus first, and each result's sub-queries among its streams; after the
    ranking, so scoring never sees them."""

    name = "provenance"

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        pinned = scoring.pinned_first(ctx.ranked, ctx.plan.focus)
        ctx.ranked = with_provenance(pinned, ctx.found_by)


class Answer(StageDefaults):
    name = "answer"

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        post = postrank(ctx.ranked, ctx.plan.post)
        ctx.finish(
            RecallResult(
                results=tuple(post.results),
                streams=ctx.streams,
                degraded=tuple(ctx.degraded),
                context=post.context,
                context_tokens=post.tokens,
                cut=post.cut_counts(),
            )
        )
