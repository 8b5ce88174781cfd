"""The read path through gRPC with fakes: fan-out, merge, degradation, read-your-writes,
the recall cache, access events, Get/Related/Stats."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_core.errors import Internal, Unavailable
from engram_core.model import Hit, Memory, Relation, TagMatch
from engram_gateway.bootstrap import Backends, build_gateway
from engram_gateway.service import Deadline, RecallMode, RecallRequest
from engram_gateway.service.access import AccessRecorder
from engram_gateway.service.ports import Envelope


@pytest.fixture
def harness(new_harness: Any) -> Any:
    """All three streams searched, as with a graph weight (`hybrid_graph_stream`): these
    tests are about how the streams are merged, cut, degraded and fetched."""
    return new_harness(streams={"hybrid_graph_stream": True})


A = "0190f3a4-7b1c-7d2e-8f00-00000000000a"
B = "0190f3a4-7b1c-7d2e-8f00-00000000000b"
C = "0190f3a4-7b1c-7d2e-8f00-00000000000c"
D = "0190f3a4-7b1c-7d2e-8f00-00000000000d"


def seed(h: Any) -> None:
    h.world.put(
        h.memory(A, "Sarah prefers green tea in the morning", tags=("person:sarah",)),
        h.memory(B, "The deploy pipeline runs tea tests", importance=0.9),
        h.memory(C, "Lunch with Sarah at noon", tags=("person:sarah", "meal")),
        h.memory(D, "Unrelated note about bicycles"),
    )


def stream_searches(h: Any) -> int:
    """Vector searches of the stream itself, not the context step's time-window reads."""
    return sum(1 for op, arg in h.vector.calls if op == "search" and arg[1].start is None)


def recall(query: str = "sarah tea", **kw: Any) -> gateway_pb2.RecallRequest:
    return gateway_pb2.RecallRequest(query=query, **kw)


async def test_recall_merges_streams_and_returns_every_component(client: Any) -> None:
    h = client.harness
    seed(h)
    reply = await client.stub.Recall(recall(), metadata=client.auth())
    ids = [r.memory.id for r in reply.results]
    assert set(ids) == {A, B, C}
    assert ids[0] == A  # both words, in every stream
    assert list(reply.streams) == ["vector", "lexical", "graph"]
    assert list(reply.degraded) == []
    assert reply.query_ms > 0
    top = reply.results[0]
    assert {"vector", "keyword", "graph", "importance", "recency", "relation"} <= set(
        top.components
    )
    assert top.streams["vector"].rank == 1
    assert top.streams["keyword"].rank == 1
    assert top.memory.content == "Sarah prefers green tea in the morning"
    # the graph's hits carry no memory, but the other streams brought them
    assert not any(op == "get" for op, _ in h.vector.calls)


async def test_hits_without_a_memory_are_fetched(client: Any, monkeypatch: Any) -> None:
    h = client.harness
    seed(h)

    async def graph_only(*args: Any, **kw: Any) -> list[Hit]:
        return [Hit(D, 3.0), Hit("0190f3a4-7b1c-7d2e-8f00-0000000000ee", 1.0)]

    monkeypatch.setattr(h.graph, "search", graph_only)
    reply = await client.stub.Recall(recall(), metadata=client.auth())
    by_id = {r.memory.id: r for r in reply.results}
    assert by_id[D].memory.content == "Unrelated note about bicycles"
    assert set(by_id[D].streams) == {"graph"}
    assert len(by_id) == 4  # the id no store holds is dropped
    assert ("get", [D, "0190f3a4-7b1c-7d2e-8f00-0000000000ee"]) in h.vector.calls


async def test_pool_is_over_fetched_and_filters_reach_every_backend(client: Any) -> None:
    h = client.harness
    seed(h)
    await client.stub.Recall(
        recall(
            "What does Sarah drink, tea?",
            limit=5,
            tags=["Person/Sarah"],
            tag_match=common_pb2.TAG_MATCH_PREFIX,
            types=["Memory"],
            start="2025-01-01",
            end="2025-12-31",
            profile="conversation",
        ),
        metadata=client.auth(),
    )
    (_, (query, flt, limit, timeout)) = next(c for c in h.vector.calls if c[0] == "search")
    # The vector stream embeds the query without the people it names (query.dense_query);
    # its pool (4 × limit) is doubled because tags scope the search.
    assert (query, limit) == ("What does drink, tea?", 40)
    assert flt.tags == ("person:sarah",)
    assert flt.tag_match is TagMatch.PREFIX
    assert flt.types == ("Memory",)
    assert flt.start == datetime(2025, 1, 1, tzinfo=UTC)
    assert flt.end is not None
    assert flt.end.date().isoformat() == "2025-12-31"
    assert 0 < timeout <= 2.0
    (_, (ents, words, _, glimit)) = next(c for c in h.graph.calls if c[0] == "search")
    assert "people:sarah" in ents
    assert words == ("sarah", "drink", "tea")
    assert glimit == 20


async def test_a_failing_backend_degrades_the_answer(client: Any) -> None:
    h = client.harness
    seed(h)
    h.lexical.fail = Unavailable("lexical: connection refused")
    reply = await client.stub.Recall(recall(), metadata=client.auth())
    assert list(reply.degraded) == ["lexical"]
    assert list(reply.streams) == ["vector", "graph"]
    assert reply.results[0].memory.id == A
    assert "keyword" not in reply.results[0].streams


async def test_a_slow_backend_is_cut_at_its_budget(new_harness: Any) -> None:
    h = new_harness(
        streams={"graph_budget": {"fraction": 0.5, "cap_s": 0.1}, "hybrid_graph_stream": True}
    )
    seed(h)
    h.graph.delay = 5.0  # within the recall's deadline: waited for, it would have answered
    result = await h.gateway.reader.recall(h.tenant, _req("sarah tea"), _deadline(10))
    assert result.degraded == ("graph",)
    assert result.results[0].memory.id == A


async def test_no_stream_answering_is_unavailable(client: Any) -> None:
    h = client.harness
    seed(h)
    for backend in (h.vector, h.lexical, h.graph):
        backend.fail = Internal("boom")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Recall(recall(), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "vector" in (exc.value.details() or "")


async def test_scoring_down_falls_back_to_local_rrf(client: Any) -> None:
    h = client.harness
    seed(h)
    # The graph finds A by the entity it mentions (the extractor misses a name that opens
    # a sentence), so A leads all three streams.
    h.world.put(replace(h.world.memories[(h.tenant, A)], entities=("people:sarah",)))
    h.ranker.fail = Unavailable("scoring down")
    reply = await client.stub.Recall(recall(), metadata=client.auth())
    assert list(reply.degraded) == ["scoring"]
    assert reply.results[0].memory.id == A
    assert reply.results[0].score == pytest.approx(3 / 61)  # rank 1 in three streams, k=60


async def test_relation_component_sums_edges_between_candidates(client: Any) -> None:
    h = client.harness
    seed(h)
    h.world.relations += [
        (h.tenant, Relation(A, C, "RELATES_TO", 0.5)),
        (h.tenant, Relation(C, B, "LEADS_TO", 0.25)),
        (h.tenant, Relation(A, D, "RELATES_TO", 1.0)),  # D is no candidate
        (h.tenant, Relation(A, C, "RELATES_TO", 0.5)),  # the same edge twice counts once
    ]
    await client.stub.Recall(recall(), metadata=client.auth())
    sent = {c.memory.id: c.relation for c in h.ranker.calls[-1]["candidates"]}
    assert sent == {A: 0.5, B: 0.25, C: 0.75}


@pytest.mark.parametrize(
    ("settings", "mode", "origin"),
    [
        ({}, RecallMode.HYBRID, "user"),  # the relation component and the state step
        ({}, RecallMode.HYBRID_GRAPH, ""),  # the graph rerank walks consolidation's edges too
        ({"relations": {"system_edges": True}}, RecallMode.HYBRID, ""),
    ],
)
async def test_recall_asks_for_the_edges_it_reads(
    new_harness: Any, settings: dict[str, Any], mode: RecallMode, origin: str
) -> None:
    h = new_harness(**settings)
    seed(h)
    h.world.relations += [
        (h.tenant, Relation(A, C, "RELATES_TO", 0.5)),
        (h.tenant, Relation(A, B, "SIMILAR_TO", 0.9, origin="system")),
    ]
    result = await h.recall("tea", mode=mode)
    assert h.graph.origins
    assert set(h.graph.origins) == {origin}
    relation = {r.memory.id: r.components["relation"] for r in result.results}
    # Consolidation's edge counts only when the setting says so, whatever was read.
    assert relation[B] == (0.9 if settings else 0.0)


async def test_fusion_is_passed_to_scoring(client: Any) -> None:
    seed(client.harness)
    await client.stub.Recall(recall(fusion=gateway_pb2.FUSION_RRF), metadata=client.auth())
    assert client.harness.ranker.calls[-1]["fusion"].value == "rrf"


async def test_min_sequence_waits_for_the_watermark(client: Any) -> None:
    h = client.harness
    h.log.auto_watermark = False
    reply = await client.stub.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="fresh tea memory")),
        metadata=client.auth(),
    )
    pending = asyncio.ensure_future(
        client.stub.Recall(
            recall("fresh tea", min_sequence=reply.sequence), metadata=client.auth(), timeout=5
        )
    )
    await asyncio.sleep(0.2)
    assert not pending.done()
    h.log.applied = reply.sequence
    answer = await pending
    assert [r.memory.id for r in answer.results] == [reply.id]


async def test_min_sequence_passes_another_tenants_undecided_event(client: Any) -> None:
    h = client.harness
    h.log.auto_watermark = False

    async def store(content: str, token: str) -> Any:
        request = gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content=content))
        return await client.stub.Store(request, metadata=client.auth(token))

    stuck = await store("a note ingest keeps retrying", "rw-token")  # holds the ack floor
    mine = await store("globex tea order", "other")
    h.log.decided.add(mine.sequence)
    answer = await client.stub.Recall(
        recall("tea order", min_sequence=mine.sequence), metadata=client.auth("other"), timeout=5
    )
    assert [r.memory.id for r in answer.results] == [mine.id]
    with pytest.raises(grpc.aio.AioRpcError) as exc:  # acme's own event is not decided
        await client.stub.Recall(
            recall("note", min_sequence=stuck.sequence), metadata=client.auth(), timeout=0.3
        )
    assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_min_sequence_waits_for_the_tenants_earlier_undecided_event(client: Any) -> None:
    h = client.harness
    h.log.auto_watermark = False
    request = gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="globex tea"))
    first = await client.stub.Store(request, metadata=client.auth("other"))
    request = gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="globex coffee"))
    second = await client.stub.Store(request, metadata=client.auth("other"))
    h.log.decided.add(second.sequence)  # decided, but the tenant's first write is not
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Recall(
            recall("tea", min_sequence=second.sequence),
            metadata=client.auth("other"),
            timeout=0.3,
        )
    assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    h.log.decided.add(first.sequence)
    answer = await client.stub.Recall(
        recall("tea", min_sequence=second.sequence), metadata=client.auth("other"), timeout=5
    )
    assert first.id in [r.memory.id for r in answer.results]


async def test_min_sequence_not_reached_is_deadline_exceeded(client: Any) -> None:
    h = client.harness
    h.log.auto_watermark = False
    reply = await client.stub.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="x")),
        metadata=client.auth(),
    )
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Recall(
            recall(min_sequence=reply.sequence), metadata=client.auth(), timeout=0.5
        )
    assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # The server's own answer (the client's deadline would say nothing of min_sequence).
    assert f"min_sequence {reply.sequence}" in (exc.value.details() or "")
    assert [op for op, _ in h.vector.calls] == []


async def test_min_sequence_wait_uses_the_default_budget(new_harness: Any) -> None:
    h = new_harness(default_deadline_s=0.3)
    h.log.apply, h.log.auto_watermark = False, False  # the log has sequence 1; not applied
    await h.log.stored(Envelope("e1", h.tenant, datetime.now(UTC)), Memory("m1", h.tenant, "x"))
    with pytest.raises(Exception, match="min_sequence 1") as exc:
        await h.gateway.reader.recall(h.tenant, _req("x", min_sequence=1), _deadline(0.3))
    assert type(exc.value).__name__ == "DeadlineExceeded"


async def test_min_sequence_past_the_tenants_writes_is_refused_without_the_logs_end(
    client: Any,
) -> None:
    request = gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="acme's note"))
    mine = await client.stub.Store(request, metadata=client.auth())
    for n in range(3):  # another tenant's writes move the log's end, not acme's bound
        request = gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content=f"g{n}"))
        await client.stub.Store(request, metadata=client.auth("other"))
    await client.stub.Recall(recall(min_sequence=mine.sequence), metadata=client.auth())
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Recall(recall(min_sequence=mine.sequence + 1), metadata=client.auth())
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(exc.value) == "min_sequence"
    assert str(mine.sequence + 3) not in (exc.value.details() or "")


async def test_recall_without_min_sequence_never_waits_on_the_log(client: Any) -> None:
    # The log hangs on every call (watermark, last sequence, MemoryAccessed publishes):
    # recalls without min_sequence still answer, even right after this gateway's write.
    h = client.harness
    seed(h)
    await client.stub.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="sarah drinks tea")),
        metadata=client.auth(),
    )
    h.log.hung = asyncio.Event()
    try:
        for _ in range(3):
            reply = await client.stub.Recall(recall(), metadata=client.auth(), timeout=5)
            assert A in [r.memory.id for r in reply.results]
        # With min_sequence it waits, but only until its deadline, however the log hangs.
        waiting = h.gateway.reader.recall(h.tenant, _req("x", min_sequence=2), _deadline(0.3))
        with pytest.raises(Exception, match="min_sequence 2") as exc:
            await asyncio.wait_for(waiting, 5)
        assert type(exc.value).__name__ == "DeadlineExceeded"
    finally:
        h.log.hung.set()


async def test_access_events_beyond_the_bound_are_dropped_and_counted(harness: Any) -> None:
    h = harness
    h.log.hung = asyncio.Event()
    counter = iter(range(100))
    now = datetime(2025, 1, 1, tzinfo=UTC)
    recorder = AccessRecorder(h.log, lambda: now, lambda: f"ev-{next(counter)}", max_pending=4)
    for _ in range(10):
        recorder.record(h.tenant, [A])  # returns at once: nothing awaited
    assert recorder.dropped == 6
    h.log.hung.set()
    await recorder.drain()
    assert len(h.log.of("accessed")) == 4


async def test_recall_cache_is_invalidated_by_a_write(client: Any) -> None:
    h = client.harness
    seed(h)

    def searches() -> int:
        return stream_searches(h)

    first = await client.stub.Recall(recall(), metadata=client.auth())
    second = await client.stub.Recall(recall(), metadata=client.auth())
    assert searches() == 1
    assert [r.memory.id for r in second.results] == [r.memory.id for r in first.results]
    stored = await client.stub.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="sarah drinks tea daily")),
        metadata=client.auth(),
    )
    third = await client.stub.Recall(recall(), metadata=client.auth())
    assert searches() == 2
    assert stored.id in [r.memory.id for r in third.results]
    # another tenant's cache entry survives acme's write
    await client.stub.Recall(recall(), metadata=client.auth("other"))
    await client.stub.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="more")),
        metadata=client.auth(),
    )
    await client.stub.Recall(recall(), metadata=client.auth("other"))
    assert searches() == 3  # the second globex recall was still cached


async def test_a_write_is_recalled_once_applied_not_a_cached_answer_from_before(
    client: Any,
) -> None:
    h = client.harness
    seed(h)
    await client.stub.Recall(recall(), metadata=client.auth())  # cached
    h.log.apply, h.log.auto_watermark = False, False  # ingest is behind
    stored = await client.stub.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="sarah drinks tea daily")),
        metadata=client.auth(),
    )
    before = await client.stub.Recall(recall(), metadata=client.auth())
    assert stored.id not in [r.memory.id for r in before.results]  # not applied yet
    assert stream_searches(h) == 2
    again = await client.stub.Recall(recall(), metadata=client.auth())
    assert stream_searches(h) == 3  # that answer lacked the write: it was not cached

    [event] = h.log.of("stored")  # ingest catches up
    h.log._apply(event.event, event.env, event.sequence, event.payload)
    h.log.applied = h.log.last
    after = await client.stub.Recall(recall(), metadata=client.auth())
    assert stored.id in [r.memory.id for r in after.results]
    assert [r.memory.id for r in again.results] != [r.memory.id for r in after.results]
    # That answer was labelled with the watermark last known (a recall without
    # min_sequence never waits for a fresh one); once the new one is known, the answer
    # is cached again.
    await client.stub.Recall(recall(), metadata=client.auth())
    await client.stub.Recall(recall(), metadata=client.auth())
    assert stream_searches(h) == 5


async def test_a_write_through_another_replica_holds_back_the_shared_cache(
    client: Any,
) -> None:
    h = client.harness
    seed(h)
    # A second gateway replica on the same log, stores and shared cache (Redis in production).
    other = build_gateway(
        h.settings, Backends(h.vector, h.lexical, h.graph, h.ranker), h.log, h.cache
    )

    async def via_other() -> list[str]:
        result = await other.reader.recall(h.tenant, _req("sarah tea"), _deadline(5))
        return [s.memory.id for s in result.results]

    await via_other()
    h.log.apply, h.log.auto_watermark = False, False
    stored = await client.stub.Store(  # through this replica
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="sarah drinks tea daily")),
        metadata=client.auth(),
    )
    assert stored.id not in await via_other()  # not applied yet; its answer is not kept
    [event] = h.log.of("stored")
    h.log._apply(event.event, event.env, event.sequence, event.payload)
    h.log.applied = h.log.last
    assert stored.id in await via_other()


async def test_degraded_answers_are_not_cached(client: Any) -> None:
    h = client.harness
    seed(h)
    h.graph.fail = Unavailable("graph down")
    await client.stub.Recall(recall(), metadata=client.auth())
    h.graph.fail = None
    reply = await client.stub.Recall(recall(), metadata=client.auth())
    assert list(reply.degraded) == []


async def test_cached_answer_is_not_served_to_a_newer_min_sequence(client: Any) -> None:
    h = client.harness
    seed(h)
    await client.stub.Recall(recall(), metadata=client.auth())
    h.log.apply = False  # a write by another gateway replica: no invalidation here
    other = await h.log.stored(
        Envelope("e-other", h.tenant, datetime.now(UTC)), Memory("m-other", h.tenant, "x")
    )
    await client.stub.Recall(recall(min_sequence=other.sequence), metadata=client.auth())
    assert stream_searches(h) == 2


async def test_recall_publishes_memory_accessed(client: Any) -> None:
    h = client.harness
    seed(h)
    reply = await client.stub.Recall(recall(), metadata=client.auth())
    await h.gateway.access.drain()
    [event] = h.log.of("accessed")
    assert list(event.payload) == [r.memory.id for r in reply.results]


async def test_access_publish_failure_never_fails_a_read(client: Any) -> None:
    h = client.harness
    seed(h)
    h.log.fail = Unavailable("log down")
    reply = await client.stub.Recall(recall(), metadata=client.auth())
    got = await client.stub.Get(gateway_pb2.GetRequest(id=A), metadata=client.auth())
    await h.gateway.access.drain()
    assert reply.results
    assert got.memory.id == A


async def test_get_publishes_memory_accessed(client: Any) -> None:
    h = client.harness
    seed(h)
    got = await client.stub.Get(gateway_pb2.GetRequest(id=A.upper()), metadata=client.auth())
    await h.gateway.access.drain()
    assert got.memory.id == A
    assert [list(p.payload) for p in h.log.of("accessed")] == [[A]]


async def test_related_returns_the_memories(client: Any) -> None:
    h = client.harness
    seed(h)
    h.world.relations += [
        (h.tenant, Relation(A, C, "RELATES_TO", 0.7)),
        (h.tenant, Relation(A, B, "LEADS_TO", 0.4)),
    ]
    reply = await client.stub.Related(
        gateway_pb2.RelatedRequest(id=A, types=["leads_to"]), metadata=client.auth()
    )
    assert [(r.memory.id, r.type, r.strength, r.depth) for r in reply.related] == [
        (B, "LEADS_TO", pytest.approx(0.4), 1)
    ]
    assert h.graph.calls[-1] == ("related", (A, 1, ("LEADS_TO",), 20))


async def test_stats_reports_counts_and_marks_a_failed_store(client: Any) -> None:
    h = client.harness
    seed(h)
    h.graph.fail = Unavailable("graph down")
    h.log.apply = False  # one event in the log, not in the stores
    at = datetime(2025, 6, 1, tzinfo=UTC)
    await h.log.stored(Envelope("e1", h.tenant, at), h.memory("m-new", "in the log"))
    reply = await client.stub.Stats(gateway_pb2.StatsRequest(), metadata=client.auth())
    assert reply.tenant == h.tenant
    assert dict(reply.counts) == {"vector": 4, "lexical": 4, "graph": -1}
    assert (reply.watermark, reply.last_sequence) == (1, 1)


def _req(query: str, **kw: Any) -> RecallRequest:
    return RecallRequest(query=query, **kw)


def _deadline(seconds: float) -> Deadline:
    return Deadline.within(seconds)


async def test_an_unreadable_cache_entry_is_a_miss(client: Any) -> None:
    h = client.harness
    seed(h)
    await client.stub.Recall(recall(), metadata=client.auth())
    for key in [k for k in h.cache._data if k.startswith("recall:")]:
        await h.cache.set(key, b"\x00" * 8 + b"\xff\xfe garbage", 60)
    reply = await client.stub.Recall(recall(), metadata=client.auth())
    assert reply.results[0].memory.id == A
    assert stream_searches(h) == 2


async def test_nothing_found_is_an_empty_answer(client: Any) -> None:
    h = client.harness
    seed(h)
    reply = await client.stub.Recall(recall("zeppelin"), metadata=client.auth())
    assert list(reply.results) == []
    assert list(reply.streams) == ["vector", "lexical", "graph"]
    assert h.ranker.calls == []
