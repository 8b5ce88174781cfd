"""The sync and async clients against a scripted fake gateway: plain values in, the
idempotency keys, read-your-writes, retries and paging."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_client import AsyncEngram, Engram, Progress, RetryPolicy, Unavailable

FAST = RetryPolicy(attempts=4, initial_s=0.001, max_s=0.002)


def test_store_sends_plain_values_as_the_memory_with_a_key_and_the_token(fake: Any) -> None:
    with Engram(fake.address, "t0k", retry=FAST) as engram:
        stored = engram.store(
            "Postgres is primary",
            type="Decision",
            tags="db",
            importance=0.8,
            metadata={"by": "ana"},
            timestamp=datetime(2025, 1, 2, 3, 4, 5),
        )
        engram.store("second")
    assert stored.id == "m1"
    assert stored.sequence == 1
    (_, first, meta), (_, second, _) = fake.script.calls
    m = first.memory
    assert (m.content, m.type, list(m.tags), m.importance) == (
        "Postgres is primary",
        "Decision",
        ["db"],
        0.8,
    )
    assert dict(m.metadata) == {"by": "ana"}
    assert m.timestamp.ToDatetime(tzinfo=timezone.utc) == datetime(  # noqa: UP017
        2025,
        1,
        2,
        3,
        4,
        5,
        tzinfo=timezone.utc,  # noqa: UP017
    )
    assert meta["authorization"] == "Bearer t0k"
    assert first.idempotency_key
    assert first.idempotency_key != second.idempotency_key


def test_recall_waits_for_this_clients_writes_unless_told_not_to(fake: Any) -> None:
    with Engram(fake.address, retry=FAST) as engram:
        engram.recall("before any write")
        engram.store("a")
        engram.store("b")
        engram.recall("db", tags=["x"], tag_mode="all", mode="bm25", start=datetime(2025, 1, 1))
        engram.recall("db", consistent=False)
    before, after, opted_out = fake.script.of("Recall")
    assert before.min_sequence == 0
    assert after.min_sequence == 2
    assert opted_out.min_sequence == 0
    assert after.tag_mode == common_pb2.TAG_MODE_ALL
    assert after.mode == gateway_pb2.RECALL_MODE_BM25
    assert after.start.startswith("2025-01-01T00:00:00")


def test_get_and_related_wait_for_this_clients_writes_unless_told_not_to(fake: Any) -> None:
    with Engram(fake.address, retry=FAST) as engram:
        engram.get("m0")
        engram.store("a")
        engram.associate("m1", "m0")
        engram.get("m1")
        engram.get("m1", consistent=False)
        engram.related("m1", depth=2)
        engram.related("m1", consistent=False)
    assert [r.min_sequence for r in fake.script.of("Get")] == [0, 2, 0]
    assert [r.min_sequence for r in fake.script.of("Related")] == [2, 0]
    assert fake.script.of("Related")[0].depth == 2


async def test_the_async_get_and_related_wait_for_its_writes(fake: Any) -> None:
    async with AsyncEngram(fake.address, retry=FAST) as engram:
        await engram.store("a")
        await engram.get("m1")
        await engram.related("m1", limit=3)
        await engram.related("m1", consistent=False)
    assert [r.min_sequence for r in fake.script.of("Get")] == [1]
    assert [r.min_sequence for r in fake.script.of("Related")] == [1, 0]


def test_a_store_is_retried_on_unavailable_under_the_same_key(fake: Any) -> None:
    fake.fail("Store", grpc.StatusCode.UNAVAILABLE, "log down", times=2)
    with Engram(fake.address, retry=FAST) as engram:
        stored = engram.store("kept once")
    sent = fake.script.of("Store")
    assert len(sent) == 3
    assert len({r.idempotency_key for r in sent}) == 1
    assert stored.id == "m1"


def test_retries_stop_after_the_policys_attempts(fake: Any) -> None:
    fake.fail("Get", grpc.StatusCode.UNAVAILABLE, "down", times=9)
    with Engram(fake.address, retry=FAST) as engram, pytest.raises(Unavailable) as caught:
        engram.get("x")
    assert len(fake.script.of("Get")) == FAST.attempts
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    assert caught.value.message == "down"


def test_a_delete_is_not_repeated_after_an_ambiguous_failure(fake: Any) -> None:
    fake.fail("Delete", grpc.StatusCode.UNAVAILABLE)
    with Engram(fake.address, retry=FAST) as engram, pytest.raises(Unavailable):
        engram.delete("x")
    assert len(fake.script.of("Delete")) == 1


def test_a_rate_limited_write_is_retried_after_the_servers_hint(fake: Any) -> None:
    fake.fail("Delete", grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down", (("retry-after-ms", "1"),))
    with Engram(fake.address, retry=FAST) as engram:
        engram.delete("x")
    assert len(fake.script.of("Delete")) == 2


def test_update_sends_only_the_given_fields_in_its_mask(fake: Any) -> None:
    with Engram(fake.address, retry=FAST) as engram:
        engram.update("m1", importance=0.2, tags=["a"])
    (req,) = fake.script.of("Update")
    assert sorted(req.update_mask.paths) == ["importance", "tags"]
    assert req.memory.importance == 0.2


def test_store_many_cuts_batches_reports_progress_and_resends_only_failed_items(
    fake: Any,
) -> None:
    # First call: item 1 unacknowledged (retryable), item 2 refused for good.
    fake.script.item_codes = [["", "UNAVAILABLE", "INVALID_ARGUMENT"]]
    seen: list[Progress] = []
    items = [f"memory {i}" for i in range(5)] + [{"content": "keyed", "idempotency_key": "row-9"}]
    with Engram(fake.address, retry=FAST) as engram:
        out = engram.store_many(items, batch_size=3, progress=seen.append)
    calls = fake.script.of("StoreBatch")
    assert [len(c.memories) for c in calls] == [3, 1, 3]
    assert calls[1].idempotency_keys[0] == calls[0].idempotency_keys[1]
    assert calls[2].idempotency_keys[2] == "row-9"
    assert [p.done for p in seen] == [3, 6]
    assert (seen[-1].stored, seen[-1].failed) == (5, 1)
    assert [r.code for r in out.failed] == ["INVALID_ARGUMENT"]
    assert out.results[1].ok
    assert engram.last_sequence == out.sequence


def test_a_memory_s_own_vector_goes_with_store_and_store_many(fake: Any) -> None:
    with Engram(fake.address, retry=FAST) as engram:
        engram.store("tea", embedding=[0.6, 0.0, 0.8])
        engram.store_many([{"content": "coffee", "embedding": (0.0, 1.0, 0.0)}, "no vector"])
    (store,) = fake.script.of("Store")
    assert list(store.memory.embedding) == pytest.approx([0.6, 0.0, 0.8])
    (batch,) = fake.script.of("StoreBatch")
    assert [list(m.embedding) for m in batch.memories] == [[0.0, 1.0, 0.0], []]


def test_dead_letters_page_until_the_last(fake: Any) -> None:
    fake.script.letters = [3, 5, 8, 13, 21]
    with Engram(fake.address, retry=FAST) as engram:
        letters = [d.sequence for d in engram.dead_letters(page_size=2)]
    assert letters == [3, 5, 8, 13, 21]
    assert [r.after for r in fake.script.of("ListDeadLetters")] == [0, 5, 13]


def test_dead_letters_start_after_a_sequence(fake: Any) -> None:
    fake.script.letters = [3, 5, 8, 13]
    with Engram(fake.address, retry=FAST) as engram:
        assert [d.sequence for d in engram.dead_letters(after=5)] == [8, 13]


async def test_the_async_client_retries_and_reads_its_writes(fake: Any) -> None:
    fake.fail("Store", grpc.StatusCode.UNAVAILABLE, times=2)
    fake.script.letters = [1, 2, 3]
    async with AsyncEngram(fake.address, retry=FAST) as engram:
        stored = await engram.store("async")
        await engram.recall("async")
        out = await engram.store_many(["a", "b", "c"], batch_size=2)
        letters = [d.sequence async for d in engram.dead_letters(page_size=2)]
    assert stored.sequence == 1
    assert len({r.idempotency_key for r in fake.script.of("Store")}) == 1
    assert fake.script.of("Recall")[0].min_sequence == 1
    assert out.stored == 3
    assert letters == [1, 2, 3]


def test_times_are_taken_as_rfc3339_strings_or_as_messages(fake: Any) -> None:
    # An export writes "...Z", which Python 3.10's fromisoformat does not read.
    at = Timestamp(seconds=1_700_000_000)
    with Engram(fake.address, retry=FAST) as engram:
        engram.store("a", timestamp="2023-11-14T22:13:20Z", t_valid=at)
    (sent,) = fake.script.of("Store")
    assert sent.memory.timestamp == at
    assert sent.memory.t_valid == at
