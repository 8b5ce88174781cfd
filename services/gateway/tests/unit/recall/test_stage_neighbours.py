"""Neighbours (the context stage): timeline neighbours of the best candidates join them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from engram_core.model import Hit
from engram_core.profiles import CONVERSATION, DEFAULT
from engram_core.scoring import Candidate
from engram_gateway.service import RecallMode
from engram_gateway.service.recall.stages.neighbours import Neighbours

Q = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
A = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"
FAR = "0190f3a4-7b1c-7d2e-8f00-0000000000c1"
T0 = datetime(2025, 5, 1, 12, tzinfo=UTC)


def found_question(stages: Any, **kw: Any) -> Any:
    """A question found, its answer stored next; the conversation profile unless ``kw``
    names another."""
    kw.setdefault("profile", CONVERSATION)
    h = stages.harness
    h.vector.whole_windows = True
    question = h.memory(Q, "what did Caroline paint", timestamp=T0)
    h.world.put(
        question,
        h.memory(A, "A sunset over the lake", timestamp=T0 + timedelta(seconds=30)),
        h.memory(FAR, "Lunch plans", timestamp=T0 + timedelta(days=3)),
    )
    ctx = stages.ctx(**kw)
    ctx.answers = {"vector": [Hit(Q, 0.9, question)]}
    ctx.candidates = [Candidate(question)]
    return ctx


def ids(ctx: Any) -> set[str]:
    return {c.memory.id for c in ctx.candidates}


async def test_the_memory_stored_next_to_a_candidate_joins_it(stages: Any) -> None:
    ctx = await stages.run(found_question(stages), Neighbours())
    assert ids(ctx) == {Q, A}
    assert len(stages.spans("context")) == 1


async def test_the_default_profile_reads_no_neighbours(stages: Any) -> None:
    ctx = await stages.run(found_question(stages, profile=DEFAULT), Neighbours())
    assert ids(ctx) == {Q}
    assert [op for op, _ in stages.harness.vector.calls] == []
    assert stages.spans("context") == []


async def test_a_baseline_mode_or_no_vector_answer_reads_no_neighbours(stages: Any) -> None:
    baseline = await stages.run(found_question(stages, mode=RecallMode.BM25), Neighbours())
    no_vector = found_question(stages)
    no_vector.answers = {}
    await stages.run(no_vector, Neighbours())
    assert ids(baseline) == ids(no_vector) == {Q}
    assert [op for op, _ in stages.harness.vector.calls] == []


async def test_a_failing_window_read_degrades_context_and_keeps_the_candidates(
    stages: Any,
) -> None:
    ctx = found_question(stages)
    stages.harness.vector.fail = RuntimeError("vector down")
    await stages.run(ctx, Neighbours())
    assert ctx.degraded == ["context"]
    assert ids(ctx) == {Q}
