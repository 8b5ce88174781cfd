"""Retrieve: the mode's streams for every sub-query, each degradable on its own."""

from __future__ import annotations

from typing import Any

import pytest

from engram_core.errors import Unavailable
from engram_core.scoring import Fusion
from engram_gateway.service import RecallMode
from engram_gateway.service.recall.stages.retrieve import Retrieve

A = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
B = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"


def seed(h: Any) -> None:
    h.world.put(
        h.memory(A, "Caroline painted a sunset over the lake"),
        h.memory(B, "Caroline likes painting on weekends"),
    )


def searches(backend: Any) -> list[Any]:
    return [arg for op, arg in backend.calls if op == "search"]


async def test_each_stream_of_the_mode_answers(stages: Any) -> None:
    seed(stages.harness)
    ctx = await stages.run(stages.ctx("caroline painted", fusion=Fusion.RRF), Retrieve())
    assert set(ctx.answers) == {"vector", "lexical", "graph"}
    assert ctx.streams == tuple(ctx.answers)
    assert ctx.degraded == []


async def test_default_hybrid_leaves_the_graph_stream_out(stages: Any) -> None:
    seed(stages.harness)
    ctx = await stages.run(stages.ctx("caroline painted"), Retrieve())
    assert set(ctx.answers) == {"vector", "lexical"}
    assert searches(stages.harness.graph) == []


async def test_a_baseline_mode_reads_its_stream_alone(stages: Any) -> None:
    seed(stages.harness)
    ctx = await stages.run(stages.ctx("caroline painted", mode=RecallMode.BM25), Retrieve())
    assert list(ctx.answers) == ["lexical"]
    assert searches(stages.harness.vector) == []


async def test_a_failing_stream_degrades_the_answer_only(stages: Any) -> None:
    seed(stages.harness)
    stages.harness.lexical.fail = RuntimeError("lexical down")
    ctx = await stages.run(stages.ctx("caroline painted"), Retrieve())
    assert list(ctx.answers) == ["vector"]
    assert ctx.degraded == ["lexical"]


async def test_no_stream_answering_fails_the_recall(stages: Any) -> None:
    stages.harness.lexical.fail = RuntimeError("down")
    stages.harness.vector.fail = RuntimeError("down")
    with pytest.raises(Unavailable, match="vector, lexical"):
        await stages.run(stages.ctx("caroline painted"), Retrieve())


async def test_the_graph_alone_with_nothing_to_look_up_ends_the_round_empty(
    stages: Any,
) -> None:
    ctx = await stages.run(stages.ctx("it", mode=RecallMode.GRAPH), Retrieve())
    assert ctx.result is not None
    assert ctx.result.results == ()
    assert ctx.result.streams == ()


async def test_every_sub_query_asks_each_stream(stages: Any) -> None:
    seed(stages.harness)
    ctx = await stages.run(
        stages.ctx("caroline painted", queries=["weekends"], mode=RecallMode.VECTOR), Retrieve()
    )
    assert [q for q, *_ in searches(stages.harness.vector)] == ["caroline painted", "weekends"]
    assert set(ctx.found_by) == {A, B}  # which sub-query found what, for provenance


async def test_a_stream_filling_its_pool_saturates_the_round(stages: Any) -> None:
    seed(stages.harness)
    full = await stages.run(stages.ctx("caroline", pool=1, mode=RecallMode.VECTOR), Retrieve())
    room = await stages.run(stages.ctx("caroline", pool=5, mode=RecallMode.VECTOR), Retrieve())
    assert (full.saturated, room.saturated) == (True, False)
