"""Feedback: the first search's best candidates ask the lexical and vector streams again,
and what that finds joins the candidates."""

from __future__ import annotations

from typing import Any

import pytest

from engram_core.errors import Unavailable
from engram_gateway.recall_settings import FeedbackSettings
from engram_gateway.service.recall.stages.candidates import Candidates
from engram_gateway.service.recall.stages.feedback import Feedback
from engram_gateway.service.recall.stages.retrieve import Retrieve

A = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
B = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"
C = "0190f3a4-7b1c-7d2e-8f00-0000000000c1"
QUERY = "what did caroline paint"


FEEDBACK = {"docs": 2, "terms": 3, "lexical_weight": 0.5, "vector_weight": 0.5}


@pytest.fixture
def harness(new_harness: Any) -> Any:
    """A gateway with feedback on (it is off by default)."""
    return new_harness(feedback={**FEEDBACK, "default": True})


def seed(h: Any) -> None:
    h.world.put(
        h.memory(A, "Caroline: I paint sunsets over the lake with watercolours"),
        h.memory(B, "Caroline: my paint is drying, lake sunsets again"),
        # Shares no word with the query: only feedback can find it.
        h.memory(C, "Melanie: watercolours of sunsets are lovely"),
    )


def searches(backend: Any) -> list[str]:
    return [arg[0] for op, arg in backend.calls if op == "search"]


async def first_search(stages: Any, **kw: Any) -> Any:
    seed(stages.harness)
    ctx = stages.ctx(QUERY, **kw)
    return await stages.run(ctx, Retrieve(), Candidates())


def ids(ctx: Any) -> set[str]:
    return {c.memory.id for c in ctx.candidates}


async def test_off_it_searches_nothing_more(stages: Any, new_harness: Any) -> None:
    stages = type(stages)(new_harness(feedback=FEEDBACK), stages.exporter, stages.provider)
    ctx = await first_search(stages)
    assert ids(ctx) == {A, B}
    await stages.run(ctx, Feedback())
    assert len(searches(stages.harness.lexical)) == 1
    assert len(searches(stages.harness.vector)) == 1
    assert ids(ctx) == {A, B}


async def test_the_best_candidates_words_find_a_memory_the_query_did_not(stages: Any) -> None:
    ctx = await first_search(stages)
    await stages.run(ctx, Feedback())
    lexical = searches(stages.harness.lexical)
    assert len(lexical) == 2
    # The expansion: the feedback documents' words, none of the query's.
    asked = set(lexical[1].split())
    assert asked & {"sunsets", "lake", "watercolours"}
    assert not asked & {"caroline", "paint"}
    assert ids(ctx) == {A, B, C}
    assert ctx.degraded == []


async def test_the_vector_stream_embeds_the_query_then_the_feedback_documents(
    stages: Any,
) -> None:
    ctx = await first_search(stages)
    await stages.run(ctx, Feedback())
    vector = searches(stages.harness.vector)
    assert len(vector) == 2
    first, *docs = vector[1].split("\n")
    assert first == ctx.dense
    assert len(docs) == 2


async def test_a_failing_second_search_keeps_the_first_candidates(stages: Any) -> None:
    ctx = await first_search(stages)
    before = [c.memory.id for c in ctx.candidates]
    stages.harness.lexical.fail = Unavailable("down")
    await stages.run(ctx, Feedback())
    assert [c.memory.id for c in ctx.candidates] == before
    assert ctx.degraded == ["feedback"]


async def test_off_by_default() -> None:
    assert not FeedbackSettings().default


async def test_a_trending_recall_has_no_feedback(stages: Any) -> None:
    ctx = stages.ctx("*")
    assert ctx.plan.sort is not None
    assert not ctx.plan.feedback
