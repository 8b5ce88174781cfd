"""The plan of a recall: its request validated, with the settings it depends on."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from engram_core import validation as v
from engram_core.model import META_PATTERN, Filter
from engram_core.profiles import profile_named
from engram_core.state import StateMode
from engram_core.timequery import resolve_window
from engram_gateway.service.expand import plan_expansion
from engram_gateway.service.models import QueryModels
from engram_gateway.service.multiquery import check_per_query_limit, check_queries
from engram_gateway.service.pagerank import check_alpha
from engram_gateway.service.postrank import PostRankOptions
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.plan import Plan, RecallMode, RecallRequest
from engram_gateway.service.trending import check_sort, is_trending


def plan_recall(
    req: RecallRequest, cfg: ReadConfig, models: QueryModels, now: datetime, tenant: str = ""
) -> Plan:
    """``req`` validated; an invalid field is InvalidArgument naming it."""
    limits = cfg.limits
    flt = _filter(req, cfg, now)
    limit = v.check_limit(req.limit, "limit", limits.default_limit, limits.max_limit)
    post = _post(req, cfg, limit)
    state_mode = req.state_mode
    if state_mode is None:
        state_mode = StateMode.ALL if req.include_archived else StateMode.CURRENT
    queries = check_queries(req.queries, limits, cfg.candidates.max_queries)
    sort = check_sort(req.sort, is_trending(req.query, queries))
    # "" / "*" beside `queries` (or alone: trending) is no text to search for.
    bare = req.query.strip() in ("", "*")
    decompose = cfg.candidates.decompose if req.decompose is None else req.decompose
    return Plan(
        query="" if bare else v.check_query(req.query, "query", limits),
        queries=queries,
        per_query_limit=check_per_query_limit(req.per_query_limit, cfg.max_pool),
        decompose=decompose and not bare,
        # A setting, not a request field: measured, it has not paid (docs/benchmarks.md).
        feedback=cfg.feedback.default and sort is None,
        sort=sort,
        limit=limit,
        flt=flt,
        fusion=req.fusion,
        min_sequence=req.min_sequence,
        mode=req.mode,
        state_mode=state_mode,
        post=post,
        escalation_floor=cfg.escalation_floor,
        expand=plan_expansion(req.expand, cfg.expand, limits.max_limit),
        graph_alpha=check_alpha(req.graph_alpha, cfg.graph_rerank.alpha),
        # Trending has no text for a model to work on; a sent embedding is the vector.
        hyde=models.wants_hyde(req.hyde) and sort is None and not req.embedding,
        rerank=models.wants_rerank(req.rerank) and sort is None,
        focus=v.check_focus(req.focus, "focus", limits),
        recency_bias=req.recency_bias,
        embedding=v.check_embedding(req.embedding, "embedding", has_query=not bare),
        profile=profile_of(req, cfg, tenant),
    )


def profile_of(req: RecallRequest, cfg: ReadConfig, tenant: str) -> str:
    """The recall's profile: the request's, else the tenant's, else the gateway's."""
    name = req.profile or cfg.tenant_profiles.get(tenant, "") or cfg.profile
    return profile_named(name).name


def _filter(req: RecallRequest, cfg: ReadConfig, now: datetime) -> Filter:
    limits = cfg.limits
    start, end = v.check_time_range(req.start, req.end)
    window = resolve_window(
        req.time_query, start, end, now=now, timezone=req.timezone or cfg.default_timezone
    )
    types = v.check_types(req.types, "types", limits)
    excluded = v.check_types(req.exclude_types, "exclude_types", limits)
    if META_PATTERN not in types and META_PATTERN not in excluded:
        # Consolidation's internal summaries stay out of recall unless asked for.
        excluded = (*excluded, META_PATTERN)
    return Filter(
        tags=v.check_tags(req.tags, "tags", limits),
        tag_mode=req.tag_mode,
        tag_match=req.tag_match,
        exclude_tags=v.check_tags(req.exclude_tags, "exclude_tags", limits),
        types=types,
        exclude_types=excluded,
        start=window.start,
        end=window.end,
        include_archived=req.include_archived,
    )


def _post(req: RecallRequest, cfg: ReadConfig, limit: int) -> PostRankOptions:
    p = cfg.post
    return PostRankOptions(
        limit=limit,
        min_score=req.min_score,
        diversify_by=req.diversify_by,
        max_per_group=req.max_per_group or p.default_max_per_group,
        token_budget=req.token_budget,
        near_duplicate_threshold=p.near_duplicate_threshold,
        shingle_size=p.shingle_size,
        floor_ratio=p.floor_ratio,
        max_gap=p.max_gap,
        min_keep=p.min_keep,
        chars_per_token=p.chars_per_token,
        near_duplicates=p.near_duplicates,
    )


def rank_limit(plan: Plan, cfg: ReadConfig, models: QueryModels) -> int:
    """How many results to ask scoring for: more than ``limit`` when post-ranking or
    state_mode may cut some, so the answer still fills ``limit``."""
    o = plan.post
    if plan.mode is RecallMode.HYBRID_GRAPH:
        # The rerank lifts results from below the limit, so it needs them ranked.
        pool = min(cfg.graph_rerank.pool, cfg.max_pool, cfg.limits.max_limit)
        return max(pool, rank_limit(replace(plan, mode=RecallMode.HYBRID), cfg, models))
    # The cross-encoder may lift a result from below `limit`, so it sees its whole top N.
    least = max(plan.limit, min(models.rank_depth(plan.rerank), cfg.limits.max_limit))
    cuts = (
        o.min_score > 0
        or o.group_by is not None
        or o.near_duplicates
        or o.floor_ratio > 0
        or o.max_gap > 0
        or plan.state_mode is StateMode.CURRENT
    )
    if not cuts:
        return least
    # The scoring service refuses a limit above max_limit (it would degrade to local RRF).
    wider = min(cfg.post.overfetch * plan.limit, cfg.max_pool, cfg.limits.max_limit)
    return max(least, wider)
