"""The reranker run in the gateway (`reranker.backend=local`): the cross-encoder `make models`
builds, through a recall on the harness's fake stores."""

from __future__ import annotations

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
    settings = h.settings_with(recall_cache_ttl_s=0, reranker={"backend": "local", "threads": 1})
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
