"""ScoringRanker: candidates out to the scoring service, its ranking back onto the gateway's
own memories."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_clients.scoring import ScoringClient
from engram_core.model import Memory
from engram_core.scoring import SCORED_FIELDS, Candidate, StreamScore
from engram_gateway.adapters.ranker import ScoringRanker
from engram_gateway.mapping import scored_memory_to_proto
from engram_platform.convert import memory_from_proto, memory_to_proto

NOW = datetime(2025, 1, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
    server = grpc.aio.server()
    scoring_pb2_grpc.add_ScoringServiceServicer_to_server(scorer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield ScoringRanker(ScoringClient(channel)), scorer
    finally:
        await channel.close()
        await server.stop(0)


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


def test_scoring_is_sent_the_fields_it_reads_and_no_other() -> None:
    full = Memory(
        id="a",
        tenant="t",
        content="Sarah picked Postgres",
        type="Decision",
        tags=("project:atlas",),
        tag_prefixes=("project",),
        importance=0.7,
        confidence=0.8,
        metadata={"ticket": "OPS-12"},
        timestamp=NOW,
        updated_at=NOW,
        last_accessed=NOW,
        access_count=3,
        t_valid=NOW,
        t_invalid=NOW,
        relevance_score=0.4,
        archived=True,
        embedding_model="m",
        version=2,
        entities=("person:sarah",),
    )
    sent = scored_memory_to_proto(full)
    assert {f.name for f, _ in sent.ListFields()} == SCORED_FIELDS
    assert memory_from_proto(sent) == replace(
        full,
        tenant="",
        updated_at=EPOCH,
        last_accessed=None,
        access_count=0,
        t_valid=None,
        t_invalid=None,
        archived=False,
        embedding_model="",
        version=0,
        entities=(),
    )
