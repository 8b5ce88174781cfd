"""A pinned focus's memories join the candidates when no stream found them."""

from __future__ import annotations

import logging

from engram_core.errors import DeadlineExceeded, Unavailable
from engram_core.filters import matches
from engram_core.scoring import Candidate
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults

log = logging.getLogger(__name__)


class Pinned(StageDefaults):
    """Only those passing the request's filters join; the state stage still applies. A
    failed read leaves them out without degrading the answer."""

    name = "pinned"

    def applies(self, ctx: RecallContext) -> bool:
        return ctx.plan.focus.pinned and bool(ctx.plan.focus.ids)

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        have = {c.memory.id for c in ctx.candidates}
        missing = [i for i in ctx.plan.focus.ids if i not in have]
        if not missing:
            return
        cap = ctx.deadline.cap(ctx.deps.config.backend_timeout_s)
        try:
            found = await ctx.deps.lookup.many(ctx.tenant, missing, cap)
        except (Unavailable, DeadlineExceeded) as exc:
            log.warning("pinned memories not fetched: %s", exc)
            return
        flt = ctx.plan.flt
        extra = [Candidate(found[i]) for i in missing if i in found and matches(found[i], flt)]
        ctx.candidates = [*ctx.candidates, *extra]
