"""A recall's focus (tags, types, keywords, priority ids, pinned) and recency bias, through
the gateway's reader over the fakes: what reaches scoring, and what comes back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_core.scoring import Focus, RecencyBias
from engram_gateway.service.ports import RecallResult

MAY = datetime(2025, 5, 1, tzinfo=UTC)


def _id(n: int) -> str:
    return f"0190f3a4-7b1c-7d2e-8f00-{n:012x}"


def _ids(result: RecallResult) -> list[str]:
    return [s.memory.id for s in result.results]


def _corpus(h: Any) -> tuple[Any, Any, Any]:
    strong = h.memory(_id(1), "deploy pipeline deploy checklist for deploy day")
    runbook = h.memory(_id(2), "deploy notes", tags=("runbook:ops",), type="Procedure")
    unrelated = h.memory(_id(3), "lunch order for friday", metadata={"lang": "python"})
    h.world.put(strong, runbook, unrelated)
    return strong, runbook, unrelated


async def test_focus_reaches_scoring_validated(harness: Any) -> None:
    _corpus(harness)
    focus = Focus(tags=("Runbook",), types=("procedure",), keywords=(" Python ",), pinned=True)
    await harness.recall("deploy", focus=focus, recency_bias=RecencyBias.OFF)
    [call] = harness.ranker.calls
    # Tags normalised, keywords trimmed and lower-cased, types as given (matched any case).
    assert call["focus"] == Focus(
        tags=("runbook",), types=("procedure",), keywords=("python",), pinned=True
    )
    assert call["recency_bias"] is RecencyBias.OFF


async def test_a_focus_tag_lifts_a_weaker_match(harness: Any) -> None:
    strong, runbook, _ = _corpus(harness)
    plain = await harness.recall("deploy")
    assert _ids(plain)[:2] == [strong.id, runbook.id]
    focused = await harness.recall("deploy", focus=Focus(tags=("runbook",)))
    assert _ids(focused)[:2] == [runbook.id, strong.id]
    top = focused.results[0]
    assert top.components["focus_tag"] == 1.0
    assert top.components["focus_type"] == 0.0


async def test_pinned_ids_come_first_even_when_no_stream_found_them(harness: Any) -> None:
    strong, _, unrelated = _corpus(harness)
    # "lunch order" shares no word with the query: no stream returns it.
    unpinned = await harness.recall("deploy", focus=Focus(ids=(unrelated.id,)))
    assert unrelated.id not in _ids(unpinned)
    pinned = await harness.recall("deploy", focus=Focus(ids=(unrelated.id,), pinned=True))
    assert _ids(pinned)[0] == unrelated.id
    assert strong.id in _ids(pinned)
    assert pinned.results[0].components["focus_id"] == 1.0


async def test_a_pinned_id_outside_the_filters_stays_out(harness: Any) -> None:
    _, _, unrelated = _corpus(harness)
    focus = Focus(ids=(unrelated.id,), pinned=True)
    result = await harness.recall("deploy", focus=focus, exclude_types=["Memory"])
    assert unrelated.id not in _ids(result)


async def test_recency_bias_auto_favours_the_newest_when_asked_for_the_latest(
    harness: Any,
) -> None:
    old = harness.memory(_id(1), "the build server is alpha", timestamp=MAY - timedelta(days=40))
    new = harness.memory(_id(2), "the build server is beta now", timestamp=MAY)
    harness.world.put(old, new)
    plain = await harness.recall("which build server is alpha", recency_bias=RecencyBias.OFF)
    assert _ids(plain)[0] == old.id
    latest = await harness.recall("which is the latest build server")
    assert latest.results[0].memory.id == new.id
    assert latest.results[0].components["recency_bias"] == 1.0
    assert {s.memory.id: s.components["recency_bias"] for s in latest.results}[old.id] == 0.0


async def test_focus_is_part_of_the_recall_cache_key(harness: Any) -> None:
    _, runbook, _ = _corpus(harness)
    first = await harness.recall("deploy")
    focused = await harness.recall("deploy", focus=Focus(tags=("runbook",)))
    assert _ids(first)[0] != runbook.id
    assert _ids(focused)[0] == runbook.id
    assert len(harness.ranker.calls) == 2


async def test_focus_and_recency_bias_over_grpc(client: Any) -> None:
    strong, runbook, unrelated = _corpus(client.harness)
    request = gateway_pb2.RecallRequest(
        query="deploy",
        focus=common_pb2.Focus(tags=["runbook"], ids=[unrelated.id], pinned=True),
        recency_bias=common_pb2.RECENCY_BIAS_ON,
    )
    reply = await client.stub.Recall(request, metadata=client.auth())
    # Both match the pinned focus (an id, a tag): first, in score order — the runbook also
    # matches the query — and ahead of the better match that is not in focus.
    assert [r.memory.id for r in reply.results][:3] == [runbook.id, unrelated.id, strong.id]
    assert reply.results[1].score < reply.results[2].score
    [call] = client.harness.ranker.calls
    assert call["focus"] == Focus(tags=("runbook",), ids=(unrelated.id,), pinned=True)
    assert call["recency_bias"] is RecencyBias.ON
