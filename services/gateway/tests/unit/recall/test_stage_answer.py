"""Provenance and Answer: the round's result out of the ranking."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engram_core.scoring import Focus, StreamScore
from engram_gateway.service.recall.stages.answer import Answer, Provenance

A = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
B = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"


async def test_a_pinned_focus_comes_first_and_sub_queries_are_named(stages: Any) -> None:
    ctx = stages.ctx(focus=Focus(ids=(B,), pinned=True))
    pinned = stages.scored(B, 0.1, "beta")
    pinned = replace(pinned, components={"focus_id": 1.0})  # as scoring marks a focus match
    ctx.ranked = [stages.scored(A, 0.9, "alpha"), pinned]
    ctx.found_by = {A: {1: StreamScore(0.5, 1)}}
    await stages.run(ctx, Provenance())
    assert [s.memory.id for s in ctx.ranked] == [B, A]
    assert "query:1" in ctx.ranked[1].streams


async def test_the_answer_is_post_ranked_and_says_what_was_read_and_what_failed(
    stages: Any,
) -> None:
    ctx = stages.ctx(limit=1)
    ctx.ranked = [stages.scored(A, 0.9, "alpha"), stages.scored(B, 0.5, "beta")]
    ctx.streams, ctx.degraded = ("vector", "lexical"), ["context"]
    await stages.run(ctx, Answer())
    assert ctx.result is not None
    assert [s.memory.id for s in ctx.result.results] == [A]
    assert (ctx.result.streams, ctx.result.degraded) == (("vector", "lexical"), ("context",))
