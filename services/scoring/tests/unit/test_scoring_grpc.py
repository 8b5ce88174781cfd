"""The Rank RPC in-process on port 0, through the platform server (interceptors included)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_core.model import Memory
from engram_core.scoring import COMPONENTS, CONTEXT, Candidate, StreamScore
from engram_platform.convert import memory_to_proto
from engram_platform.errors import FIELD_KEY
from engram_platform.grpc_client import open_channel
from engram_platform.timeutil import to_epoch_ms
from engram_scoring import server
from engram_scoring.bootstrap import build_ranker
from engram_scoring.config import Settings
from engram_scoring.mapping import candidate_from_proto, candidate_to_proto

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def memory(id: str, content: str, age_days: float, **kw: Any) -> Memory:
    ts = NOW - timedelta(days=age_days)
    return Memory(id=id, tenant="t", content=content, timestamp=ts, updated_at=ts, **kw)


def candidate(m: Memory, **streams: tuple[float, int]) -> scoring_pb2.Candidate:
    return candidate_to_proto(Candidate(m, {k: StreamScore(*v) for k, v in streams.items()}))


def three() -> list[scoring_pb2.Candidate]:
    return [
        candidate(memory("b", "lunch preferences", 90), vector=(0.2, 2)),
        candidate(
            memory("a", "The deploy pipeline runs on Fridays", 0, tags=("project:engram",)),
            vector=(0.8, 1),
            keyword=(5.0, 1),
        ),
        candidate(
            memory("c", "deploy notes", 0, metadata={"ticket": "OPS-12", "n": 3}),
            keyword=(2.5, 2),
        ),
    ]


def _with_neighbour(other: str, distance: int) -> scoring_pb2.Candidate:
    c = candidate(memory("d", "x", 0))
    c.neighbours[other] = distance
    return c


def _with_metadata(metadata: dict[str, Any]) -> scoring_pb2.Candidate:
    c = candidate(memory("d", "x", 0))
    c.memory.metadata.update(metadata)
    return c


def request(**kw: Any) -> scoring_pb2.RankRequest:
    base: dict[str, Any] = {
        "query": "deploy pipeline",
        "candidates": three(),
        "query_tags": ["project"],
        "now_unix_ms": to_epoch_ms(NOW),
    }
    return scoring_pb2.RankRequest(**{**base, **kw})


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[scoring_pb2_grpc.ScoringServiceAsyncStub]:
    # Raw components: the expected scores below are worked out by hand from them.
    settings = Settings(port=0, data_dir=tmp_path, max_candidates=3, normalisation="raw")
    running = await server.start(settings, build_ranker(settings))
    channel = open_channel(f"127.0.0.1:{running.port}")
    try:
        yield scoring_pb2_grpc.ScoringServiceStub(channel)
    finally:
        await channel.close()
        await running.stop(0)


async def test_weighted_rank_over_grpc(stub: scoring_pb2_grpc.ScoringServiceAsyncStub) -> None:
    reply = await stub.Rank(request(limit=2))
    # a: .35*.8 + .35*1 + .2 (tag prefix) + .2 (exact) + .1 + .1*.5 + .05*.9 = 1.225
    # c: .35*(2.5/5) + .1 + .05 + .045 = .37 ; b (.215) is cut by limit 2
    assert [(r.memory.id, round(r.score, 12)) for r in reply.results] == [
        ("a", 1.225),
        ("c", 0.37),
    ]
    a = reply.results[0]
    picked = {k: a.components[k] for k in ("tag", "exact", "keyword", "graph", "recency")}
    assert picked == {"tag": 1.0, "exact": 1.0, "keyword": 1.0, "graph": 0.0, "recency": 1.0}
    assert set(a.components) == {*COMPONENTS, CONTEXT}
    assert {k: (v.score, v.rank) for k, v in a.streams.items()} == {
        "vector": (0.8, 1),
        "keyword": (5.0, 1),
    }
    sent = {c.memory.id: c.memory for c in three()}
    assert [r.memory for r in reply.results] == [sent["a"], sent["c"]]


async def test_rrf_and_default_limit(stub: scoring_pb2_grpc.ScoringServiceAsyncStub) -> None:
    reply = await stub.Rank(request(fusion=scoring_pb2.FUSION_RRF))
    # a: 2/61 ; b and c: 1/62 each, c is newer so it goes first
    assert [r.memory.id for r in reply.results] == ["a", "c", "b"]
    assert reply.results[0].score == pytest.approx(2 / 61, abs=1e-12)


async def test_weight_override_changes_the_order(
    stub: scoring_pb2_grpc.ScoringServiceAsyncStub,
) -> None:
    zero = {n: 0.0 for n in ("vector", "keyword", "tag", "exact", "recency")}
    reply = await stub.Rank(request(weights={**zero, "importance": 0.0, "confidence": 0.0}))
    # every weight that differs between them is 0: all score 0, newest first, then id
    assert [(r.memory.id, r.score) for r in reply.results] == [("a", 0.0), ("c", 0.0), ("b", 0.0)]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"fusion": 9}, "fusion"),
        ({"weights": {"nope": 1.0}}, "weights"),
        ({"weights": {"vector": -1.0}}, "weights"),
        ({"limit": 1001}, "limit"),
        ({"limit": -3}, "limit"),
        ({"candidates": [*three(), candidate(memory("d", "x", 0))]}, "candidates"),
        ({"candidates": [candidate(memory("d", "x", 0), vector=(0.5, 0))]}, None),
        ({"candidates": [candidate(memory("", "x", 0))]}, "candidates[0].memory.id"),
        ({"now_unix_ms": -1}, "now_unix_ms"),
        ({"now_unix_ms": 2**63 - 1}, "now_unix_ms"),
        (
            {"candidates": [_with_metadata({"a": [float("nan")]})]},
            "candidates[0].memory.metadata.a[0]",
        ),
        ({"recency_bias": 7}, "recency_bias"),
        ({"candidates": [_with_neighbour("y", 0)]}, "candidates[0].neighbours[y]"),
        ({"profile": "chat"}, "profile"),
    ],
)
async def test_invalid_argument_names_the_field(
    stub: scoring_pb2_grpc.ScoringServiceAsyncStub, overrides: dict[str, Any], field: str | None
) -> None:
    field = field or "candidates[0].streams[vector].rank"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Rank(request(**overrides))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (FIELD_KEY, field) in tuple(err.value.trailing_metadata() or ())


async def test_focus_and_recency_bias_reach_the_ranking_over_grpc(
    stub: scoring_pb2_grpc.ScoringServiceAsyncStub,
) -> None:
    plain = await stub.Rank(request())
    assert [r.memory.id for r in plain.results] == ["a", "c", "b"]
    # b (the weakest, 90 days old) is the focus's priority id: + 0.9 and, pinned, first.
    focus = common_pb2.Focus(ids=["b"])
    bonus = await stub.Rank(request(focus=focus))
    by_id = {r.memory.id: r for r in bonus.results}
    assert by_id["b"].score == pytest.approx(
        {r.memory.id: r.score for r in plain.results}["b"] + 0.9, abs=1e-12
    )
    assert by_id["b"].components["focus_id"] == 1.0
    focus.pinned = True
    pinned = await stub.Rank(request(focus=focus, weights={"focus_id": 0.0}))
    assert pinned.results[0].memory.id == "b"
    # Recency bias on: b, the oldest, gains 0; a and c are the newest, a the best match
    # (the bias goes by the share of the best match), so a gains it in full, c in part.
    on = await stub.Rank(request(recency_bias=common_pb2.RECENCY_BIAS_ON))
    gained = {r.memory.id: r.components["recency_bias"] for r in on.results}
    assert gained["a"] == 1.0
    assert 0.0 < gained["c"] < 1.0
    assert gained["b"] == 0.0


def test_candidate_mapping_round_trip() -> None:
    m = memory("x", "c", 3, tags=("a:b",), metadata={"k": "v"}, importance=0.7)
    c = Candidate(m, {"graph": StreamScore(1.5, 4)}, 0.25, {"y": 1, "z": 2})
    back = candidate_from_proto(candidate_to_proto(c))
    assert back == c
    assert candidate_to_proto(c).memory == memory_to_proto(m)
    assert common_pb2.StreamScore(score=1.5, rank=4) == candidate_to_proto(c).streams["graph"]


async def test_neighbours_reach_the_context_step_over_grpc(
    stub: scoring_pb2_grpc.ScoringServiceAsyncStub,
) -> None:
    q = candidate(memory("q", "what did you paint", 0), keyword=(8.0, 1))
    a = candidate(memory("a", "a sunset", 0), keyword=(1.0, 3))
    o = candidate(memory("o", "paint the fence", 0), keyword=(2.0, 2))
    q.neighbours["a"] = 1
    a.neighbours["q"] = 1
    weights = {n: 0.0 for n in ("vector", "metadata", "recency", "importance", "confidence")}
    reply = await stub.Rank(
        request(candidates=[q, a, o], limit=3, query="paint", weights={**weights, "context": 0.5})
    )
    assert [r.memory.id for r in reply.results] == ["q", "a", "o"]
    assert reply.results[1].components["context"] == 1.0


async def test_the_profile_picks_the_weights_a_request_does_not_set(
    stub: scoring_pb2_grpc.ScoringServiceAsyncStub,
) -> None:
    q = candidate(memory("q", "what did you paint", 0), keyword=(8.0, 1))
    a = candidate(memory("a", "a sunset", 0), keyword=(1.0, 3))
    o = candidate(memory("o", "paint the fence", 0), keyword=(2.0, 2))
    q.neighbours["a"] = 1
    a.neighbours["q"] = 1
    # Only keyword and context differ between them.
    zero = {n: 0.0 for n in ("vector", "metadata", "recency", "importance", "confidence")}
    ask: dict[str, Any] = {
        "candidates": [q, a, o],
        "limit": 3,
        "query": "paint",
        "weights": {**zero, "exact": 0},
    }
    # Conversation: the answer after the question gains context.
    chat = await stub.Rank(request(**ask, profile="conversation"))
    assert [r.memory.id for r in chat.results] == ["q", "a", "o"]
    # Default (the service's, as no profile is set): no context weight, so the timeline
    # neighbour gains nothing...
    unset = await stub.Rank(request(**ask))
    plain = await stub.Rank(request(**ask, profile="default"))
    assert [r.memory.id for r in plain.results] == ["q", "o", "a"]
    assert [(r.memory.id, r.score) for r in unset.results] == [
        (r.memory.id, r.score) for r in plain.results
    ]
    assert {r.memory.id: r.components["context"] for r in plain.results}["a"] == 1.0
    # ...unless the request's own weights say so: they go on top of the profile's.
    mine = {**ask, "weights": {**ask["weights"], "context": 0.4}}
    again = await stub.Rank(request(**mine, profile="default"))
    assert [(r.memory.id, r.score) for r in again.results] == [
        (r.memory.id, r.score) for r in chat.results
    ]
