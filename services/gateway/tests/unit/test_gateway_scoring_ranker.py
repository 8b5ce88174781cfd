"""ScoringRanker: candidates out to the scoring service, its ranking back onto the gateway's
own memories."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from engram.common.v1 import common_pb2
from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_clients.scoring import ScoringClient
from engram_core.model import Memory
from engram_core.scoring import (
    SCORED_FIELDS,
    Candidate,
    Focus,
    Fusion,
    RecencyBias,
    StreamScore,
)
from engram_gateway.adapters.ranker import ScoringRanker
from engram_platform.convert import focus_to_proto, memory_to_proto
from engram_testing.in_process import serving_fake

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def memory(id: str, **kw: Any) -> Memory:
    return Memory(id=id, tenant="t", content=f"memory {id}", timestamp=NOW, updated_at=NOW, **kw)


class ReversingScorer(scoring_pb2_grpc.ScoringServiceServicer):
    """Ranks the candidates in reverse, scores 1, 2, …, and adds one memory it was not sent."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def Rank(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        results = [
            common_pb2.ScoredMemory(memory=c.memory, score=float(i), components={"vector": 0.5})
            for i, c in enumerate(reversed(request.candidates), 1)
        ]
        stranger = memory("z", metadata={"n": 7})
        results.append(common_pb2.ScoredMemory(memory=memory_to_proto(stranger), score=0.1))
        return scoring_pb2.RankResponse(results=results)


@pytest.fixture
async def ranker() -> AsyncIterator[tuple[ScoringRanker, ReversingScorer]]:
    scorer = ReversingScorer()
    async with serving_fake(scoring_pb2_grpc.add_ScoringServiceServicer_to_server, scorer) as ch:
        yield ScoringRanker(ScoringClient(ch)), scorer


async def test_results_carry_the_gateways_own_memories(
    ranker: tuple[ScoringRanker, ReversingScorer],
) -> None:
    rank, scorer = ranker
    candidates = [
        Candidate(memory("a", metadata={"n": 3}), {"vector": StreamScore(0.9, 1)}),
        Candidate(memory("b", tags=("project:x",)), {"keyword": StreamScore(4.0, 1)}),
    ]
    got = await rank.rank("q", candidates, None, 10, ())
    assert [s.memory.id for s in got] == ["b", "a", "z"]
    assert [s.score for s in got] == [1.0, 2.0, 0.1]
    assert got[0].components == {"vector": 0.5}
    # Not decoded again: the very objects sent, so metadata 3 stays an int (a Struct
    # would have made it 3.0).
    assert got[0].memory is candidates[1].memory
    assert got[1].memory is candidates[0].memory
    assert got[1].memory.metadata == {"n": 3}
    assert type(got[1].memory.metadata["n"]) is int
    # A memory the gateway did not send is decoded from the reply.
    assert got[2].memory.metadata == {"n": 7.0}
    [request] = scorer.seen
    assert [c.memory.id for c in request.candidates] == ["a", "b"]
    assert request.candidates[0].streams["vector"].score == pytest.approx(0.9)
    # Slim: the fields ranking reads, no more (the tenant, updated_at… stay behind).
    for sent, c in zip(request.candidates, candidates, strict=True):
        assert sent.memory == memory_to_proto(c.memory, scored_only=True)
        assert {f.name for f, _ in sent.memory.ListFields()} <= SCORED_FIELDS


async def test_the_profile_reaches_the_rank_request(
    ranker: tuple[ScoringRanker, ReversingScorer],
) -> None:
    rank, scorer = ranker
    await rank.rank("q", [Candidate(memory("a"))], None, 10, (), profile="default")
    await rank.rank("q", [Candidate(memory("a"))], None, 10, ())
    assert [r.profile for r in scorer.seen] == ["default", ""]


async def test_every_candidate_feature_and_knob_reaches_the_rank_request(
    ranker: tuple[ScoringRanker, ReversingScorer],
) -> None:
    rank, scorer = ranker
    candidates = [
        Candidate(
            memory("a", importance=0.7),
            {"vector": StreamScore(0.9, 1), "keyword": StreamScore(4.0, 3)},
            relation=1.5,
            neighbours={"b": 1},
        ),
        Candidate(memory("b"), {"graph": StreamScore(0.2, 2)}, neighbours={"a": 1}),
    ]
    focus = Focus(tags=("project:x",), keywords=("deploy",))
    await rank.rank(
        "when",
        candidates,
        Fusion.RRF,
        7,
        ("project:x",),
        focus=focus,
        recency_bias=RecencyBias.ON,
    )
    [request] = scorer.seen
    assert (request.query, request.limit, list(request.query_tags)) == ("when", 7, ["project:x"])
    assert request.fusion == scoring_pb2.FUSION_RRF
    assert request.recency_bias == common_pb2.RECENCY_BIAS_ON
    assert request.focus == focus_to_proto(focus)
    first, second = request.candidates
    assert first.relation == pytest.approx(1.5)
    assert second.relation == 0
    assert dict(first.neighbours) == {"b": 1}
    assert dict(second.neighbours) == {"a": 1}
    assert {n: (s.score, s.rank) for n, s in first.streams.items()} == {
        "vector": (pytest.approx(0.9), 1),
        "keyword": (pytest.approx(4.0), 3),
    }
    assert second.streams["graph"].rank == 2
    assert first.memory.importance == pytest.approx(0.7)
