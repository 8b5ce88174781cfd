"""The memories stored around some others: the vector store's timeline windows.

Read by the context stage (neighbours of the best candidates) and the preceding stage
(what the reranker reads before each memory).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from engram_core.model import Filter, Hit, Memory
from engram_gateway.service.context import (
    NARROWING,
    NARROWINGS,
    Window,
    inside,
    seed_windows,
    window_filter,
)
from engram_gateway.service.recall.pipeline import RecallContext
from engram_gateway.service.recall.vectors import embedding_named, query_of
from engram_platform.settings import SEARCH_MANY_MAX_FILTERS
from engram_platform.telemetry import annotate


async def windows(
    ctx: RecallContext, around: Sequence[Memory], timeout: float
) -> list[list[Memory]]:
    """The memories of the timeline windows around ``around``; none when the request's
    filter leaves no window.

    A window that comes back full may leave memories out between the ones it holds, so
    its seeds' windows are read again narrower (context.NARROWING), and a window still
    full after context.NARROWINGS is dropped: no neighbours rather than made-up ones."""
    cfg = ctx.deps.config.context
    ends = time.monotonic() + timeout
    width, out = cfg.window_s, []
    full: list[Window] = []
    for _ in range(NARROWINGS + 1):
        found = [
            (w, f)
            for w in seed_windows(around, width)
            if (f := window_filter(ctx.plan.flt, w)) is not None
        ]
        left = max(ends - time.monotonic(), 0.001)
        hits = await _read(ctx, [f for _, f in found], left)
        full = []
        for (w, _), got in zip(found, hits, strict=True):
            if len(got) >= cfg.limit:
                full.append(w)
            else:
                out.append([h.memory for h in got if h.memory is not None])
        around = inside(around, full)
        if not around or width == 0:
            break
        width /= NARROWING
    if around:  # on the step's span: raise CONTEXT_LIMIT or set CONTEXT_THREAD_BY
        annotate("engram.context.windows_left_out", len(full))
    return out


async def _read(ctx: RecallContext, filters: Sequence[Filter], timeout: float) -> list[list[Hit]]:
    """One vector search per window filter, as many at once as a call takes."""
    step = SEARCH_MANY_MAX_FILTERS
    vector = ctx.plan.embedding
    query = query_of(ctx.dense, vector)
    limit = ctx.deps.config.context.limit
    search_many = ctx.deps.vector.search_many
    with embedding_named(vector):
        found = await asyncio.gather(
            *(
                search_many(ctx.tenant, filters[i : i + step], limit, **query, timeout=timeout)
                for i in range(0, len(filters), step)
            )
        )
    return [hits for part in found for hits in part]
