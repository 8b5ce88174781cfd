"""Hyde and Decompose: what a recall prepares once, before its rounds."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engram_core.entities import EntityRules
from engram_gateway.service.models import QueryModels
from engram_gateway.service.recall.stages.prepare import Decompose, Hyde


class Answering:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def hypothesise(self, query: str, timeout: float | None = None) -> str:
        self.asked.append(query)
        return "she painted a sunset"


class Splitting:
    async def decompose(self, query: str, rules: EntityRules) -> list[str]:
        return ["alpha", " ", "beta"]


async def test_hyde_answers_the_first_of_queries_when_there_is_no_query(stages: Any) -> None:
    hyde = Answering()
    ctx = stages.ctx("", queries=["what did Caroline paint", "when"])
    ctx.deps = replace(ctx.deps, models=QueryModels(hyde=hyde))
    ctx.plan = replace(ctx.plan, hyde=True)
    await stages.run(ctx, Hyde())
    assert hyde.asked == ["what did Caroline paint"]
    assert ctx.hypothesis == "she painted a sunset"
    assert ctx.dense.endswith("\nshe painted a sunset")  # what the vector stream embeds


async def test_a_plan_without_hyde_asks_no_model(stages: Any) -> None:
    hyde = Answering()
    ctx = stages.ctx()
    ctx.deps = replace(ctx.deps, models=QueryModels(hyde=hyde))
    await stages.run(ctx, Hyde())
    assert (hyde.asked, ctx.hypothesis) == ([], "")


async def test_decomposition_keeps_the_non_blank_parts(stages: Any) -> None:
    ctx = stages.ctx(decompose=True)
    ctx.deps = replace(ctx.deps, decomposer=Splitting())
    await stages.run(ctx, Decompose())
    assert ctx.decomposed == ("alpha", "beta")
    assert stages.ctx(decompose=False).plan.decompose is False
