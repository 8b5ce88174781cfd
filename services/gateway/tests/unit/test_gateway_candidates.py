"""Candidate generation through the gateway's fakes (issue #4): `queries`/`per_query_limit`,
`decompose`, and trending for an empty or "*" query with `sort`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2
from engram_core.entities import EntityRules
from engram_core.errors import InvalidArgument
from engram_core.ordering import Sort
from engram_gateway.service.ports import RecallResult

T0 = datetime(2025, 5, 1, tzinfo=UTC)


def _id(n: int) -> str:
    return f"0190f3a4-7b1c-7d2e-8f00-{n:012x}"


async def _recall(h: Any, query: str = "tea", **kw: Any) -> RecallResult:
    return await h.recall(query, **kw)


def _ids(result: RecallResult) -> list[str]:
    return [s.memory.id for s in result.results]


def _lexical_queries(h: Any) -> list[tuple[str, int]]:
    return [(arg[0], arg[2]) for op, arg in h.lexical.calls if op == "search"]


# --- queries, per_query_limit ---------------------------------------------------------------


async def test_queries_run_beside_query_and_merge(harness: Any) -> None:
    h = harness
    h.world.put(
        h.memory(_id(1), "green tea in the garden"),
        h.memory(_id(2), "the bicycle needs new brakes"),
        h.memory(_id(3), "unrelated note"),
    )
    plain = await _recall(h, "green tea")
    assert _ids(plain) == [_id(1)]
    both = await _recall(h, "green tea", queries=["bicycle brakes"])
    assert set(_ids(both)) == {_id(1), _id(2)}
    assert [q for q, _ in _lexical_queries(h)][-2:] == ["green tea", "bicycle brakes"]
    by_id = {s.memory.id: s for s in both.results}
    # Which sub-query found each result: 0 = query, 1 = queries[0].
    assert {k for k in by_id[_id(1)].streams if k.startswith("query:")} == {"query:0"}
    assert {k for k in by_id[_id(2)].streams if k.startswith("query:")} == {"query:1"}
    assert "keyword" in by_id[_id(2)].streams


async def test_queries_alone_need_no_query(harness: Any) -> None:
    h = harness
    h.world.put(h.memory(_id(1), "green tea"), h.memory(_id(2), "bicycle brakes"))
    result = await _recall(h, "", queries=["tea", "brakes"])
    assert set(_ids(result)) == {_id(1), _id(2)}
    assert "trending" not in result.streams
    # Scoring reads the queries together.
    assert h.ranker.calls[-1]["query"] == "tea brakes"


async def test_per_query_limit_bounds_each_sub_query(harness: Any) -> None:
    h = harness
    h.world.put(*(h.memory(_id(i), f"tea note {i}") for i in range(1, 9)))
    await _recall(h, "tea", queries=["note"], per_query_limit=3)
    assert _lexical_queries(h) == [("tea", 3), ("note", 3)]
    vector = [arg[2] for op, arg in h.vector.calls if op == "search" and arg[1].start is None]
    assert vector == [3, 3]


async def test_one_query_keeps_the_plain_path(harness: Any) -> None:
    h = harness
    h.world.put(h.memory(_id(1), "green tea"), h.memory(_id(2), "black tea"))
    result = await _recall(h, "tea")
    assert all(not k.startswith("query:") for s in result.results for k in s.streams)
    assert _lexical_queries(h) == [("tea", 40)]


async def test_queries_are_part_of_the_cache_key(harness: Any) -> None:
    h = harness
    h.world.put(h.memory(_id(1), "green tea"), h.memory(_id(2), "bicycle brakes"))
    first = await _recall(h, "tea")
    second = await _recall(h, "tea", queries=["brakes"])
    assert _ids(first) == [_id(1)]
    assert set(_ids(second)) == {_id(1), _id(2)}


async def test_bad_queries_name_the_field(client: Any) -> None:
    for request, field in (
        (gateway_pb2.RecallRequest(query="q", queries=["ok", ""]), "queries[1]"),
        (gateway_pb2.RecallRequest(query="q", queries=["x"] * 9), "queries"),
        (gateway_pb2.RecallRequest(query="q", per_query_limit=500), "per_query_limit"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await client.stub.Recall(request, metadata=client.auth(), timeout=5)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert client.field_of(exc.value) == field


# --- decompose -----------------------------------------------------------------------------


def _dancers(h: Any) -> None:
    h.world.put(
        h.memory(_id(1), "Jon won the regional dance competition"),
        h.memory(_id(2), "Gina entered a dance competition in Paris"),
        h.memory(_id(3), "Jon bought new shoes"),
    )


async def test_decompose_runs_the_sub_queries(harness: Any) -> None:
    h = harness
    _dancers(h)
    question = "Did Jon and Gina both enter dance competitions?"
    result = await _recall(h, question, decompose=True)
    assert [q for q, _ in _lexical_queries(h)] == [
        question,
        "Did Jon enter dance competitions?",
        "Did Gina enter dance competitions?",
    ]
    assert {_id(1), _id(2)} <= set(_ids(result))
    assert any(k == "query:2" for s in result.results for k in s.streams)


async def test_decompose_defaults_to_the_setting(new_harness: Any) -> None:
    question = "Did Jon and Gina both enter dance competitions?"
    off = new_harness()
    _dancers(off)
    await _recall(off, question)
    assert len(_lexical_queries(off)) == 1
    on = new_harness(candidates={"decompose": True})
    _dancers(on)
    await _recall(on, question)
    assert len(_lexical_queries(on)) == 3
    await _recall(on, question, decompose=False, limit=5)  # the request's flag wins
    assert len(_lexical_queries(on)) == 4


async def test_a_failing_decomposer_leaves_the_question(harness: Any) -> None:
    class Broken:
        async def decompose(self, query: str, rules: EntityRules) -> list[str]:
            raise TimeoutError("model did not answer")

    h = harness
    _dancers(h)
    h.gateway.reader._decomposer = Broken()
    result = await _recall(h, "Did Jon and Gina both enter dance competitions?", decompose=True)
    assert len(_lexical_queries(h)) == 1
    assert result.results
    assert result.degraded == ()


# --- trending ------------------------------------------------------------------------------


def _trend_corpus(h: Any) -> None:
    h.world.put(
        h.memory(_id(1), "a", importance=0.9, timestamp=T0, access_count=2),
        h.memory(_id(2), "b", importance=0.3, timestamp=T0 + timedelta(days=3), access_count=7),
        h.memory(_id(3), "c", importance=0.6, timestamp=T0 + timedelta(days=1), tags=("ops",)),
        h.memory(_id(4), "d", importance=1.0, archived=True),
        h.memory(_id(5), "e", importance=0.8, t_invalid=T0),  # expired: not current
    )


@pytest.mark.parametrize("query", ["", "*", "  "])
async def test_an_empty_query_lists_by_importance_without_text_streams(
    harness: Any, query: str
) -> None:
    h = harness
    _trend_corpus(h)
    result = await _recall(h, query)
    assert _ids(result) == [_id(1), _id(3), _id(2)]
    assert result.streams == ("trending",)
    assert [s.score for s in result.results] == [0.9, 0.6, 0.3]
    assert not [c for c in h.vector.calls + h.lexical.calls if c[0] == "search"]
    assert not [c for c in h.graph.calls if c[0] == "search"]
    assert h.ranker.calls == []


async def test_trending_sorts_and_filters(harness: Any) -> None:
    h = harness
    _trend_corpus(h)
    assert _ids(await _recall(h, "*", sort="recency")) == [_id(2), _id(3), _id(1)]
    assert _ids(await _recall(h, "", sort="access_count", limit=1)) == [_id(2)]
    assert _ids(await _recall(h, "", tags=["ops"])) == [_id(3)]
    everything = await _recall(h, "", include_archived=True)
    assert set(_ids(everything)) == {_id(i) for i in range(1, 6)}


async def test_trending_is_one_listing_of_the_text_index(harness: Any) -> None:
    h = harness
    _trend_corpus(h)
    result = await _recall(h, "", sort="recency", tags=["ops"], limit=1)
    assert _ids(result) == [_id(3)]
    [(flt, sort, limit)] = [arg for op, arg in h.lexical.calls if op == "top"]
    assert (flt.tags, sort, limit >= 1) == (("ops",), Sort.RECENCY, True)


async def test_sort_is_checked_through_grpc(client: Any) -> None:
    for request in (
        gateway_pb2.RecallRequest(query="", sort="popular"),
        gateway_pb2.RecallRequest(query="tea", sort="recency"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await client.stub.Recall(request, metadata=client.auth(), timeout=5)
        assert client.field_of(exc.value) == "sort"
    with pytest.raises(InvalidArgument):
        await _recall(client.harness, "*", queries=["tea"], sort="recency")


async def test_trending_through_grpc(client: Any) -> None:
    _trend_corpus(client.harness)
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(query="*", sort="recency", limit=2), metadata=client.auth()
    )
    assert [r.memory.id for r in reply.results] == [_id(2), _id(3)]
    assert list(reply.streams) == ["trending"]
    assert reply.results[0].components["recency"] == 1.0
