"""GraphRerank: hybrid_graph's PageRank over the fused ranking's edges."""

from __future__ import annotations

from typing import Any

from engram_core.model import Relation
from engram_gateway.service import RecallMode
from engram_gateway.service.recall.stages.graph_rerank import GraphRerank

A = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
B = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"
C = "0190f3a4-7b1c-7d2e-8f00-0000000000c1"


def ranked(stages: Any, mode: RecallMode) -> Any:
    h = stages.harness
    h.world.relations.append((h.tenant, Relation(A, C, "RELATES_TO", 1.0)))
    ctx = stages.ctx(mode=mode, graph_alpha=0.9)
    ctx.ranked = [stages.scored(A, 0.9), stages.scored(B, 0.8), stages.scored(C, 0.7)]
    return ctx


async def test_hybrid_graph_lifts_what_the_best_result_links_to(stages: Any) -> None:
    ctx = await stages.run(ranked(stages, RecallMode.HYBRID_GRAPH), GraphRerank())
    order = [s.memory.id for s in ctx.ranked]
    assert order.index(C) < order.index(B)
    assert ctx.degraded == []


async def test_other_modes_keep_the_fused_order(stages: Any) -> None:
    ctx = await stages.run(ranked(stages, RecallMode.HYBRID), GraphRerank())
    assert [s.memory.id for s in ctx.ranked] == [A, B, C]
    assert stages.harness.graph.calls == []


async def test_a_failing_graph_degrades_the_rerank_and_keeps_the_order(stages: Any) -> None:
    stages.harness.graph.fail = RuntimeError("graph down")
    ctx = await stages.run(ranked(stages, RecallMode.HYBRID_GRAPH), GraphRerank())
    assert ctx.degraded == ["graph_rerank"]
    assert [s.memory.id for s in ctx.ranked] == [A, B, C]
