"""Timeline neighbours (service/context.py), the dense query, and both through Recall."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engram.gateway.v1 import gateway_pb2
from engram_core.entities import conversation_rules
from engram_core.model import Filter, Memory
from engram_core.scoring import Candidate
from engram_gateway.service import reads
from engram_gateway.service.context import (
    NARROWING,
    NARROWINGS,
    preceding,
    seed_windows,
    window_filter,
    with_neighbours,
)
from engram_gateway.service.postrank import GroupBy
from engram_gateway.service.query import dense_query

T0 = datetime(2025, 5, 1, 12, tzinfo=UTC)


def m(id: str, at: datetime = T0, content: str = "x") -> Memory:
    return Memory(id=id, tenant="t", content=content, timestamp=at)


def c(id: str, at: datetime = T0) -> Candidate:
    return Candidate(memory=m(id, at))


# --- dense query ------------------------------------------------------------------------


CHAT = conversation_rules()  # the profile that reads speaker names


def test_dense_query_leaves_out_the_people_named() -> None:
    assert dense_query("What did Caroline research?", CHAT) == "What did research?"
    assert dense_query("What is Caroline's identity?", CHAT) == "What is identity?"
    assert dense_query("How do Jon and Gina both like to destress?", CHAT) == (
        "How do and both like to destress?"
    )


def test_dense_query_keeps_a_query_without_people_or_with_nothing_else() -> None:
    assert dense_query("kubernetes deploy failures", CHAT) == "kubernetes deploy failures"
    assert dense_query("Caroline Smith", CHAT) == "Caroline Smith"


# --- windows ----------------------------------------------------------------------------


def test_seed_windows_surround_the_seeds_and_merge_overlaps() -> None:
    seeds = [m("a", T0), m("c", T0 + timedelta(days=2)), m("b", T0 + timedelta(minutes=30))]
    hour = timedelta(hours=1)
    assert seed_windows(seeds, 3600) == [
        (T0 - hour, T0 + timedelta(minutes=30) + hour),
        (T0 + timedelta(days=2) - hour, T0 + timedelta(days=2) + hour),
    ]
    assert seed_windows([], 3600) == []


def test_window_filter_keeps_the_request_filter_and_narrows_its_time() -> None:
    window = (T0, T0 + timedelta(hours=2))
    flt = Filter(tags=("team:a",), start=T0 + timedelta(hours=1))
    narrowed = window_filter(flt, window)
    assert narrowed == Filter(tags=("team:a",), start=T0 + timedelta(hours=1), end=window[1])
    assert window_filter(Filter(end=T0 - timedelta(seconds=1)), window) is None


# --- neighbours ---------------------------------------------------------------------------


def test_neighbours_follow_timeline_order_and_join_within_distance() -> None:
    # One session: same timestamp, ids give the order of storing.
    line = [m(f"0{i}") for i in range(7)]
    cands = [c("02"), c("05")]
    out = with_neighbours(cands, [list(reversed(line))], distance=1)
    by = {x.memory.id: dict(x.neighbours) for x in out}
    # 01, 03 (next to 02) and 04, 06 (next to 05) join; 00 is two steps from any candidate.
    assert set(by) == {"02", "05", "01", "03", "04", "06"}
    assert by["02"] == {"01": 1, "03": 1}
    assert by["03"] == {"02": 1, "04": 1}
    assert by["05"] == {"04": 1, "06": 1}
    assert [x.memory.id for x in out[:2]] == ["02", "05"]  # the candidates keep their place
    assert all(not x.streams for x in out[2:])  # joined by position, not by any stream


def test_neighbour_distance_two_and_timestamp_before_id() -> None:
    late = T0 + timedelta(minutes=5)
    # "zz" sorts after "aa" by id but comes first in time.
    line = [m("aa", late), m("zz", T0), m("mm", late + timedelta(minutes=1))]
    out = with_neighbours([c("zz", T0)], [line], distance=2)
    by = {x.memory.id: dict(x.neighbours) for x in out}
    assert by["zz"] == {"aa": 1, "mm": 2}


def test_overlapping_windows_keep_the_nearest_distance() -> None:
    line = [m("01"), m("02"), m("03")]
    out = with_neighbours([c("01"), c("03")], [line, line[::2]], distance=2)
    by = {x.memory.id: dict(x.neighbours) for x in out}
    # In the second window 01 and 03 look adjacent (02 missing); the full one says 2 —
    # the nearest wins, as a truncated window can only make memories look closer.
    assert by["01"]["03"] == 1


def test_preceding_is_the_memory_stored_just_before_on_the_timeline() -> None:
    late = T0 + timedelta(minutes=5)
    # Timeline: 01, 02 (one time, so id order), then 00: the smallest id, the latest time.
    window = [m("00", late), m("02"), m("01")]
    wanted = [m("02"), m("01"), m("00", late), m("09")]
    before = preceding(wanted, [window, [m("09", late)]])
    assert {k: v.id for k, v in before.items()} == {"02": "01", "00": "02"}
    assert preceding(wanted, []) == {}


def test_a_thread_key_gives_each_thread_its_own_timeline() -> None:
    def tagged(id: str, seconds: int, *tags: str) -> Memory:
        return replace(m(id, T0 + timedelta(seconds=seconds)), tags=tags)

    # Two agents' chats side by side in one tenant, and a memory of neither.
    asked, other, answer = (
        tagged("01", 0, "conv:x"),
        tagged("02", 5, "conv:y"),
        tagged("03", 30, "conv:x"),
    )
    loose = tagged("04", 40)
    window = [asked, other, answer, loose]
    by_conv = GroupBy("conv", metadata=False)
    tenant = preceding([other, answer, loose], [window])
    assert {k: v.id for k, v in tenant.items()} == {"02": "01", "03": "02", "04": "03"}
    threads = preceding([other, answer, loose], [window], by_conv)
    assert {k: v.id for k, v in threads.items()} == {"03": "01"}
    [seed] = [Candidate(memory=asked)]
    assert [x.memory.id for x in with_neighbours([seed], [window], 1)] == ["01", "02"]
    near = with_neighbours([seed], [window], 1, by_conv)
    assert [x.memory.id for x in near] == ["01", "03"]
    assert near[0].neighbours == {"03": 1}


# --- through Recall ------------------------------------------------------------------------


Q = "0190f3a4-7b1c-7d2e-8f00-0000000000a1"  # the question turn
A = "0190f3a4-7b1c-7d2e-8f00-0000000000a2"  # the answer, right after it
OTHER = "0190f3a4-7b1c-7d2e-8f00-0000000000b1"  # another day, matches a little


def seed(h: Any) -> None:
    day2 = T0 + timedelta(days=3)
    h.world.put(
        h.memory(Q, "Melanie: what did you paint last weekend", timestamp=T0),
        h.memory(A, "A sunset over the lake", timestamp=T0),
        h.memory(OTHER, "Caroline: I might paint the fence", timestamp=day2),
    )


async def test_the_turn_after_a_matching_question_is_found(client: Any) -> None:
    h = client.harness
    seed(h)
    h.vector.whole_windows = True
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(query="what did Caroline paint", limit=3, profile="conversation"),
        metadata=client.auth(),
    )
    ids = [r.memory.id for r in reply.results]
    assert A in ids
    assert ids.index(A) < ids.index(OTHER)
    by = {r.memory.id: r for r in reply.results}
    assert by[A].components["context"] > 0
    assert not by[A].streams  # no stream found it; its neighbour did
    assert by[OTHER].components["context"] == 0
    windows = [arg[1] for op, arg in h.vector.calls if op == "search" and arg[1].start]
    assert (T0 - timedelta(hours=1), T0 + timedelta(hours=1)) in [(f.start, f.end) for f in windows]
    # Both seeds' windows (three days apart) were read in one call.
    assert [c for c in h.vector.calls if c[0] == "search_many"] == [("search_many", 2)]
    # The vector stream was asked without the name.
    assert any(op == "search" and arg[0] == "what did paint" for op, arg in h.vector.calls)


async def test_the_default_profile_reads_no_timeline_and_embeds_the_names(client: Any) -> None:
    h = client.harness
    seed(h)
    h.vector.whole_windows = True
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(query="what did Caroline paint", limit=3, profile="default"),
        metadata=client.auth(),
    )
    assert A not in [r.memory.id for r in reply.results]  # only its neighbour would find it
    assert [op for op, _ in h.vector.calls] == ["search"]
    assert [arg[0] for _, arg in h.vector.calls] == ["what did Caroline paint"]
    assert h.ranker.calls[-1]["profile"] == "default"
    assert all(r.components["context"] == 0 for r in reply.results)


def _search_many_windows(h: Any) -> list[list[tuple[datetime, datetime]]]:
    """The windows each SearchMany call read, call by call (the fake searches each filter)."""
    out: list[list[tuple[datetime, datetime]]] = []
    for op, arg in h.vector.calls:
        if op == "search_many":
            out.append([])
        elif op == "search" and arg[1].start is not None and out:
            out[-1].append((arg[1].start, arg[1].end))
    return out


async def test_a_full_window_is_read_again_narrower(new_harness: Any) -> None:
    h = new_harness(context={"limit": 8}, profile="conversation")
    seed(h)
    h.vector.whole_windows = True  # a window read gives the first `limit` stored in it
    # Twenty notes in the hour before the question, stored first: the hour's read is full of
    # them and holds neither the question nor its answer.
    for i in range(20):
        at = T0 - timedelta(minutes=50 - i)
        h.world.put(
            h.memory(f"0190f3a4-7b1c-7d2e-8f00-0000000000{i:02x}", f"note {i}", timestamp=at)
        )
    result = await h.recall("what did Caroline paint", limit=3)
    by = {s.memory.id: s for s in result.results}
    assert A in by
    assert by[A].components["context"] > 0
    near = timedelta(seconds=3600 / NARROWING)
    hour = timedelta(hours=1)
    day2 = T0 + timedelta(days=3)
    # Both seeds' hours in one call; only the full one again, sixteen times narrower.
    assert [sorted(c) for c in _search_many_windows(h)] == [
        [(T0 - hour, T0 + hour), (day2 - hour, day2 + hour)],
        [(T0 - near, T0 + near)],
    ]
    assert "context" not in result.degraded


async def test_memories_a_full_window_shows_side_by_side_are_not_made_neighbours(
    new_harness: Any,
) -> None:
    h = new_harness(context={"limit": 2}, profile="conversation")
    h.vector.whole_windows = True
    minute = timedelta(minutes=1)
    far = "0190f3a4-7b1c-7d2e-8f00-0000000000c1"  # two minutes after the question
    between = "0190f3a4-7b1c-7d2e-8f00-0000000000c2"  # stored later, a minute after it
    h.world.put(
        h.memory(Q, "Melanie: what did you paint last weekend", timestamp=T0),
        h.memory(far, "A sunset over the lake", timestamp=T0 + 2 * minute),
        h.memory(between, "Hold on, the doorbell", timestamp=T0 + minute),
    )
    # Every read of two is full, down to ±14 s, where the question is alone: never next to
    # the memory two minutes after it, whom the first read showed beside it.
    result = await h.recall("what did Caroline paint", limit=3)
    assert [s.memory.id for s in result.results] == [Q]
    assert [len(c) for c in _search_many_windows(h)] == [1] * (NARROWINGS + 1)
    assert "context" not in result.degraded


async def test_a_window_full_at_its_narrowest_is_left_out_and_the_span_says_so(
    new_harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(reads, "_tracer", provider.get_tracer("test"))
    h = new_harness(context={"limit": 2}, profile="conversation")
    h.vector.whole_windows = True
    seed(h)  # the question and its answer at one instant, and another day's memory
    h.world.put(h.memory("0190f3a4-7b1c-7d2e-8f00-0000000000a3", "Brb", timestamp=T0))
    result = await h.recall("what did Caroline paint", limit=3)
    assert A not in [s.memory.id for s in result.results]
    [step] = [s for s in exporter.get_finished_spans() if s.name == "engram.gateway/context"]
    assert step.attributes is not None
    assert step.attributes["engram.context.windows_left_out"] == 1


async def test_baseline_modes_read_no_neighbours(client: Any) -> None:
    h = client.harness
    seed(h)
    h.vector.whole_windows = True
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(query="paint", mode=gateway_pb2.RECALL_MODE_VECTOR),
        metadata=client.auth(),
    )
    assert A not in [r.memory.id for r in reply.results]
    assert not any(op == "search" and arg[1].start for op, arg in h.vector.calls)


async def test_a_failing_neighbour_read_degrades_only_that_step(client: Any) -> None:
    h = client.harness
    seed(h)
    plain = h.vector.search

    async def search(tenant: str, flt: Filter, limit: int, query: str = "", **kw: Any) -> Any:
        if flt.start is not None:
            raise RuntimeError("window read failed")
        return await plain(tenant, flt, limit, query, **kw)

    h.vector.search = search
    reply = await client.stub.Recall(
        gateway_pb2.RecallRequest(query="what did Caroline paint", profile="conversation"),
        metadata=client.auth(),
    )
    assert list(reply.degraded) == ["context"]
    assert {r.memory.id for r in reply.results} == {Q, OTHER}
