"""The retrieval streams: every sub-query asks each of the mode's backends at once.

A stream that fails for any sub-query degrades the answer (and keeps it uncached); the
recall fails only when no stream answered at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from engram_core import scoring
from engram_core.errors import Unavailable
from engram_core.model import Hit
from engram_gateway.service.deadline import Budget
from engram_gateway.service.merge import vector_pool
from engram_gateway.service.models import hyde_text
from engram_gateway.service.multiquery import SubQuery, merge_answers, sub_queries
from engram_gateway.service.query import entity_keys, keywords
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults, attempt
from engram_gateway.service.recall.plan import RecallMode
from engram_gateway.service.recall.vectors import embedding_named, query_of

Call = tuple[Budget, Callable[[float], Awaitable[list[Hit]]]]


class Retrieve(StageDefaults):
    """Each stream is a degradable step of its own, named by its backend."""

    name = "retrieve"

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        subs = _subs(ctx)
        calls: dict[tuple[int, str], Call] = {}
        for i, sub in enumerate(subs):
            for name, call in _calls(ctx, sub).items():
                calls[(i, name)] = call
        if not calls:  # graph alone, and the query names nothing it could look up
            ctx.finish()
            return
        budgets = {key: ctx.deadline.budget(b) for key, (b, _) in calls.items()}
        outcomes = await asyncio.gather(
            *(attempt(ctx.tracer, key[1], budgets[key], c) for key, (_, c) in calls.items())
        )
        per_query: list[dict[str, list[Hit]]] = [{} for _ in subs]
        for (i, name), hits in zip(calls, outcomes, strict=True):
            if hits is not None:
                per_query[i][name] = hits
        for i, name in calls:
            if name not in per_query[i]:
                ctx.degrade(name)
        if not any(per_query):
            raise Unavailable(f"no retrieval stream answered ({', '.join(ctx.degraded)})")
        ctx.saturated = any(
            len(hits) >= subs[i].pool for i, got in enumerate(per_query) for hits in got.values()
        )
        ctx.answers, ctx.found_by = merge_answers(per_query)
        ctx.streams = tuple(ctx.answers)


def _subs(ctx: RecallContext) -> list[SubQuery]:
    plan = ctx.plan
    texts = [*([plan.query] if plan.query else []), *plan.queries, *ctx.decomposed]
    return sub_queries(
        texts, ctx.pool, plan.per_query_limit, ctx.deps.config.candidates.max_queries
    )


def _calls(ctx: RecallContext, sub: SubQuery) -> dict[str, Call]:
    """One sub-query's calls by backend."""
    plan = ctx.plan
    dense = ctx.dense
    if sub.text != ctx.text:
        dense = ctx.dense_of(sub.text)
        if sub.text == plan.hyde_subject:  # `queries` alone: HyDE answered the first of them
            dense = hyde_text(dense, ctx.hypothesis)
    # An explicit embedding stands for `query` only; other sub-queries embed their text.
    vector = plan.embedding if sub.text == plan.query else ()
    return stream_calls(ctx, sub.text, dense, sub.pool, vector)


def stream_calls(
    ctx: RecallContext, text: str, dense: str, pool: int, vector: Sequence[float] = ()
) -> dict[str, Call]:
    """The retrieval calls for ``text`` by backend: ``dense`` is what the vector embeds,
    unless the client sent the ``vector`` itself."""
    deps, flt, wanted = ctx.deps, ctx.plan.flt, ctx.plan.mode.backends
    cfg, tenant = deps.config, ctx.tenant
    calls: dict[str, Call] = {}
    if "vector" in wanted:
        size = vector_pool(pool, flt, cfg.tag_pool_factor, cfg.max_pool)

        async def search(t: float) -> list[Hit]:
            with embedding_named(vector):
                return await deps.vector.search(
                    tenant, flt, size, **query_of(dense, vector), timeout=t
                )

        calls["vector"] = (cfg.vector_budget, search)
    if "lexical" in wanted:
        calls["lexical"] = (
            cfg.lexical_budget,
            lambda t: deps.lexical.search(tenant, text, flt, pool, timeout=t),
        )
    if "graph" in wanted and searches_graph(ctx):
        ents, words = entity_keys(text, ctx.rules), keywords(text)
        if ents or words:
            calls["graph"] = (
                cfg.graph_budget,
                lambda t: deps.graph.search(tenant, ents, words, flt, pool, timeout=t),
            )
    return calls


def searches_graph(ctx: RecallContext) -> bool:
    """Whether the graph stream is searched. Default hybrid (weighted fusion) leaves it
    out: its weight there is 0, so it would cost a search and change no ranking. The
    graph service still answers relations and supersession for the candidates."""
    plan = ctx.plan
    return (
        plan.mode is not RecallMode.HYBRID
        or plan.fusion is scoring.Fusion.RRF
        or ctx.deps.config.hybrid_graph_stream
    )
