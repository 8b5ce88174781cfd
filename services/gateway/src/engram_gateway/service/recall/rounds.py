"""A recall's answer: its stages run once, or twice with escalation."""

from __future__ import annotations

import logging
from dataclasses import replace

from opentelemetry.trace import Tracer

from engram_core import scoring
from engram_core.errors import DeadlineExceeded, Unavailable
from engram_core.relations import ORIGIN_USER
from engram_gateway.service import metrics
from engram_gateway.service.deadline import Deadline
from engram_gateway.service.merge import STREAM_OF_BACKEND, pool_size
from engram_gateway.service.models import ModelTrace, tracing
from engram_gateway.service.ports import RecallResult
from engram_gateway.service.postrank import escalated_pool, max_rrf_score
from engram_gateway.service.recall.pipeline import Deps, RecallContext, run
from engram_gateway.service.recall.plan import Plan, RecallMode
from engram_gateway.service.recall.stages import PREPARE, SEARCH, TRENDING
from engram_gateway.service.relation_memo import RelationMemo

log = logging.getLogger(__name__)
# What a trending recall reads: the lexical listing, and the graph for supersession.
_TRENDING_BACKENDS = frozenset({"lexical", "graph"})


async def answer(
    deps: Deps, tenant: str, plan: Plan, deadline: Deadline, tracer: Tracer
) -> RecallResult:
    """The answer to ``plan``; a stage that failed is named in its ``degraded``."""
    if plan.sort is not None:
        memo = RelationMemo(deps.graph, tenant, ORIGIN_USER)  # the state step's edges
        ctx = RecallContext(deps, tenant, plan, deadline, tracer, memo, _TRENDING_BACKENDS)
        return _result(await run(TRENDING, ctx))
    memo = _memo(deps, tenant, plan)
    ctx = RecallContext(deps, tenant, plan, deadline, tracer, memo, plan.mode.backends)
    trace = ModelTrace()
    with tracing(trace):  # what the query-side models did (service/models.py)
        await run(PREPARE, ctx)
        result = await _escalating(ctx)
    return trace.applied_to(result)


def _memo(deps: Deps, tenant: str, plan: Plan) -> RelationMemo:
    # Only agents' edges, unless a stage reads the others too.
    every_edge = plan.mode is RecallMode.HYBRID_GRAPH or deps.config.relation_system_edges
    return RelationMemo(deps.graph, tenant, "" if every_edge else ORIGIN_USER)


async def _round(ctx: RecallContext, pool: int) -> RecallContext:
    return await run(SEARCH, ctx.next_round(pool, _memo(ctx.deps, ctx.tenant, ctx.plan)))


def _result(ctx: RecallContext) -> RecallResult:
    if ctx.result is None:
        raise RuntimeError("a recall's stages ended without an answer")
    return ctx.result


async def _escalating(ctx: RecallContext) -> RecallResult:
    """The round, run again once with a wider pool when its best score is weak."""
    plan, max_pool = ctx.plan, ctx.deps.config.max_pool
    pool = pool_size(plan.limit, max_pool)
    first = await _round(ctx, pool)
    result = _result(first)
    if plan.escalation_floor <= 0:
        return result
    wider = escalated_pool(
        result.results[0].score if result.results else None,
        floor=plan.escalation_floor,
        pool=pool,
        max_pool=max_pool,
        saturated=first.saturated,
        score_scale=_score_scale(plan, result),
    )
    if wider is None:
        return result
    try:
        second = _result(await _round(ctx, wider))
    except (Unavailable, DeadlineExceeded) as exc:
        log.warning("escalated recall failed, keeping the first answer: %s", exc)
        metrics.escalations.add(1, {"outcome": "failed"})
        return result
    metrics.escalations.add(1, {"outcome": "ok"})
    return replace(second, escalated=True)


def _score_scale(plan: Plan, result: RecallResult) -> float:
    """The best score possible: weighted fusion (the scoring service's default) scores
    near 0..1; RRF's best is a share of its streams' weights."""
    if plan.fusion is not scoring.Fusion.RRF:
        return 1.0
    weights = scoring.Weights()
    streams = [STREAM_OF_BACKEND[b] for b in result.streams]
    return max_rrf_score(
        [weights.get(scoring.RRF_WEIGHTS[s]) for s in streams], scoring.DEFAULT_RRF_K
    )
