"""Preceding and Rerank: the cross-encoder reads the question stored before an answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from engram_core.model import Hit
from engram_core.profiles import CONVERSATION, DEFAULT
from engram_gateway.service import RecallMode
from engram_gateway.service.models import ModelsConfig, QueryModels
from engram_gateway.service.recall.stages.preceding import Preceding
from engram_gateway.service.recall.stages.rerank import Rerank

Q = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
A = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"
T0 = datetime(2025, 5, 1, 12, tzinfo=UTC)


class LongestFirst:
    """Scores a document by its length."""

    def __init__(self) -> None:
        self.documents: list[str] = []

    async def score(
        self, query: str, documents: Sequence[str], timeout: float | None = None
    ) -> list[float]:
        self.documents = list(documents)
        return [float(len(d)) for d in documents]


def answered(stages: Any, reranker: LongestFirst, **kw: Any) -> Any:
    """An answer stored after its question, reranked under the conversation profile
    unless ``kw`` names another."""
    kw.setdefault("profile", CONVERSATION)
    h = stages.harness
    h.vector.whole_windows = True
    h.world.put(
        h.memory(Q, "which tea do you like?", timestamp=T0),
        h.memory(A, "green tea", timestamp=T0 + timedelta(seconds=30)),
    )
    ctx = stages.ctx("tea", **kw)
    models = QueryModels(None, reranker, ModelsConfig(rerank_preceding_chars=100))
    ctx.deps = replace(ctx.deps, models=models)
    ctx.plan = replace(ctx.plan, rerank=True)
    ctx.answers = {"vector": [Hit(A, 0.9)]}
    ctx.ranked = [stages.scored(A, 0.9, "green tea", timestamp=T0 + timedelta(seconds=30))]
    return ctx


async def test_the_reranker_reads_the_question_before_an_answer(stages: Any) -> None:
    reranker = LongestFirst()
    ctx = await stages.run(answered(stages, reranker), Preceding(), Rerank())
    assert ctx.before == {A: "which tea do you like?"}
    assert reranker.documents == ["which tea do you like?\ngreen tea"]
    assert ctx.ranked[0].components["rerank"] > 0


async def test_the_default_profile_reads_each_answer_alone(stages: Any) -> None:
    reranker = LongestFirst()
    ctx = await stages.run(answered(stages, reranker, profile=DEFAULT), Preceding(), Rerank())
    assert ctx.before is None
    assert reranker.documents == ["green tea"]
    assert [op for op, _ in stages.harness.vector.calls] == []


async def test_without_a_vector_answer_the_answer_is_read_alone(stages: Any) -> None:
    reranker = LongestFirst()
    ctx = answered(stages, reranker, mode=RecallMode.BM25)
    ctx.answers = {"lexical": [Hit(A, 1.0)]}
    await stages.run(ctx, Preceding(), Rerank())
    assert ctx.before is None
    assert reranker.documents == ["green tea"]


async def test_a_failing_timeline_read_degrades_context_and_still_reranks(stages: Any) -> None:
    reranker = LongestFirst()
    ctx = answered(stages, reranker)
    stages.harness.vector.fail = RuntimeError("vector down")
    await stages.run(ctx, Preceding(), Rerank())
    assert ctx.degraded == ["context"]
    assert reranker.documents == ["green tea"]


async def test_a_plan_without_rerank_runs_neither(stages: Any) -> None:
    reranker = LongestFirst()
    ctx = answered(stages, reranker)
    ctx.plan = replace(ctx.plan, rerank=False)
    await stages.run(ctx, Preceding(), Rerank())
    assert (ctx.before, reranker.documents) == (None, [])
