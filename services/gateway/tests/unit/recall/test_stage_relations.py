"""Relations: the relation component from edges between the best candidates."""

from __future__ import annotations

from typing import Any

from engram_core.model import Relation
from engram_core.scoring import Candidate
from engram_gateway.service import RecallMode
from engram_gateway.service.recall.stages.relations import Relations

A = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
B = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"


def two(stages: Any, **kw: Any) -> Any:
    h = stages.harness
    h.world.relations.append((h.tenant, Relation(A, B, "RELATES_TO", 0.5)))
    ctx = stages.ctx(**kw)
    ctx.candidates = [Candidate(h.memory(A, "one")), Candidate(h.memory(B, "two"))]
    return ctx


async def test_linked_candidates_gain_the_edges_strength(stages: Any) -> None:
    ctx = await stages.run(two(stages), Relations())
    assert [c.relation for c in ctx.candidates] == [0.5, 0.5]


async def test_a_mode_without_the_graph_or_a_failed_graph_asks_no_edges(stages: Any) -> None:
    vector_only = await stages.run(two(stages, mode=RecallMode.VECTOR), Relations())
    failed = two(stages)
    failed.degraded.append("graph")
    await stages.run(failed, Relations())
    assert [c.relation for c in [*vector_only.candidates, *failed.candidates]] == [0.0] * 4
    assert stages.harness.graph.calls == []


async def test_a_failing_graph_degrades_relations_and_keeps_the_candidates(stages: Any) -> None:
    stages.harness.graph.fail = RuntimeError("graph down")
    ctx = await stages.run(two(stages), Relations())
    assert ctx.degraded == ["relations"]
    assert [c.memory.id for c in ctx.candidates] == [A, B]
