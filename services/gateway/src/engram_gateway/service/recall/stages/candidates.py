"""The streams' hits merged into candidates; hits that came without their memory read
from the stores, or dropped when that read fails."""

from __future__ import annotations

import logging

from engram_core.errors import DeadlineExceeded, Unavailable
from engram_core.model import Memory
from engram_gateway.service import metrics
from engram_gateway.service.merge import merge, missing_memories
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults

log = logging.getLogger(__name__)


class Candidates(StageDefaults):
    name = "candidates"

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        fetched: dict[str, Memory] = {}
        missing = missing_memories(ctx.answers)
        if missing:
            cap = ctx.deadline.cap(ctx.deps.config.backend_timeout_s)
            try:
                fetched = await ctx.deps.lookup.many(ctx.tenant, missing, cap)
            except (Unavailable, DeadlineExceeded) as exc:
                log.warning("%d hits without a memory dropped: %s", len(missing), exc)
        ctx.candidates = merge(ctx.answers, fetched)
        metrics.candidates.record(len(ctx.candidates))


class NoneFound(StageDefaults):
    """No candidate: the round's answer is empty, and says which streams answered."""

    name = "none_found"

    def applies(self, ctx: RecallContext) -> bool:
        return not ctx.candidates

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        ctx.finish()
