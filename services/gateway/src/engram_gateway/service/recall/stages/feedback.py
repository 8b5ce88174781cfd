"""Pseudo-relevance feedback (service/feedback.py): the first search's best candidates ask
the lexical and vector streams once more, and the candidates are merged again from both
answers. Opt-in per request: it costs a second search of each stream."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from engram_core.model import Hit
from engram_core.scoring import DEFAULT_RRF_K, Candidate
from engram_gateway.service.deadline import Budget
from engram_gateway.service.feedback import added, blended, expansion_terms, feedback_text
from engram_gateway.service.merge import vector_pool
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults
from engram_gateway.service.recall.stages.candidates import Candidates


class Feedback(StageDefaults):
    """A failure or timeout keeps the first search's candidates (``degraded``)."""

    name = "feedback"

    def applies(self, ctx: RecallContext) -> bool:
        return ctx.plan.feedback and bool(ctx.candidates)

    def share(self, config: ReadConfig) -> Budget | None:
        return config.feedback_budget

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        cfg = ctx.deps.config.feedback
        top = ctx.candidates[: cfg.docs]
        docs = [c.memory.content for c in top]
        calls: dict[str, Awaitable[list[Hit]]] = {}
        if "lexical" in ctx.answers and cfg.lexical_weight > 0:
            terms = expansion_terms(ctx.text, docs, [_weight(c) for c in top], cfg.terms)
            if terms:
                calls["lexical"] = ctx.deps.lexical.search(
                    ctx.tenant, " ".join(terms), ctx.plan.flt, ctx.pool, timeout=timeout
                )
        if "vector" in ctx.answers and cfg.vector_weight > 0 and not ctx.plan.embedding:
            calls["vector"] = ctx.deps.vector.search(
                ctx.tenant,
                ctx.plan.flt,
                _vector_size(ctx),
                query=feedback_text(ctx.dense, docs, cfg.vector_chars),
                timeout=timeout,
            )
        if not calls:
            return
        found = dict(zip(calls, await asyncio.gather(*calls.values()), strict=True))
        answers = dict(ctx.answers)
        if "lexical" in found:
            first = answers["lexical"]
            answers["lexical"] = added(first, found["lexical"], cfg.lexical_weight, ctx.pool)
        if "vector" in found:
            first = answers["vector"]
            answers["vector"] = blended(first, found["vector"], cfg.vector_weight, len(first))
        ctx.answers = answers
        await Candidates().run(ctx, timeout)


def _weight(c: Candidate) -> float:
    """A feedback document's weight: its local RRF over the streams that found it, the
    order the candidates come in."""
    return sum(1.0 / (DEFAULT_RRF_K + s.rank) for s in c.streams.values())


def _vector_size(ctx: RecallContext) -> int:
    cfg = ctx.deps.config
    return vector_pool(ctx.pool, ctx.plan.flt, cfg.tag_pool_factor, cfg.max_pool)
