"""Expand: memories linked to the best results join them, current ones only."""

from __future__ import annotations

from typing import Any

from engram_core.model import Relation
from engram_gateway.service.expand import ExpandRequest
from engram_gateway.service.recall.stages.expand import Expand

SEED = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
LINKED = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"
HEAD = "0190f3a4-7b1c-7d2e-8f00-0000000000c1"


def seeded(stages: Any, expand: ExpandRequest) -> Any:
    h = stages.harness
    h.world.put(h.memory(SEED, "seed"), h.memory(LINKED, "linked"), h.memory(HEAD, "head"))
    h.world.relations.append((h.tenant, Relation(SEED, LINKED, "RELATES_TO", 0.8)))
    ctx = stages.ctx(expand=expand)
    ctx.ranked = [stages.scored(SEED, 0.9)]
    return ctx


def ids(ctx: Any) -> list[str]:
    return [s.memory.id for s in ctx.ranked]


async def test_a_linked_memory_joins_below_its_seed(stages: Any) -> None:
    ctx = await stages.run(seeded(stages, ExpandRequest(relations=True)), Expand())
    assert ids(ctx) == [SEED, LINKED]


async def test_a_linked_memory_since_superseded_joins_as_its_head(stages: Any) -> None:
    ctx = seeded(stages, ExpandRequest(relations=True))
    h = stages.harness
    h.world.relations.append((h.tenant, Relation(LINKED, HEAD, "INVALIDATED_BY", 1.0)))
    await stages.run(ctx, Expand())
    assert ids(ctx) == [SEED, HEAD]


async def test_expansion_off_reads_no_links(stages: Any) -> None:
    ctx = await stages.run(seeded(stages, ExpandRequest()), Expand())
    assert ids(ctx) == [SEED]
    assert stages.harness.graph.calls == []


async def test_a_failing_graph_degrades_expand_and_keeps_the_ranking(stages: Any) -> None:
    ctx = seeded(stages, ExpandRequest(relations=True))
    stages.harness.graph.fail = RuntimeError("graph down")
    await stages.run(ctx, Expand())
    assert ctx.degraded == ["expand"]
    assert ids(ctx) == [SEED]
