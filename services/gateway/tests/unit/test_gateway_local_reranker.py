"""The reranker run in the gateway (`reranker.backend=local`): the cross-encoder `make models`
builds, through a recall on the harness's fake stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from engram_embed.cross import OnnxCrossEncoder
from engram_gateway.bootstrap import Backends, build_gateway, build_models
from engram_gateway.config import RerankerSettings
from engram_gateway.service import Deadline, RecallRequest

pytestmark = pytest.mark.model

TEA = "0190f3a4-7b1c-7d2e-8f00-00000000000a"
SHOP = "0190f3a4-7b1c-7d2e-8f00-00000000000b"
LISBON = "0190f3a4-7b1c-7d2e-8f00-00000000000c"


def test_enabled_needs_an_endpoint_only_over_http() -> None:
    with pytest.raises(ValidationError, match="base_url"):
        RerankerSettings(enabled=True)
    assert RerankerSettings(enabled=True, backend="local").enabled


async def test_the_local_cross_encoder_reorders_the_top(harness: Any) -> None:
    h = harness
    h.world.put(
        h.memory(TEA, "Sarah drinks green tea every morning"),
        h.memory(SHOP, "The tea shop on the corner opened in May"),
        h.memory(LISBON, "Sarah flew to Lisbon for a tea festival"),
    )
    query = "when did the tea shop open"
    # Three unrelated notes: each is read alone, not after the one stored before it.
    reranker = {"backend": "local", "threads": 1, "preceding_chars": 0}
    settings = h.settings_with(recall_cache_ttl_s=0, reranker=reranker)
    models = build_models(settings)
    assert isinstance(models.query.reranker, OnnxCrossEncoder)
    gw = build_gateway(
        settings, Backends(h.vector, h.lexical, h.graph, h.ranker), h.log, h.cache, models=models
    )
    try:
        plain = await gw.reader.recall(h.tenant, RecallRequest(query=query), Deadline.within(5.0))
        after = await gw.reader.recall(
            h.tenant, RecallRequest(query=query, rerank=True), Deadline.within(5.0)
        )
    finally:
        await models.close()
    assert plain.models == ()
    assert after.models == ("rerank",)
    cross = {s.memory.id: s.components["rerank"] for s in after.results}
    assert set(cross) == {TEA, SHOP, LISBON}
    assert cross[SHOP] > max(cross[TEA], cross[LISBON])  # the one memory that answers
    assert after.results[0].memory.id == SHOP


QUESTION = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"
ANSWER = "0190f3a4-7b1c-7d2e-8f00-0000000000a2"  # stored right after the question
FENCE = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"  # another day


@pytest.mark.parametrize("preceding_chars", [300, 0])
async def test_an_answer_is_read_after_the_question_before_it(
    harness: Any, preceding_chars: int
) -> None:
    h = harness
    day = datetime(2025, 5, 1, 12, tzinfo=UTC)
    h.world.put(
        h.memory(QUESTION, "Caroline: What did you paint last weekend?", timestamp=day),
        h.memory(ANSWER, "Melanie: A sunset over the lake.", timestamp=day),
        h.memory(
            FENCE, "Melanie: I might paint the fence one day.", timestamp=day + timedelta(days=3)
        ),
    )
    h.vector.whole_windows = True  # the question is in the answer's window
    reranker = {"backend": "local", "threads": 1, "preceding_chars": preceding_chars}
    settings = h.settings_with(recall_cache_ttl_s=0, reranker=reranker, profile="conversation")
    models = build_models(settings)
    gw = build_gateway(
        settings, Backends(h.vector, h.lexical, h.graph, h.ranker), h.log, h.cache, models=models
    )
    request = RecallRequest(query="What did Melanie paint last weekend?", rerank=True)
    try:
        after = await gw.reader.recall(h.tenant, request, Deadline.within(10.0))
    finally:
        await models.close()
    cross = {s.memory.id: s.components["rerank"] for s in after.results}
    assert set(cross) == {QUESTION, ANSWER, FENCE}
    # "A sunset over the lake" says nothing of painting alone; after its question it answers.
    if preceding_chars:
        assert cross[ANSWER] > cross[FENCE]
    else:
        assert cross[ANSWER] < cross[FENCE]
