"""Scoring: the ranker's order, or a local RRF while it is down."""

from __future__ import annotations

from typing import Any

from engram_core.scoring import Candidate, StreamScore
from engram_gateway.service.recall.stages.scoring import Scoring

A = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
B = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"


def ctx_with_two(stages: Any) -> Any:
    h = stages.harness
    ctx = stages.ctx("paint", limit=1)
    ctx.candidates = [
        Candidate(h.memory(A, "one"), streams={"keyword": StreamScore(1.0, 2)}),
        Candidate(h.memory(B, "two"), streams={"keyword": StreamScore(2.0, 1)}),
    ]
    return ctx


async def test_the_ranker_ranks_to_the_rank_limit(stages: Any) -> None:
    ctx = await stages.run(ctx_with_two(stages), Scoring())
    [call] = stages.harness.ranker.calls
    assert (call["query"], call["limit"]) == ("paint", ctx.rank_limit)
    assert ctx.rank_limit > 1  # post-ranking may cut: it over-fetches
    assert {s.memory.id for s in ctx.ranked} == {A, B}


async def test_a_failed_ranker_leaves_a_local_rrf_of_the_streams(stages: Any) -> None:
    stages.harness.ranker.fail = RuntimeError("scoring down")
    ctx = await stages.run(ctx_with_two(stages), Scoring())
    assert ctx.degraded == ["scoring"]
    assert [s.memory.id for s in ctx.ranked] == [B, A]  # the better stream rank first
