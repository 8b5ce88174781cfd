"""The VectorService RPCs in-process on port 0, through the platform server and interceptors."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.vector.v1 import vector_pb2, vector_pb2_grpc
from engram_core.limits import MAX_TAG_LENGTH, MAX_TAGS
from engram_core.model import AccessUpdate, Memory
from engram_embed.hashing import HashingEmbedder
from engram_platform.convert import access_update_to_proto, memory_from_proto, ts_to_proto
from engram_platform.errors import FIELD_KEY
from engram_platform.grpc_client import open_channel
from engram_testing.fakes.generations import fake_vector_generations
from engram_vector import server
from engram_vector.bootstrap import build_service
from engram_vector.config import Settings
from engram_vector.mapping import point_to_proto

DIM = 384
T = "tenant-a"
EMBEDDER = HashingEmbedder(DIM)
DOCS = {
    str(uuid.UUID(int=1)): "the deploy pipeline runs on fridays",
    str(uuid.UUID(int=2)): "lunch is at noon in the big room",
    str(uuid.UUID(int=3)): "sarah prefers rust for services",
}


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[vector_pb2_grpc.VectorServiceAsyncStub]:
    settings = Settings(port=0, data_dir=tmp_path)
    generations = fake_vector_generations({EMBEDDER.model_name: DIM}, EMBEDDER.model_name)
    service = await build_service(settings, generations=generations, embedder=EMBEDDER)
    running = await server.start(settings, service)
    channel = open_channel(f"127.0.0.1:{running.port}")
    try:
        yield vector_pb2_grpc.VectorServiceStub(channel)
    finally:
        await channel.close()
        await running.stop(None)
        await service.close()


def point(memory_id: str, content: str, version: int = 1) -> vector_pb2.Point:
    ts = datetime(2024, 5, 1, tzinfo=UTC)
    m = Memory(
        id=memory_id, tenant=T, content=content, version=version, timestamp=ts, updated_at=ts
    )
    return point_to_proto(m, EMBEDDER.embed_one(content))


async def test_upsert_search_get_delete(stub: vector_pb2_grpc.VectorServiceAsyncStub) -> None:
    points = [point(i, text) for i, text in DOCS.items()]
    reply = await stub.Upsert(vector_pb2.UpsertRequest(tenant=T, points=points))
    assert (reply.applied, reply.skipped) == (3, 0)
    again = await stub.Upsert(vector_pb2.UpsertRequest(tenant=T, points=points[:1]))
    assert (again.applied, again.skipped) == (0, 1)

    found = await stub.Search(
        vector_pb2.SearchRequest(tenant=T, query="when does the deploy pipeline run", limit=2)
    )
    deploy = str(uuid.UUID(int=1))
    assert found.hits[0].id == deploy
    assert found.hits[0].memory.content == DOCS[deploy]
    assert found.hits[0].score > found.hits[1].score

    by_vector = await stub.Search(
        vector_pb2.SearchRequest(
            tenant=T, vector=EMBEDDER.embed_one(DOCS[deploy]), limit=1, filter=common_pb2.Filter()
        )
    )
    assert [h.id for h in by_vector.hits] == [deploy]
    assert by_vector.hits[0].score == pytest.approx(1.0, abs=1e-6)

    # Ids in any UUID spelling reach the same memory.
    got = await stub.Get(vector_pb2.GetRequest(tenant=T, ids=[deploy.upper(), "{" + deploy + "}"]))
    assert [memory_from_proto(m).content for m in got.memories] == [DOCS[deploy]]
    assert (await stub.Get(vector_pb2.GetRequest(tenant="tenant-b", ids=[deploy]))).memories == []

    seen = datetime(2024, 6, 1, tzinfo=UTC)
    update = access_update_to_proto(AccessUpdate(deploy, seen, 4))
    reply_access = await stub.UpdateAccess(
        vector_pb2.UpdateAccessRequest(tenant=T, updates=[update])
    )
    assert reply_access.updated == 1

    deleted = await stub.Delete(vector_pb2.DeleteRequest(tenant=T, ids=[deploy], version=2))
    assert deleted.deleted == 1
    assert (await stub.Get(vector_pb2.GetRequest(tenant=T, ids=[deploy]))).memories == []
    assert (await stub.Count(vector_pb2.CountRequest(tenant=T))).count == 2
    after = await stub.Search(vector_pb2.SearchRequest(tenant=T, query="deploy pipeline", limit=5))
    assert deploy not in [h.id for h in after.hits]


async def test_search_many_answers_each_filter_as_search_does(
    stub: vector_pb2_grpc.VectorServiceAsyncStub,
) -> None:
    points = [point(i, text) for i, text in DOCS.items()]
    await stub.Upsert(vector_pb2.UpsertRequest(tenant=T, points=points))
    day = datetime(2024, 5, 1, tzinfo=UTC)
    filters = [
        common_pb2.Filter(),
        common_pb2.Filter(end=ts_to_proto(datetime(2024, 4, 1, tzinfo=UTC))),  # before all
        common_pb2.Filter(start=ts_to_proto(day), end=ts_to_proto(day)),
    ]
    query = "when does the deploy pipeline run"
    many = await stub.SearchMany(
        vector_pb2.SearchManyRequest(tenant=T, query=query, filters=filters, limit=2)
    )
    assert len(many.results) == 3
    for flt, got in zip(filters, many.results, strict=True):
        one = await stub.Search(
            vector_pb2.SearchRequest(tenant=T, query=query, filter=flt, limit=2)
        )
        assert [(h.id, h.score) for h in got.hits] == [(h.id, h.score) for h in one.hits]
    assert many.results[0].hits[0].id == str(uuid.UUID(int=1))
    assert many.results[0].hits[0].memory.content == DOCS[str(uuid.UUID(int=1))]
    assert list(many.results[1].hits) == []
    by_vector = await stub.SearchMany(
        vector_pb2.SearchManyRequest(
            tenant=T, vector=EMBEDDER.embed_one(DOCS[GOOD_ID]), filters=filters[:1], limit=1
        )
    )
    assert [h.id for h in by_vector.results[0].hits] == [GOOD_ID]


async def _invalid(call: Awaitable[object]) -> tuple[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = [v for k, v in err.value.trailing_metadata() or () if k == FIELD_KEY]
    return str(fields[0]), err.value.details() or ""


GOOD_ID = str(uuid.UUID(int=1))


_NAN_FIELD = "points[1].memory.metadata.score"  # NaN there: JSON has no word for it


def _nan_point() -> vector_pb2.Point:
    p = point(str(uuid.UUID(int=9)), "a")
    p.memory.metadata.fields["score"].number_value = float("nan")
    return p


def _relevance(*updates: tuple[str, float]) -> vector_pb2.UpdateRelevanceRequest:
    return vector_pb2.UpdateRelevanceRequest(
        tenant=T,
        updates=[vector_pb2.RelevanceUpdate(id=i, relevance_score=r) for i, r in updates],
    )


def _tagged(count: int, tag: str) -> vector_pb2.Point:
    """A point whose memory carries ``count`` tags (``tag`` then numbered ones)."""
    p = point(GOOD_ID, "a")
    p.memory.tags.extend([tag, *(f"{tag}{i}" for i in range(1, count))])
    return p


@pytest.mark.parametrize(
    ("rpc", "request_", "field"),
    [
        ("Count", vector_pb2.CountRequest(tenant=" "), "tenant"),
        ("Search", vector_pb2.SearchRequest(tenant=T, query="x", limit=0), "limit"),
        ("Search", vector_pb2.SearchRequest(tenant=T, query="x", limit=1001), "limit"),
        ("Search", vector_pb2.SearchRequest(tenant=T, limit=5), "query"),
        ("Search", vector_pb2.SearchRequest(tenant=T, vector=[1.0, 2.0], limit=5), "vector"),
        (
            "Search",
            vector_pb2.SearchRequest(
                tenant=T,
                query="x",
                limit=5,
                filter=common_pb2.Filter(
                    start=ts_to_proto(datetime(2024, 2, 1, tzinfo=UTC)),
                    end=ts_to_proto(datetime(2024, 1, 1, tzinfo=UTC)),
                ),
            ),
            "filter.start",
        ),
        ("SearchMany", vector_pb2.SearchManyRequest(tenant=T, query="x", limit=5), "filters"),
        (
            "SearchMany",
            vector_pb2.SearchManyRequest(
                tenant=T, query="x", limit=1, filters=[common_pb2.Filter()] * 33
            ),
            "filters",
        ),
        (
            "SearchMany",
            vector_pb2.SearchManyRequest(
                tenant=T, query="x", limit=1000, filters=[common_pb2.Filter()] * 5
            ),
            "limit",
        ),
        (
            "SearchMany",
            vector_pb2.SearchManyRequest(tenant=T, limit=5, filters=[common_pb2.Filter()]),
            "query",
        ),
        (
            "SearchMany",
            vector_pb2.SearchManyRequest(
                tenant=T, vector=[1.0], limit=5, filters=[common_pb2.Filter()]
            ),
            "vector",
        ),
        (
            "SearchMany",
            vector_pb2.SearchManyRequest(
                tenant=T,
                query="x",
                limit=5,
                filters=[
                    common_pb2.Filter(),
                    common_pb2.Filter(
                        start=ts_to_proto(datetime(2024, 2, 1, tzinfo=UTC)),
                        end=ts_to_proto(datetime(2024, 1, 1, tzinfo=UTC)),
                    ),
                ],
            ),
            "filters[1].start",
        ),
        ("Get", vector_pb2.GetRequest(tenant=T, ids=[GOOD_ID, "nope"]), "ids[1]"),
        ("Delete", vector_pb2.DeleteRequest(tenant=T, ids=[GOOD_ID], version=-1), "version"),
        ("Delete", vector_pb2.DeleteRequest(tenant="", ids=[GOOD_ID]), "tenant"),
        (
            "Upsert",
            vector_pb2.UpsertRequest(
                tenant=T, points=[point(GOOD_ID, "a"), vector_pb2.Point(vector=[1.0] * DIM)]
            ),
            "points[1].memory",
        ),
        (
            "Upsert",
            vector_pb2.UpsertRequest(
                tenant=T,
                points=[vector_pb2.Point(memory=point(GOOD_ID, "a").memory, vector=[1.0] * 3)],
            ),
            "points[0].vector",
        ),
        (
            "Upsert",
            vector_pb2.UpsertRequest(tenant="tenant-b", points=[point(GOOD_ID, "a")]),
            "points[0].memory.tenant",
        ),
        (
            "Upsert",
            vector_pb2.UpsertRequest(tenant=T, points=[_tagged(MAX_TAGS + 1, "t")]),
            "points[0].memory.tags",
        ),
        (
            "Upsert",
            vector_pb2.UpsertRequest(tenant=T, points=[_tagged(1, "t" * (MAX_TAG_LENGTH + 1))]),
            "points[0].memory.tags[0]",
        ),
        (
            "Upsert",
            vector_pb2.UpsertRequest(tenant=T, points=[point(GOOD_ID, "a"), _nan_point()]),
            _NAN_FIELD,
        ),
        (
            "UpdateAccess",
            vector_pb2.UpdateAccessRequest(
                tenant=T, updates=[common_pb2.AccessUpdate(id=GOOD_ID, access_count=1)]
            ),
            "updates[0].last_accessed",
        ),
        ("Scan", vector_pb2.ScanRequest(tenant=" ", limit=5), "tenant"),
        ("Scan", vector_pb2.ScanRequest(tenant=T, limit=0), "limit"),
        ("Scan", vector_pb2.ScanRequest(tenant=T, limit=1001), "limit"),
        ("Scan", vector_pb2.ScanRequest(tenant=T, limit=5, cursor="c" * 257), "cursor"),
        ("ScanBySequence", vector_pb2.ScanRequest(tenant=T, limit=0), "limit"),
        ("ScanBySequence", vector_pb2.ScanRequest(tenant=T, limit=5, cursor=GOOD_ID), "cursor"),
        ("UpdateRelevance", _relevance((GOOD_ID, 0.5), ("nope", 0.5)), "updates[1].id"),
        ("UpdateRelevance", _relevance((GOOD_ID, 1.01)), "updates[0].relevance_score"),
        ("UpdateRelevance", _relevance((GOOD_ID, float("nan"))), "updates[0].relevance_score"),
        ("Neighbours", vector_pb2.NeighboursRequest(tenant=T, limit=5), "ids"),
        ("Neighbours", vector_pb2.NeighboursRequest(tenant=T, ids=["x"], limit=5), "ids[0]"),
        ("Neighbours", vector_pb2.NeighboursRequest(tenant=T, ids=[GOOD_ID], limit=0), "limit"),
        ("Neighbours", vector_pb2.NeighboursRequest(tenant=T, ids=[GOOD_ID], limit=101), "limit"),
        (
            "Neighbours",
            vector_pb2.NeighboursRequest(tenant=T, ids=[GOOD_ID], limit=5, min_score=1.5),
            "min_score",
        ),
    ],
)
async def test_bad_requests_name_the_field(
    stub: vector_pb2_grpc.VectorServiceAsyncStub, rpc: str, request_: object, field: str
) -> None:
    got, details = await _invalid(getattr(stub, rpc)(request_))
    assert got == field
    assert details.startswith(f"{field}: ")
    assert (await stub.Count(vector_pb2.CountRequest(tenant=T))).count == 0


async def test_oversized_batches_are_refused(stub: vector_pb2_grpc.VectorServiceAsyncStub) -> None:
    ids = [str(uuid.UUID(int=i + 1)) for i in range(1001)]
    got, _ = await _invalid(stub.Get(vector_pb2.GetRequest(tenant=T, ids=ids)))
    assert got == "ids"


async def test_scan_neighbours_and_update_relevance(
    stub: vector_pb2_grpc.VectorServiceAsyncStub,
) -> None:
    points = [point(i, text) for i, text in DOCS.items()]
    await stub.Upsert(vector_pb2.UpsertRequest(tenant=T, points=points))
    deploy, lunch = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
    ghost = str(uuid.UUID(int=99))

    reply = await stub.UpdateRelevance(_relevance((deploy.upper(), 0.75), (ghost, 0.5)))
    assert reply.updated == 1

    first = await stub.Scan(vector_pb2.ScanRequest(tenant=T, limit=2))
    assert len(first.memories) == 2
    assert first.next_cursor != ""
    rest = await stub.Scan(vector_pb2.ScanRequest(tenant=T, limit=2, cursor=first.next_cursor))
    assert rest.next_cursor == ""
    scanned = {m.id: memory_from_proto(m) for m in [*first.memories, *rest.memories]}
    assert sorted(scanned) == sorted(DOCS)
    assert scanned[deploy].relevance_score == 0.75

    by_sequence = await stub.ScanBySequence(vector_pb2.ScanRequest(tenant=T, limit=10))
    assert sorted(m.id for m in by_sequence.memories) == sorted(DOCS)
    assert by_sequence.next_cursor == ""

    found = await stub.Neighbours(
        vector_pb2.NeighboursRequest(tenant=T, ids=[lunch, ghost, deploy], limit=1, min_score=-1)
    )
    assert [n.id for n in found.neighbours] == [lunch, deploy]
    for n in found.neighbours:
        [hit] = n.hits
        assert hit.id != n.id
        assert not hit.HasField("memory")
        assert -1.0 <= hit.score < 1.0
