"""Candidates, Pinned, NoneFound: the candidate set before ranking."""

from __future__ import annotations

from typing import Any

from engram_core.errors import Unavailable
from engram_core.model import Hit
from engram_core.scoring import Candidate, Focus
from engram_gateway.service.recall.stages.candidates import Candidates, NoneFound
from engram_gateway.service.recall.stages.pinned import Pinned

A = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
B = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"
P = "0190f3a4-7b1c-7d2e-8f00-0000000000c1"


def ids(ctx: Any) -> list[str]:
    return [c.memory.id for c in ctx.candidates]


async def test_hits_without_their_memory_are_read_and_merged(stages: Any) -> None:
    h = stages.harness
    h.world.put(h.memory(A, "one"), h.memory(B, "two"))
    ctx = stages.ctx()
    ctx.answers = {"vector": [Hit(A, 0.9, h.memory(A, "one"))], "graph": [Hit(B, 0.5)]}
    await stages.run(ctx, Candidates())
    assert sorted(ids(ctx)) == sorted([A, B])
    assert [op for op, _ in h.vector.calls] == ["get"]


async def test_hits_whose_memory_cannot_be_read_are_dropped(stages: Any) -> None:
    h = stages.harness
    h.vector.fail = h.lexical.fail = Unavailable("down")
    ctx = stages.ctx()
    ctx.answers = {"vector": [Hit(A, 0.9, h.memory(A, "one"))], "graph": [Hit(B, 0.5)]}
    await stages.run(ctx, Candidates())
    assert ids(ctx) == [A]
    assert ctx.degraded == []


async def test_a_pinned_memory_no_stream_found_joins_if_it_passes_the_filters(
    stages: Any,
) -> None:
    h = stages.harness
    h.world.put(h.memory(A, "one"), h.memory(P, "pinned"), h.memory(B, "draft", tags=("draft",)))
    ctx = stages.ctx(focus=Focus(ids=(P, B), pinned=True), exclude_tags=["draft"])
    ctx.candidates = [Candidate(h.memory(A, "one"))]
    await stages.run(ctx, Pinned())
    assert ids(ctx) == [A, P]


async def test_focus_ids_without_pinned_fetch_nothing(stages: Any) -> None:
    h = stages.harness
    h.world.put(h.memory(P, "pinned"))
    ctx = await stages.run(stages.ctx(focus=Focus(ids=(P,))), Pinned())
    assert ids(ctx) == []
    assert h.vector.calls == []


async def test_no_candidates_end_the_round_with_the_streams_that_answered(stages: Any) -> None:
    ctx = stages.ctx()
    ctx.streams, ctx.degraded = ("vector",), ["lexical"]
    await stages.run(ctx, NoneFound())
    assert ctx.result is not None
    assert (ctx.result.results, ctx.result.streams, ctx.result.degraded) == (
        (),
        ("vector",),
        ("lexical",),
    )
