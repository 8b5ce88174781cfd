"""List through gRPC over fake stores: paging, cursors, filters, relations, tenancy."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2
from engram_core.errors import Unavailable
from engram_core.model import Relation


def uid(n: int) -> str:
    return f"0190f3a4-7b1c-7d2e-8f00-{n:012x}"


def seed(h: Any, n: int = 5) -> None:
    for i in range(n):
        h.world.put(
            h.memory(
                uid(i),
                f"note {i}",
                tags=["even"] if i % 2 == 0 else ["odd"],
                type="Decision" if i == 1 else "Memory",
                timestamp=datetime(2025, 1, 1 + i, tzinfo=UTC),
                archived=i == 4,
            )
        )


async def listing(client: Any, token: str = "rw-token", **kw: Any) -> list[Any]:
    call = client.stub.List(gateway_pb2.ListRequest(**kw), metadata=client.auth(token))
    return [page async for page in call]


def ids(pages: list[Any]) -> list[str]:
    return [m.id for p in pages for m in p.memories]


async def test_pages_and_a_cursor_resumes_after_any_page(client: Any) -> None:
    seed(client.harness)
    pages = await listing(client, page_size=2, include_archived=True)
    assert [len(p.memories) for p in pages] == [2, 2, 1]
    assert ids(pages) == [uid(i) for i in range(5)]
    assert pages[-1].cursor == ""
    assert all(p.cursor for p in pages[:-1])
    rest = await listing(client, page_size=2, include_archived=True, cursor=pages[0].cursor)
    assert ids(rest) == [uid(i) for i in range(2, 5)]


async def test_pages_in_the_order_of_the_last_write_ties_by_id(client: Any) -> None:
    """A StoreBatch writes many memories with one sequence: those tie, and are split
    across pages without losing or repeating one."""
    h = client.harness
    versions = {0: 9, 1: 4, 2: 9, 3: 2, 4: 4, 5: 9}
    h.world.put(*(h.memory(uid(i), f"note {i}", version=v) for i, v in versions.items()))
    for size in (1, 2, 4):
        pages = await listing(client, page_size=size)
        assert ids(pages) == [uid(i) for i in (3, 1, 4, 0, 2, 5)]


async def test_a_cursor_resumes_and_an_update_moves_the_memory_to_the_end(client: Any) -> None:
    h = client.harness
    h.world.put(*(h.memory(uid(i), f"note {i}", version=i + 1) for i in range(4)))
    first = (await listing(client, page_size=2))[0]
    assert [m.id for m in first.memories] == [uid(0), uid(1)]
    h.world.put(h.memory(uid(0), "edited", version=10))
    rest = await listing(client, page_size=2, cursor=first.cursor)
    assert ids(rest) == [uid(2), uid(3), uid(0)]
    assert [m.content for p in rest for m in p.memories][-1] == "edited"


async def test_every_field_of_a_memory_comes_back(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(uid(1), "full", tags=["a:b"], importance=0.7, metadata={"k": [1, "x"]}))
    [page] = await listing(client)
    [m] = page.memories
    assert (m.content, list(m.tags), m.importance) == ("full", ["a:b"], pytest.approx(0.7))
    assert m.metadata["k"] == [1, "x"]
    assert m.timestamp.ToDatetime().year == 2025


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, [0, 1, 2, 3]),  # archived hidden by default
        ({"include_archived": True}, [0, 1, 2, 3, 4]),
        ({"tags": ["even"]}, [0, 2]),
        ({"exclude_tags": ["even"]}, [1, 3]),
        ({"types": ["Decision"]}, [1]),
        ({"exclude_types": ["Decision"]}, [0, 2, 3]),
        ({"start": "2025-01-02", "end": "2025-01-03"}, [1, 2]),
    ],
)
async def test_filters_as_recall_reads_them(
    client: Any, kw: dict[str, Any], expected: list[int]
) -> None:
    seed(client.harness)
    assert ids(await listing(client, **kw)) == [uid(i) for i in expected]


async def test_pages_the_filters_empty_are_not_sent_but_the_last_always_is(client: Any) -> None:
    seed(client.harness)
    pages = await listing(client, page_size=1, types=["Nothing"])
    assert [(len(p.memories), p.cursor) for p in pages] == [(0, "")]
    pages = await listing(client, page_size=1, types=["Decision"])
    assert ids(pages) == [uid(1)]
    assert pages[-1].cursor == ""


async def test_relations_come_once_with_their_source_memory(client: Any) -> None:
    h = client.harness
    seed(h, 3)
    h.world.relations += [
        (h.tenant, Relation(uid(0), uid(2), "RELATES_TO", 0.4)),
        (h.tenant, Relation(uid(2), uid(1), "LEADS_TO", 0.9)),
        ("globex", Relation(uid(0), uid(1), "RELATES_TO", 0.5)),
    ]
    pages = await listing(client, page_size=2, include_relations=True)
    edges = [[(r.source_id, r.target_id, r.type) for r in p.relations] for p in pages]
    assert edges == [[(uid(0), uid(2), "RELATES_TO")], [(uid(2), uid(1), "LEADS_TO")]]
    assert all(not p.relations for p in await listing(client))  # only when asked


async def test_another_tenants_memories_are_never_listed(client: Any) -> None:
    h = client.harness
    seed(h, 2)
    h.world.put(h.memory(uid(9), "theirs", tenant="globex"))
    assert ids(await listing(client)) == [uid(0), uid(1)]
    assert ids(await listing(client, token="other")) == [uid(9)]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": uid(1)}, "cursor"),  # a bare id: the cursor of no listing
        ({"cursor": f"7:{uid(1).upper()}"}, "cursor"),
        ({"cursor": "7:note-1"}, "cursor"),
        ({"cursor": f"-7:{uid(1)}"}, "cursor"),
        ({"page_size": 1001}, "page_size"),
        ({"page_size": -1}, "page_size"),
        ({"start": "yesterday-ish"}, "start"),
        ({"tag_mode": 9}, "tag_mode"),
    ],
)
async def test_a_wrong_argument_is_named_before_any_store_call(
    client: Any, kw: dict[str, Any], field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await listing(client, **kw)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.field_of(err.value) == field
    assert not [c for c in client.harness.vector.calls if c[0] == "scan_by_sequence"]


async def test_a_store_failure_mid_listing_ends_the_stream_unavailable(client: Any) -> None:
    h = client.harness
    seed(h)
    scan = h.vector.scan_by_sequence

    async def first_page_only(tenant: str, cursor: str | None, *args: Any) -> Any:
        if cursor is not None:
            raise Unavailable("vector down")
        return await scan(tenant, cursor, *args)

    h.vector.scan_by_sequence = first_page_only
    call = client.stub.List(gateway_pb2.ListRequest(page_size=2), metadata=client.auth())
    assert len((await call.read()).memories) == 2
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_write_only_token_may_not_list(client: Any) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await listing(client, token="w-token")
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
