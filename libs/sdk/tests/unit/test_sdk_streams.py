"""List and Subscribe as iterators against the scripted fake: paging by cursor, filters
as plain values, and a broken stream reopened where it stopped (never from the start)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram_client import AsyncEngram, Engram, InvalidArgument, RetryPolicy, Unavailable

FAST = RetryPolicy(attempts=3, initial_s=0.001, max_s=0.002)
IDS = [f"m{i}" for i in range(7)]


def test_list_pages_through_every_memory_by_cursor_with_the_filters(fake: Any) -> None:
    fake.script.held = IDS
    with Engram(fake.address, retry=FAST) as engram:
        listed = [m.id for m in engram.list(tags="db", tag_mode="all", page_size=3)]
    assert listed == IDS
    (request,) = fake.script.of("List")
    assert (list(request.tags), request.tag_mode, request.page_size) == (
        ["db"],
        common_pb2.TAG_MODE_ALL,
        3,
    )


def test_a_broken_listing_resumes_after_the_last_cursor(fake: Any) -> None:
    fake.script.held = IDS
    fake.script.breaks["List"] = [2, 0]  # two pages then a break; then a break at once
    with Engram(fake.address, retry=FAST) as engram:
        pages = list(engram.list_pages(page_size=2, include_relations=True))
    assert [m.id for p in pages for m in p.memories] == IDS  # nothing twice, nothing lost
    assert [r.cursor for r in fake.script.of("List")] == ["", "m3", "m3"]
    assert pages[0].relations[0].type == "LEADS_TO"
    assert pages[0].relations[0].source_id == "m0"
    assert pages[-1].cursor == ""


def test_a_listing_that_keeps_breaking_before_any_page_gives_up(fake: Any) -> None:
    fake.script.held = IDS
    fake.script.breaks["List"] = [0] * 9
    with Engram(fake.address, retry=FAST) as engram, pytest.raises(Unavailable):
        list(engram.list())
    assert len(fake.script.of("List")) == FAST.attempts


def test_a_listing_starts_at_a_given_cursor(fake: Any) -> None:
    fake.script.held = IDS
    with Engram(fake.address, retry=FAST) as engram:
        assert [m.id for m in engram.list(cursor="m4")] == ["m5", "m6"]


def test_subscribe_sends_the_filters_and_resumes_after_the_last_event(fake: Any) -> None:
    fake.script.events = [4, 9, 12, 20]
    fake.script.breaks["Subscribe"] = [2]
    with Engram(fake.address, retry=FAST) as engram:
        events = list(engram.subscribe(tags=["db"], types=["Decision"]))
    assert [(e.sequence, e.kind, e.memory_id) for e in events] == [
        (4, "stored", "m4"),
        (9, "stored", "m9"),
        (12, "stored", "m12"),
        (20, "stored", "m20"),
    ]
    assert events[0].memory is not None
    assert events[0].relation is None
    first, again = fake.script.of("Subscribe")
    assert not first.HasField("after_sequence")  # only what comes after the call
    assert (list(first.tags), list(first.types)) == (["db"], ["Decision"])
    assert again.after_sequence == 9
    assert list(again.tags) == ["db"]


def test_subscribe_from_a_sequence_replays_what_came_after(fake: Any) -> None:
    fake.script.events = [4, 9, 12]
    with Engram(fake.address, retry=FAST) as engram:
        stream = engram.subscribe(after_sequence=4)
        first = next(stream)
        stream.close()  # stopping the iteration ends the call
    assert first.sequence == 9
    assert fake.script.of("Subscribe")[0].after_sequence == 4


def test_a_subscription_refused_for_good_raises_with_the_code(fake: Any) -> None:
    fake.fail("Subscribe", grpc.StatusCode.INVALID_ARGUMENT, "tags: too many", times=1)
    with Engram(fake.address, retry=FAST) as engram, pytest.raises(InvalidArgument) as caught:
        list(engram.subscribe(tags=["x"] * 3))
    assert caught.value.message == "tags: too many"
    assert len(fake.script.of("Subscribe")) == 1


async def test_the_async_client_lists_and_subscribes_resuming_the_same_way(fake: Any) -> None:
    fake.script.held = IDS
    fake.script.events = [3, 5, 8]
    fake.script.breaks["List"] = [1]
    fake.script.breaks["Subscribe"] = [1]
    async with AsyncEngram(fake.address, retry=FAST) as engram:
        listed = [m.id async for m in engram.list(page_size=3)]
        events = [e.sequence async for e in engram.subscribe(after_sequence=0)]
    assert listed == IDS
    assert events == [3, 5, 8]
    assert [r.cursor for r in fake.script.of("List")] == ["", "m2"]
    assert [r.after_sequence for r in fake.script.of("Subscribe")] == [0, 3]


def test_delete_tenant_dry_run_counts_and_the_real_one_confirms_by_name(fake: Any) -> None:
    with Engram(fake.address, retry=FAST) as engram:
        dry = engram.delete_tenant("acme", dry_run=True)
        gone = engram.delete_tenant("acme", confirm="acme")
        status = engram.delete_tenant_status("acme", gone.sequence)
    assert (dry.dry_run, dry.sequence, dry.counts) == (True, 0, {"vector": 3})
    assert gone.sequence > 0
    assert (status.applied, status.sequence, status.counts) == (True, gone.sequence, {"vector": 0})
    first, second = fake.script.of("DeleteTenant")
    assert (first.tenant, first.confirm, first.dry_run) == ("acme", "", True)
    assert (second.confirm, second.dry_run) == ("acme", False)


def test_a_deletion_is_not_repeated_after_an_ambiguous_failure(fake: Any) -> None:
    fake.fail("DeleteTenant", grpc.StatusCode.UNAVAILABLE)
    with Engram(fake.address, retry=FAST) as engram, pytest.raises(Unavailable):
        engram.delete_tenant("acme", confirm="acme")
    assert len(fake.script.of("DeleteTenant")) == 1


def test_rebuild_names_the_store_and_status_the_tenant(fake: Any) -> None:
    with Engram(fake.address, retry=FAST) as engram:
        run = engram.rebuild("vector", embedding_model="e5-small")
        status = engram.rebuild_status("acme")
    assert run.run_id == "rb1"
    assert status.tenant == "acme"
    (request,) = fake.script.of("Rebuild")
    assert (request.store, request.embedding_model) == (1, "e5-small")
