"""Listing: a trending recall's memories, best first by the plan's sort."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engram_core.errors import Unavailable
from engram_gateway.service.recall.stages.listing import Listing
from engram_gateway.service.trending import TRENDING_STREAM

OLD = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
NEW = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"


def stored(stages: Any) -> None:
    h = stages.harness
    h.world.put(
        h.memory(OLD, "old", timestamp=datetime(2025, 1, 1, tzinfo=UTC)),
        h.memory(NEW, "new", timestamp=datetime(2025, 3, 1, tzinfo=UTC)),
    )


async def test_the_newest_first_with_recency(stages: Any) -> None:
    stored(stages)
    ctx = await stages.run(stages.ctx("*", sort="recency"), Listing())
    assert [s.memory.id for s in ctx.ranked] == [NEW, OLD]
    assert ctx.streams == (TRENDING_STREAM,)


async def test_a_listing_that_does_not_answer_fails_the_recall(stages: Any) -> None:
    stored(stages)
    stages.harness.lexical.delay = 30.0
    ctx = stages.ctx("*", sort="recency")
    ctx.deadline = ctx.deadline.within(0.05)
    with pytest.raises(Unavailable, match="lexical"):
        await stages.run(ctx, Listing())
