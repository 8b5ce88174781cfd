"""The runner: order, applies, budget, degrade and fallback, span; errors that fail."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from engram_core.errors import InvalidArgument, Unavailable
from engram_gateway.service import Deadline
from engram_gateway.service.deadline import Budget
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.pipeline import RecallContext, StageDefaults

ANY_TIME = Budget(fraction=1.0, cap_s=5.0)


@dataclass
class Step(StageDefaults):
    name: str
    log: list[str]
    share_of: Budget | None = ANY_TIME
    fail: Exception | None = None
    hang: bool = False
    use: bool = True
    finish: bool = False
    fell_back: list[str] = field(default_factory=list)

    def applies(self, ctx: RecallContext) -> bool:
        return self.use

    def share(self, config: ReadConfig) -> Budget | None:
        return self.share_of

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        self.log.append(self.name)
        if self.hang:
            await asyncio.Event().wait()
        if self.fail is not None:
            raise self.fail
        if self.finish:
            ctx.finish()

    def fallback(self, ctx: RecallContext) -> None:
        self.fell_back.append(self.name)


async def test_stages_run_in_order_and_only_when_they_apply(stages: Any) -> None:
    log: list[str] = []
    ctx = await stages.run(stages.ctx(), Step("a", log), Step("b", log, use=False), Step("c", log))
    assert log == ["a", "c"]
    assert ctx.degraded == []
    assert [len(stages.spans(n)) for n in "abc"] == [1, 0, 1]


async def test_a_failing_stage_degrades_falls_back_and_the_next_still_runs(stages: Any) -> None:
    log: list[str] = []
    broken = Step("b", log, fail=RuntimeError("down"))
    ctx = await stages.run(stages.ctx(), Step("a", log), broken, Step("c", log))
    assert log == ["a", "b", "c"]
    assert ctx.degraded == ["b"]
    assert broken.fell_back == ["b"]
    [span] = stages.spans("b")
    assert span.attributes["engram.degraded"] is True


async def test_a_stage_out_of_its_share_is_cut_off_and_degrades(stages: Any) -> None:
    log: list[str] = []
    slow = Step("slow", log, share_of=Budget(fraction=1.0, cap_s=0.01), hang=True)
    ctx = await stages.run(stages.ctx(), slow, Step("after", log))
    assert log == ["slow", "after"]
    assert ctx.degraded == ["slow"]
    assert slow.fell_back == ["slow"]


async def test_with_no_time_left_a_stage_is_skipped_and_degrades(stages: Any) -> None:
    log: list[str] = []
    ctx = stages.ctx()
    ctx.deadline = Deadline.within(-1.0)
    late = Step("late", log)
    await stages.run(ctx, late)
    assert log == []
    assert ctx.degraded == ["late"]
    assert late.fell_back == ["late"]


async def test_a_stage_bounding_itself_fails_the_recall(stages: Any) -> None:
    log: list[str] = []
    own = Step("own", log, share_of=None, fail=Unavailable("no stream answered"))
    with pytest.raises(Unavailable):
        await stages.run(stages.ctx(), own, Step("never", log))
    assert log == ["own"]
    assert stages.spans("own") == []  # its own calls have their spans


async def test_the_clients_own_embedding_refused_fails_even_a_degradable_stage(
    stages: Any,
) -> None:
    bad = Step("context", [], fail=InvalidArgument("embedding", "3 values; the model has 4"))
    with pytest.raises(InvalidArgument):
        await stages.run(stages.ctx(), bad)


async def test_a_finished_round_runs_no_more_stages(stages: Any) -> None:
    log: list[str] = []
    ctx = await stages.run(stages.ctx(), Step("a", log, finish=True), Step("b", log))
    assert log == ["a"]
    assert ctx.result is not None
    assert ctx.result.results == ()


async def test_a_name_degrades_once(stages: Any) -> None:
    boom = RuntimeError("down")
    ctx = await stages.run(stages.ctx(), Step("x", [], fail=boom), Step("x", [], fail=boom))
    assert ctx.degraded == ["x"]
