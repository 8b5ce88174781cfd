"""State: superseded memories give way to their heads; the expired go."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from engram_core.model import Relation
from engram_core.state import StateMode
from engram_gateway.service import RecallMode
from engram_gateway.service.recall.stages.state import State

OLD = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
NEW = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"
GONE = "0190f3a4-7b1c-7d2e-8f00-0000000000c1"
EXPIRED = datetime(2000, 1, 1, tzinfo=UTC)


def superseded(stages: Any, **kw: Any) -> Any:
    h = stages.harness
    h.world.put(h.memory(NEW, "the new plan"))
    h.world.relations.append((h.tenant, Relation(OLD, NEW, "INVALIDATED_BY", 1.0)))
    ctx = stages.ctx(**kw)
    ctx.ranked = [stages.scored(OLD, 0.9), stages.scored(GONE, 0.5, t_invalid=EXPIRED)]
    return ctx


def ids(ctx: Any) -> list[str]:
    return [s.memory.id for s in ctx.ranked]


async def test_a_superseded_memory_gives_its_place_to_its_head(stages: Any) -> None:
    ctx = await stages.run(superseded(stages), State())
    assert ids(ctx) == [NEW]


async def test_without_the_graph_only_the_memories_own_fields_count(stages: Any) -> None:
    ctx = await stages.run(superseded(stages, mode=RecallMode.VECTOR), State())
    assert ids(ctx) == [OLD]
    assert stages.harness.graph.calls == []


async def test_a_failing_graph_degrades_state_and_drops_only_the_expired(stages: Any) -> None:
    stages.harness.graph.fail = RuntimeError("graph down")
    ctx = await stages.run(superseded(stages), State())
    assert ctx.degraded == ["state"]
    assert ids(ctx) == [OLD]


async def test_state_mode_all_keeps_everything(stages: Any) -> None:
    ctx = await stages.run(superseded(stages, state_mode=StateMode.ALL), State())
    assert ids(ctx) == [OLD, GONE]


async def test_a_listing_with_nothing_ranked_skips_the_stage(stages: Any) -> None:
    listing, search = stages.ctx(), stages.ctx()
    listing.deadline = search.deadline = replace(listing.deadline, at=0.0)  # no time left
    await stages.run(listing, State(when_empty=False))
    await stages.run(search, State())
    assert (listing.degraded, search.degraded) == ([], ["state"])
