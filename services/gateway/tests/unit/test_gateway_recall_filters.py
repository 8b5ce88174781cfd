"""Recall filters and post-ranking (issue #4): time_query, exclude_types, state_mode,
min_score, diversify_by, token_budget — through the gateway's fakes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_core.model import META_PATTERN, Filter, Relation
from engram_core.state import StateMode
from engram_gateway.bootstrap import Backends, build_gateway
from engram_gateway.service import Deadline, RecallRequest
from engram_gateway.service.ports import RecallResult


@pytest.fixture
def harness(new_harness: Any) -> Any:
    """All three streams searched, as with a graph weight (`hybrid_graph_stream`): these
    tests are about filters reaching every backend."""
    return new_harness(streams={"hybrid_graph_stream": True})


NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _id(n: int) -> str:
    return f"0190f3a4-7b1c-7d2e-8f00-{n:012x}"


async def _recall(h: Any, query: str = "tea", **kw: Any) -> RecallResult:
    return await h.recall(query, **kw)


def _filters(h: Any) -> list[Filter]:
    """The filter every backend search received (vector, lexical, graph)."""
    out = [arg[1] for op, arg in h.vector.calls + h.lexical.calls if op == "search"]
    out += [arg[2] for op, arg in h.graph.calls if op == "search"]
    return out


def _ids(result: RecallResult) -> list[str]:
    return [s.memory.id for s in result.results]


# --- time_query --------------------------------------------------------------------------


async def test_time_query_narrows_every_backend_filter(harness: Any) -> None:
    h = harness
    gw = build_gateway(
        h.settings,
        Backends(h.vector, h.lexical, h.graph, h.ranker),
        h.log,
        h.cache,
        clock=lambda: NOW,
    )
    old = h.memory(_id(1), "green tea at breakfast", timestamp=NOW - timedelta(days=30))
    new = h.memory(_id(2), "black tea after lunch", timestamp=NOW - timedelta(days=2))
    h.world.put(old, new)
    result = await gw.reader.recall(
        h.tenant, RecallRequest(query="tea", time_query="last 7 days"), Deadline.within(5.0)
    )
    assert _ids(result) == [new.id]
    week = NOW - timedelta(days=7)
    searched = [arg[1] for op, arg in h.lexical.calls if op == "search"]
    searched += [arg[2] for op, arg in h.graph.calls if op == "search"]
    searched += [arg[1] for op, arg in h.vector.calls if op == "search"][:1]
    assert len(searched) == 3  # vector, lexical and graph each got the window in-query
    assert all(f.start == week and f.end == NOW for f in searched)
    # The timeline-neighbour searches stay inside the window too.
    assert all(
        f.start is not None and f.start >= week and f.end is not None and f.end <= NOW
        for f in _filters(h)
    )


async def test_time_query_is_intersected_with_start_and_end(harness: Any) -> None:
    h = harness
    h.world.put(
        h.memory(_id(1), "tea in march", timestamp=datetime(2024, 3, 10, tzinfo=UTC)),
        h.memory(_id(2), "tea in april", timestamp=datetime(2024, 4, 10, tzinfo=UTC)),
    )
    result = await _recall(h, time_query="between 2024-03 and 2024-04", start="2024-04-01")
    assert _ids(result) == [_id(2)]
    f = _filters(h)[0]
    assert f.start == datetime(2024, 4, 1, tzinfo=UTC)
    assert f.end is not None
    assert f.end.date() == datetime(2024, 4, 30).date()


async def test_time_query_reads_written_dates(harness: Any) -> None:
    h = harness
    h.world.put(
        h.memory(_id(1), "tea in march", timestamp=datetime(2024, 3, 10, tzinfo=UTC)),
        h.memory(_id(2), "tea in april", timestamp=datetime(2024, 4, 10, tzinfo=UTC)),
    )
    assert _ids(await _recall(h, time_query="after March 31st, 2024")) == [_id(2)]
    assert _ids(await _recall(h, time_query="in March 2024")) == [_id(1)]


# --- exclude_types / MetaPattern ---------------------------------------------------------


async def test_meta_pattern_is_excluded_unless_asked_for(harness: Any) -> None:
    h = harness
    h.world.put(
        h.memory(_id(1), "tea every morning", type="Preference"),
        h.memory(_id(2), "tea habits summary", type=META_PATTERN),
    )
    plain = await _recall(h)
    assert _ids(plain) == [_id(1)]
    assert all(META_PATTERN in f.exclude_types for f in _filters(h))

    h.vector.calls.clear(), h.lexical.calls.clear(), h.graph.calls.clear()
    asked = await _recall(h, types=[META_PATTERN])
    assert _ids(asked) == [_id(2)]
    assert all(META_PATTERN not in f.exclude_types for f in _filters(h))


async def test_exclude_types_reaches_the_backends(harness: Any) -> None:
    h = harness
    h.world.put(
        h.memory(_id(1), "tea every morning", type="Preference"),
        h.memory(_id(2), "tea was spilled", type="Event"),
    )
    result = await _recall(h, exclude_types=["Event"])
    assert _ids(result) == [_id(1)]
    assert all(set(f.exclude_types) == {"Event", META_PATTERN} for f in _filters(h))


# --- min_score, diversify_by, token_budget -----------------------------------------------


def _corpus(h: Any) -> None:
    h.world.put(
        h.memory(_id(1), "green tea and jasmine tea in the garden", tags=("session:1:turn:1",)),
        h.memory(_id(2), "green tea in the morning", tags=("session:1:turn:2",)),
        h.memory(_id(3), "tea with milk", tags=("session:1:turn:3",)),
        h.memory(_id(4), "green tea on the train", tags=("session:2:turn:1",)),
    )


async def test_min_score_cuts_weak_results(harness: Any) -> None:
    h = harness
    _corpus(h)
    plain = await _recall(h, "green tea")
    scores = [s.score for s in plain.results]
    assert len(scores) == 4
    assert scores[0] > scores[-1]
    floor = (scores[0] + scores[-1]) / 2
    cut = await _recall(h, "green tea", min_score=floor)
    assert 0 < len(cut.results) < 4
    assert all(s.score >= floor for s in cut.results)
    assert cut.cut["min_score"] == 4 - len(cut.results)


async def test_diversify_caps_results_per_group(harness: Any) -> None:
    h = harness
    _corpus(h)
    result = await _recall(h, "green tea", diversify_by="tag:session", max_per_group=1)
    groups = [
        next(t for t in s.memory.tags if t.startswith("session:"))[:9] for s in result.results
    ]
    assert sorted(groups) == ["session:1", "session:2"]
    assert result.cut["group_full"] == 2


async def test_token_budget_packs_best_first_within_budget(harness: Any) -> None:
    h = harness
    _corpus(h)
    plain = await _recall(h, "green tea")
    packed = await _recall(h, "green tea", token_budget=20)
    assert packed.context
    assert 0 < packed.context_tokens <= 20
    best = plain.results[0].memory
    assert packed.context.splitlines()[0].endswith(best.content)
    assert _ids(packed)[0] == best.id
    assert len(packed.results) < len(plain.results)  # the budget cut the rest
    assert packed.cut["token_budget"] >= 1
    assert plain.context == ""
    assert plain.context_tokens == 0


async def test_every_new_field_is_part_of_the_cache_key(harness: Any) -> None:
    h = harness
    _corpus(h)
    first = await _recall(h, "green tea")
    again = await _recall(h, "green tea", token_budget=20)
    assert first.context == ""
    assert again.context


# --- state_mode --------------------------------------------------------------------------


async def test_current_hides_a_superseded_memory_and_shows_its_head(harness: Any) -> None:
    h = harness
    old = h.memory(_id(1), "Sarah drinks green tea")
    head = h.memory(_id(2), "Sarah switched to coffee")  # "tea" does not find it
    h.world.put(old, head)
    h.world.relations.append((h.tenant, Relation(old.id, head.id, "INVALIDATED_BY", 1.0)))

    current = await _recall(h, "green tea")
    assert _ids(current) == [head.id]
    everything = await _recall(h, "green tea", state_mode=StateMode.ALL)
    assert _ids(everything) == [old.id]


async def test_current_hides_expired_and_not_yet_valid(harness: Any) -> None:
    h = harness
    far = datetime(2999, 1, 1, tzinfo=UTC)
    h.world.put(
        h.memory(_id(1), "tea now"),
        h.memory(_id(2), "tea expired", t_invalid=datetime(2000, 1, 1, tzinfo=UTC)),
        h.memory(_id(3), "tea later", t_valid=far),
    )
    assert _ids(await _recall(h)) == [_id(1)]
    assert set(_ids(await _recall(h, state_mode=StateMode.ALL))) == {_id(1), _id(2), _id(3)}


# --- bad input names the field -----------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"time_query": "around teatime"}, "time_query"),
        ({"time_query": "on February 30, 2024"}, "time_query"),
        ({"time_query": "last week", "timezone": "Mars/Olympus"}, "timezone"),
        ({"state_mode": 7}, "state_mode"),
        ({"min_score": -1.0}, "min_score"),
        ({"min_score": float("nan")}, "min_score"),
        ({"token_budget": -5}, "token_budget"),
        ({"diversify_by": "tag:session", "max_per_group": -1}, "max_per_group"),
        ({"diversify_by": "two words"}, "diversify_by"),
        ({"exclude_types": [""]}, "exclude_types[0]"),
    ],
)
async def test_bad_input_names_the_field(client: Any, fields: dict[str, Any], name: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.Recall(
            gateway_pb2.RecallRequest(query="tea", **fields), metadata=client.auth()
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(err.value) == name


async def test_grpc_response_carries_context_and_cuts(client: Any) -> None:
    _corpus(client.harness)
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(
            query="green tea",
            token_budget=20,
            state_mode=common_pb2.STATE_MODE_ALL,
            time_query="2025",
        ),
        metadata=client.auth(),
    )
    assert reply.context
    assert 0 < reply.context_tokens <= 20
    assert reply.cut["token_budget"] >= 1
    assert not reply.escalated


async def test_a_default_recall_shows_the_same_content_once(new_harness: Any) -> None:
    def stocked(**settings: Any) -> Any:
        h = new_harness(**settings)
        h.world.put(
            h.memory(_id(1), "Sarah takes green tea at breakfast."),
            h.memory(_id(2), "sarah takes GREEN tea at breakfast"),  # the same, stored twice
            h.memory(_id(3), "Sarah takes green tea at lunch."),  # one word apart: another fact
        )
        return h

    result = await _recall(stocked(), "green tea")
    assert len(result.results) == 2
    assert _id(3) in _ids(result)
    assert result.cut["near_duplicate"] == 1
    every = await _recall(stocked(postrank={"near_duplicates": False}), "green tea")
    assert sorted(_ids(every)) == [_id(1), _id(2), _id(3)]


async def test_overfetch_never_asks_scoring_beyond_its_max_limit(new_harness: Any) -> None:
    h = new_harness(postrank={"near_duplicates": False})
    _corpus(h)
    await _recall(h, "green tea", limit=100, min_score=0.01)
    assert h.ranker.calls[-1]["limit"] == 100
    await _recall(h, "green tea", limit=5, state_mode=StateMode.ALL)
    assert h.ranker.calls[-1]["limit"] == 5  # nothing to cut: exactly the limit
    h = new_harness()  # duplicate content is dropped by default: it may cut, so overfetch
    _corpus(h)
    await _recall(h, "green tea", limit=5, state_mode=StateMode.ALL)
    assert h.ranker.calls[-1]["limit"] == 15


# --- tier escalation ---------------------------------------------------------------------


def _lexical_pools(h: Any) -> list[int]:
    return [arg[2] for op, arg in h.lexical.calls if op == "search"]


async def test_weak_evidence_widens_the_pool_once(new_harness: Any) -> None:
    h = new_harness(scoring={"escalation_floor": 0.99})
    _corpus(h)  # four "tea" memories: limit 1 → pool 4, which the lexical stream fills
    result = await _recall(h, "green tea", limit=1)
    assert result.escalated
    assert _lexical_pools(h) == [4, 8]


async def test_no_escalation_by_default_or_when_no_stream_is_full(
    harness: Any, new_harness: Any
) -> None:
    _corpus(harness)
    plain = await _recall(harness, "green tea", limit=1)
    assert not plain.escalated
    assert _lexical_pools(harness) == [4]

    h = new_harness(scoring={"escalation_floor": 0.99})
    _corpus(h)
    wide = await _recall(h, "green tea", limit=2)  # pool 8 > the 4 matches: nothing more
    assert not wide.escalated
    assert _lexical_pools(h) == [8]
