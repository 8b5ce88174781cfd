"""The lexical RPCs in-process on port 0, through the platform server, on a tantivy index."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.lexical.v1 import lexical_pb2, lexical_pb2_grpc
from engram_core.model import AccessUpdate, Filter, TagMatch
from engram_lexical import server
from engram_lexical.bootstrap import build_service
from engram_lexical.config import Settings
from engram_platform.convert import (
    access_update_to_proto,
    filter_to_proto,
    memory_from_proto,
    memory_to_proto,
    ts_to_proto,
)
from engram_platform.errors import FIELD_KEY
from engram_testing.contracts.lexical import full_memory, mem
from engram_testing.in_process import serving

T = "tenant-a"
if TYPE_CHECKING:
    Stub = lexical_pb2_grpc.LexicalServiceAsyncStub


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[Stub]:
    settings = Settings(port=0, data_dir=tmp_path, max_batch=3, max_limit=50, writer_heap_mb=20)
    async with serving(server.start, settings, build_service(settings)) as channel:
        yield lexical_pb2_grpc.LexicalServiceStub(channel)
    assert (tmp_path / "lexical").is_dir()


def memories() -> list[common_pb2.Memory]:
    return [
        memory_to_proto(full_memory()),
        memory_to_proto(mem("b", "The deploy pipeline runs on Fridays", tags=("project:engram",))),
        memory_to_proto(mem("c", "Lunch options near the office")),
    ]


async def test_upsert_search_get_delete(stub: Stub) -> None:
    reply = await stub.Upsert(lexical_pb2.UpsertRequest(tenant=T, memories=memories()))
    assert (reply.applied, reply.skipped) == (3, 0)
    again = await stub.Upsert(lexical_pb2.UpsertRequest(tenant=T, memories=memories()[1:]))
    assert (again.applied, again.skipped) == (0, 2)
    assert (await stub.Count(lexical_pb2.CountRequest(tenant=T))).count == 3

    flt = filter_to_proto(Filter(tags=("project",), tag_match=TagMatch.PREFIX))
    found = await stub.Search(
        lexical_pb2.SearchRequest(tenant=T, query="deploying pipelines", filter=flt, limit=5)
    )
    assert [h.id for h in found.hits] == ["b"]
    assert found.hits[0].score > 0
    assert memory_from_proto(found.hits[0].memory) == memory_from_proto(memories()[1])

    m = full_memory()
    got = await stub.Get(lexical_pb2.GetRequest(tenant=T, ids=[m.id, "missing"]))
    assert [memory_from_proto(p) for p in got.memories] == [m]

    seen = datetime(2025, 1, 2, tzinfo=UTC)
    update = access_update_to_proto(AccessUpdate(id="b", last_accessed=seen, access_count=4))
    reply_u = await stub.UpdateAccess(lexical_pb2.UpdateAccessRequest(tenant=T, updates=[update]))
    assert reply_u.updated == 1
    [b] = (await stub.Get(lexical_pb2.GetRequest(tenant=T, ids=["b"]))).memories
    assert (b.access_count, b.last_accessed.ToDatetime(tzinfo=UTC)) == (4, seen)

    deleted = await stub.Delete(lexical_pb2.DeleteRequest(tenant=T, ids=["b", "c"], version=10))
    assert deleted.deleted == 2
    assert not (await stub.Get(lexical_pb2.GetRequest(tenant=T, ids=["b", "c"]))).memories
    gone = await stub.Search(lexical_pb2.SearchRequest(tenant=T, query="deploy lunch"))
    assert list(gone.hits) == []
    assert (await stub.Count(lexical_pb2.CountRequest(tenant=T))).count == 1
    assert (await stub.Count(lexical_pb2.CountRequest(tenant="tenant-b"))).count == 0


async def test_search_limit_zero_takes_the_default(stub: Stub) -> None:
    await stub.Upsert(lexical_pb2.UpsertRequest(tenant=T, memories=memories()))
    reply = await stub.Search(lexical_pb2.SearchRequest(tenant=T, query="the on friday"))
    assert 1 <= len(reply.hits) <= 10


def _memory(**changes: Any) -> common_pb2.Memory:
    p = memory_to_proto(mem("x", "valid content"))
    for name, value in changes.items():
        if name == "clear":
            p.ClearField(value)
        elif name == "tags":
            del p.tags[:]
            p.tags.extend(value)
        else:
            setattr(p, name, value)
    return p


def _bad_ts() -> Any:
    ts = ts_to_proto(datetime(2024, 1, 1, tzinfo=UTC))
    ts.seconds = 10**12
    return ts


def _relevance(*updates: tuple[str, float]) -> lexical_pb2.UpdateRelevanceRequest:
    return lexical_pb2.UpdateRelevanceRequest(
        tenant=T,
        updates=[lexical_pb2.RelevanceUpdate(id=i, relevance_score=r) for i, r in updates],
    )


@pytest.mark.parametrize(
    ("rpc", "request_", "field"),
    [
        ("Upsert", lexical_pb2.UpsertRequest(tenant="", memories=[_memory()]), "tenant"),
        ("Upsert", lexical_pb2.UpsertRequest(tenant="a b", memories=[_memory()]), "tenant"),
        ("Upsert", lexical_pb2.UpsertRequest(tenant=T, memories=[_memory()] * 4), "memories"),
        (
            "Upsert",
            lexical_pb2.UpsertRequest(tenant=T, memories=[_memory(id="")]),
            "memories[0].id",
        ),
        (
            "Upsert",
            lexical_pb2.UpsertRequest(tenant=T, memories=[_memory(), _memory(content=" ")]),
            "memories[1].content",
        ),
        (
            "Upsert",
            lexical_pb2.UpsertRequest(tenant=T, memories=[_memory(tenant="tenant-b")]),
            "memories[0].tenant",
        ),
        (
            "Upsert",
            lexical_pb2.UpsertRequest(tenant=T, memories=[_memory(importance=1.5)]),
            "memories[0].importance",
        ),
        (
            "Upsert",
            lexical_pb2.UpsertRequest(tenant=T, memories=[_memory(confidence=float("nan"))]),
            "memories[0].confidence",
        ),
        (
            "Upsert",
            lexical_pb2.UpsertRequest(tenant=T, memories=[_memory(tags=["ok", "has space"])]),
            "memories[0].tags[1]",
        ),
        (
            "Upsert",
            lexical_pb2.UpsertRequest(tenant=T, memories=[_memory(clear="timestamp")]),
            "memories[0].timestamp",
        ),
        (
            "Upsert",
            lexical_pb2.UpsertRequest(tenant=T, memories=[_memory(version=-1)]),
            "memories[0].version",
        ),
        ("Delete", lexical_pb2.DeleteRequest(tenant=T, ids=[], version=1), "ids"),
        ("Delete", lexical_pb2.DeleteRequest(tenant=T, ids=["a", ""], version=1), "ids[1]"),
        ("Delete", lexical_pb2.DeleteRequest(tenant=T, ids=["a"], version=-2), "version"),
        ("Search", lexical_pb2.SearchRequest(tenant=T, query="x", limit=51), "limit"),
        ("Search", lexical_pb2.SearchRequest(tenant=T, query="x", limit=-1), "limit"),
        ("Search", lexical_pb2.SearchRequest(tenant=T, query="x" * 5000), "query"),
        (
            "Search",
            lexical_pb2.SearchRequest(
                tenant=T, query="x", filter=common_pb2.Filter(tags=["a", "b c"])
            ),
            "filter.tags[1]",
        ),
        (
            "Search",
            lexical_pb2.SearchRequest(
                tenant=T, query="x", filter=common_pb2.Filter(exclude_tags=[""])
            ),
            "filter.exclude_tags[0]",
        ),
        (
            "Search",
            lexical_pb2.SearchRequest(tenant=T, query="x", filter=common_pb2.Filter(tag_mode=7)),
            "filter.tag_mode",
        ),
        (
            "Search",
            lexical_pb2.SearchRequest(
                tenant=T,
                query="x",
                filter=common_pb2.Filter(
                    start=ts_to_proto(datetime(2024, 2, 1, tzinfo=UTC)),
                    end=ts_to_proto(datetime(2024, 1, 1, tzinfo=UTC)),
                ),
            ),
            "filter.end",
        ),
        (
            "Search",
            lexical_pb2.SearchRequest(
                tenant=T, query="x", filter=common_pb2.Filter(start=_bad_ts())
            ),
            "filter.start",
        ),
        ("Top", lexical_pb2.TopRequest(tenant="", limit=5), "tenant"),
        ("Top", lexical_pb2.TopRequest(tenant=T, limit=0), "limit"),
        ("Top", lexical_pb2.TopRequest(tenant=T, limit=51), "limit"),
        ("Top", lexical_pb2.TopRequest(tenant=T, limit=5, sort=9), "sort"),  # type: ignore[arg-type]
        (
            "Top",
            lexical_pb2.TopRequest(tenant=T, limit=5, filter=common_pb2.Filter(tags=["a b"])),
            "filter.tags[0]",
        ),
        ("Get", lexical_pb2.GetRequest(tenant=T, ids=["a", "b", "c", "d"]), "ids"),
        (
            "UpdateAccess",
            lexical_pb2.UpdateAccessRequest(tenant=T, updates=[common_pb2.AccessUpdate(id="a")]),
            "updates[0].last_accessed",
        ),
        ("Count", lexical_pb2.CountRequest(tenant=""), "tenant"),
        ("Scan", lexical_pb2.ScanRequest(tenant="", limit=5), "tenant"),
        ("Scan", lexical_pb2.ScanRequest(tenant=T, limit=0), "limit"),
        ("Scan", lexical_pb2.ScanRequest(tenant=T, limit=51), "limit"),
        ("Scan", lexical_pb2.ScanRequest(tenant=T, limit=5, cursor="c" * 257), "cursor"),
        ("UpdateRelevance", _relevance(("a", 0.5), ("", 0.5)), "updates[1].id"),
        ("UpdateRelevance", _relevance(("a", 1.5)), "updates[0].relevance_score"),
        ("UpdateRelevance", _relevance(("a", -0.1)), "updates[0].relevance_score"),
        ("UpdateRelevance", _relevance(("a", float("nan"))), "updates[0].relevance_score"),
        ("UpdateRelevance", _relevance(*[("a", 0.5)] * 4), "updates"),
    ],
)
async def test_invalid_argument_names_the_field(
    stub: Stub, rpc: str, request_: Any, field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await getattr(stub, rpc)(request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (FIELD_KEY, field) in tuple(err.value.trailing_metadata() or ())


async def test_bad_input_touches_nothing(stub: Stub) -> None:
    bad = [_memory(id="ok"), _memory(id="bad", importance=-0.1)]
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Upsert(lexical_pb2.UpsertRequest(tenant=T, memories=bad))
    assert (await stub.Count(lexical_pb2.CountRequest(tenant=T))).count == 0


async def test_scan_and_update_relevance(stub: Stub) -> None:
    await stub.Upsert(lexical_pb2.UpsertRequest(tenant=T, memories=memories()))
    reply = await stub.UpdateRelevance(_relevance(("b", 0.75), ("ghost", 0.5)))
    assert reply.updated == 1
    first = await stub.Scan(lexical_pb2.ScanRequest(tenant=T, limit=2))
    assert len(first.memories) == 2
    assert first.next_cursor != ""
    rest = await stub.Scan(lexical_pb2.ScanRequest(tenant=T, limit=2, cursor=first.next_cursor))
    assert rest.next_cursor == ""
    scanned = {m.id: memory_from_proto(m) for m in [*first.memories, *rest.memories]}
    assert sorted(scanned) == sorted([full_memory().id, "b", "c"])
    assert scanned["b"].relevance_score == 0.75
    assert scanned[full_memory().id] == full_memory()
    empty = await stub.Scan(lexical_pb2.ScanRequest(tenant="tenant-b", limit=5))
    assert (list(empty.memories), empty.next_cursor) == ([], "")


async def test_top_unset_sort_is_importance(stub: Stub) -> None:
    listed = [replace(mem("old", minutes=1), importance=0.9), mem("new", minutes=2)]
    await stub.Upsert(
        lexical_pb2.UpsertRequest(tenant=T, memories=[memory_to_proto(m) for m in listed])
    )
    unset = await stub.Top(lexical_pb2.TopRequest(tenant=T, limit=3))
    named = await stub.Top(
        lexical_pb2.TopRequest(tenant=T, limit=3, sort=lexical_pb2.SORT_IMPORTANCE)
    )
    assert [m.id for m in unset.memories] == [m.id for m in named.memories] == ["old", "new"]
    by_recency = await stub.Top(
        lexical_pb2.TopRequest(tenant=T, limit=3, sort=lexical_pb2.SORT_RECENCY)
    )
    assert [m.id for m in by_recency.memories] == ["new", "old"]
