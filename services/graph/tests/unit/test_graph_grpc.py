"""The graph RPCs in-process on port 0, through the platform server, on a ladybug store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.graph.v1 import graph_pb2, graph_pb2_grpc
from engram_core.model import AccessUpdate, Entity, Filter, TagMatch
from engram_graph import server
from engram_graph.bootstrap import build_service
from engram_graph.config import Settings
from engram_platform.convert import (
    access_update_to_proto,
    entity_to_proto,
    filter_to_proto,
    memory_from_proto,
    memory_to_proto,
    relation_from_proto,
    relation_to_proto,
    ts_to_proto,
)
from engram_platform.errors import FIELD_KEY
from engram_testing.contracts.graph import QDRANT, SARAH, full_memory, idf, mem, rel
from engram_testing.in_process import serving

T = "tenant-a"
if TYPE_CHECKING:
    Stub = graph_pb2_grpc.GraphServiceAsyncStub


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[Stub]:
    settings = Settings(port=0, data_dir=tmp_path, max_batch=3, max_limit=50, buffer_pool_mb=64)
    async with serving(server.start, settings, build_service(settings)) as channel:
        yield graph_pb2_grpc.GraphServiceStub(channel)
    assert (tmp_path / "graph" / "graph.lbug").is_file()


def graph_memory(m: Any, *entities: Entity) -> graph_pb2.GraphMemory:
    return graph_pb2.GraphMemory(
        memory=memory_to_proto(m), entities=[entity_to_proto(e) for e in entities]
    )


async def test_upsert_relate_search_delete(stub: Stub) -> None:
    m = full_memory()
    memories = [
        graph_memory(m, SARAH, QDRANT),
        graph_memory(mem("b", tags=("project:engram",)), QDRANT),
        graph_memory(mem("c")),
    ]
    reply = await stub.Upsert(graph_pb2.UpsertRequest(tenant=T, memories=memories))
    assert (reply.applied, reply.skipped) == (3, 0)
    again = await stub.Upsert(graph_pb2.UpsertRequest(tenant=T, memories=memories[1:]))
    assert (again.applied, again.skipped) == (0, 2)
    assert (await stub.Count(graph_pb2.CountRequest(tenant=T))).count == 3

    relations = [
        relation_to_proto(rel(m.id, "b", "leads_to", 0.8, properties={"why": "same tool"})),
        relation_to_proto(rel("b", "c", "RELATES_TO", 0.5, origin="system")),
    ]
    # No created_at: the server stamps the edge with the time it arrived.
    relations[1].ClearField("created_at")
    added = await stub.AddRelations(
        graph_pb2.AddRelationsRequest(tenant=T, relations=relations, version=4)
    )
    assert added.applied == 2

    related = await stub.Related(graph_pb2.RelatedRequest(tenant=T, id=m.id, depth=2, limit=10))
    assert [(h.id, h.type, round(h.strength, 6), h.depth) for h in related.hits] == [
        ("b", "LEADS_TO", 0.8, 1),
        ("c", "LEADS_TO", 0.4, 2),
    ]
    only_leads = await stub.Related(
        graph_pb2.RelatedRequest(tenant=T, id=m.id, depth=3, types=["LEADS_TO"])
    )
    assert [h.id for h in only_leads.hits] == ["b"]

    edges = await stub.Relations(graph_pb2.RelationsRequest(tenant=T, ids=["c"]))
    [edge] = [relation_from_proto(r) for r in edges.relations]
    assert (edge.source_id, edge.type, edge.origin) == ("b", "RELATES_TO", "system")
    assert edge.created_at.year >= 2025

    flt = filter_to_proto(Filter(tags=("project",), tag_match=TagMatch.PREFIX))
    found = await stub.Search(
        graph_pb2.SearchRequest(tenant=T, entity_keys=["tools:qdrant"], filter=flt, limit=5)
    )
    assert [h.id for h in found.hits] == ["b"]
    assert memory_from_proto(found.hits[0].memory).id == "b"
    both = await stub.Search(
        graph_pb2.SearchRequest(
            tenant=T,
            entity_keys=["tools:qdrant"],
            keywords=["CONNOR"],
            filter=common_pb2.Filter(include_archived=True),
        )
    )
    # 3 memories: qdrant in 2 of them, sarah ("connor") in 1.
    assert [(h.id, h.score) for h in both.hits] == [
        (m.id, pytest.approx(idf(3, 2) + idf(3, 1))),
        ("b", pytest.approx(idf(3, 2))),
    ]
    assert memory_from_proto(both.hits[0].memory) == m

    seen = datetime(2025, 1, 2, tzinfo=UTC)
    update = access_update_to_proto(AccessUpdate(id="b", last_accessed=seen, access_count=4))
    touched = await stub.UpdateAccess(graph_pb2.UpdateAccessRequest(tenant=T, updates=[update]))
    assert touched.updated == 1

    deleted = await stub.Delete(graph_pb2.DeleteRequest(tenant=T, ids=["b", "nope"], version=10))
    assert deleted.deleted == 1
    gone = await stub.Search(graph_pb2.SearchRequest(tenant=T, entity_keys=["tools:qdrant"]))
    assert [h.id for h in gone.hits] == []  # m is archived, b is gone
    assert list((await stub.Related(graph_pb2.RelatedRequest(tenant=T, id=m.id))).hits) == []
    assert (await stub.Count(graph_pb2.CountRequest(tenant=T))).count == 2
    assert (await stub.Count(graph_pb2.CountRequest(tenant="tenant-b"))).count == 0


async def test_unknown_ids_are_not_found(stub: Stub) -> None:
    await stub.Upsert(graph_pb2.UpsertRequest(tenant=T, memories=[graph_memory(mem("a"))]))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.AddRelations(
            graph_pb2.AddRelationsRequest(
                tenant=T, relations=[relation_to_proto(rel("a", "ghost"))], version=1
            )
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "ghost" in (err.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Related(graph_pb2.RelatedRequest(tenant=T, id="ghost", depth=1))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def _memory(**changes: Any) -> graph_pb2.GraphMemory:
    p = memory_to_proto(mem("x", "valid content"))
    for name, value in changes.items():
        if name == "clear":
            p.ClearField(value)
        else:
            setattr(p, name, value)
    return graph_pb2.GraphMemory(memory=p, entities=[entity_to_proto(SARAH)])


def _relation(**changes: Any) -> common_pb2.Relation:
    p = relation_to_proto(rel("a", "b"))
    for name, value in changes.items():
        if name == "created_at":
            p.created_at.CopyFrom(value)
        elif name == "properties":
            p.properties.update(value)
        else:
            setattr(p, name, value)
    return p


def _with_metadata(metadata: dict[str, Any]) -> graph_pb2.GraphMemory:
    g = _memory()
    g.memory.metadata.update(metadata)
    return g


def _bad_ts() -> Any:
    ts = ts_to_proto(datetime(2024, 1, 1, tzinfo=UTC))
    ts.seconds = 10**12
    return ts


def _upsert(*memories: graph_pb2.GraphMemory) -> graph_pb2.UpsertRequest:
    return graph_pb2.UpsertRequest(tenant=T, memories=memories)


def _add(*relations: common_pb2.Relation, version: int = 1) -> graph_pb2.AddRelationsRequest:
    return graph_pb2.AddRelationsRequest(tenant=T, relations=relations, version=version)


def _remove(
    *relations: common_pb2.Relation, version: int = 1, versions: tuple[int, ...] = ()
) -> graph_pb2.RemoveRelationsRequest:
    return graph_pb2.RemoveRelationsRequest(
        tenant=T, relations=relations, version=version, versions=versions
    )


def _search(**fields: Any) -> graph_pb2.SearchRequest:
    return graph_pb2.SearchRequest(tenant=T, **fields)


def _relevance(*updates: tuple[str, float]) -> graph_pb2.UpdateRelevanceRequest:
    return graph_pb2.UpdateRelevanceRequest(
        tenant=T, updates=[graph_pb2.RelevanceUpdate(id=i, relevance_score=r) for i, r in updates]
    )


BAD_ENTITY = graph_pb2.GraphMemory(
    memory=memory_to_proto(mem("x")),
    entities=[entity_to_proto(SARAH), common_pb2.Entity(kind="animals", slug="cat", name="Cat")],
)


@pytest.mark.parametrize(
    ("rpc", "request_", "field"),
    [
        ("Upsert", graph_pb2.UpsertRequest(tenant="", memories=[_memory()]), "tenant"),
        ("Upsert", graph_pb2.UpsertRequest(tenant="a b", memories=[_memory()]), "tenant"),
        ("Upsert", graph_pb2.UpsertRequest(tenant="a/b", memories=[_memory()]), "tenant"),
        ("Upsert", _upsert(*[_memory()] * 4), "memories"),
        ("Upsert", _upsert(graph_pb2.GraphMemory()), "memories[0].memory"),
        ("Upsert", _upsert(_memory(id="")), "memories[0].memory.id"),
        ("Upsert", _upsert(_memory(), _memory(content=" ")), "memories[1].memory.content"),
        ("Upsert", _upsert(_memory(tenant="tenant-b")), "memories[0].memory.tenant"),
        ("Upsert", _upsert(_memory(importance=1.5)), "memories[0].memory.importance"),
        ("Upsert", _upsert(_memory(clear="timestamp")), "memories[0].memory.timestamp"),
        ("Upsert", _upsert(_memory(version=-1)), "memories[0].memory.version"),
        ("Upsert", _upsert(BAD_ENTITY), "memories[0].entities[1].kind"),
        ("Delete", graph_pb2.DeleteRequest(tenant=T, ids=[], version=1), "ids"),
        ("Delete", graph_pb2.DeleteRequest(tenant=T, ids=["a", ""], version=1), "ids[1]"),
        ("Delete", graph_pb2.DeleteRequest(tenant=T, ids=["a"], version=-2), "version"),
        ("AddRelations", _add(), "relations"),
        ("AddRelations", _add(_relation(), _relation(type="LIKES")), "relations[1].type"),
        ("AddRelations", _add(_relation(type="MENTIONS")), "relations[0].type"),
        ("AddRelations", _add(_relation(strength=1.2)), "relations[0].strength"),
        ("AddRelations", _add(_relation(strength=float("nan"))), "relations[0].strength"),
        ("AddRelations", _add(_relation(target_id="a")), "relations[0].target_id"),
        ("AddRelations", _add(_relation(source_id="")), "relations[0].source_id"),
        ("AddRelations", _add(_relation(origin="robot")), "relations[0].origin"),
        ("AddRelations", _add(_relation(created_at=_bad_ts())), "relations[0].created_at"),
        (
            "AddRelations",
            _add(_relation(), _relation(properties={"w": [1, float("inf")]})),
            "relations[1].properties.w[1]",
        ),
        (
            "Upsert",
            _upsert(_memory(), _with_metadata({"n": float("nan")})),
            "memories[1].memory.metadata.n",
        ),
        ("AddRelations", _add(_relation(), version=-1), "version"),
        (
            "AddRelations",
            graph_pb2.AddRelationsRequest(tenant=T, relations=[_relation()], versions=[1, 2]),
            "versions",
        ),
        (
            "AddRelations",
            graph_pb2.AddRelationsRequest(tenant=T, relations=[_relation()], versions=[-3]),
            "versions[0]",
        ),
        ("RemoveRelations", _remove(), "relations"),
        ("RemoveRelations", graph_pb2.RemoveRelationsRequest(relations=[_relation()]), "tenant"),
        ("RemoveRelations", _remove(_relation(source_id="")), "relations[0].source_id"),
        ("RemoveRelations", _remove(_relation(type="LIKES")), "relations[0].type"),
        ("RemoveRelations", _remove(_relation(origin="robot")), "relations[0].origin"),
        ("RemoveRelations", _remove(_relation(), versions=(1, 2)), "versions"),
        ("RemoveRelations", _remove(*[_relation()] * 4), "relations"),
        ("Related", graph_pb2.RelatedRequest(tenant=T, id="", depth=1), "id"),
        ("Related", graph_pb2.RelatedRequest(tenant=T, id="a", depth=4), "depth"),
        ("Related", graph_pb2.RelatedRequest(tenant=T, id="a", depth=-1), "depth"),
        ("Related", graph_pb2.RelatedRequest(tenant=T, id="a", limit=51), "limit"),
        ("Related", graph_pb2.RelatedRequest(tenant=T, id="a", types=["X"]), "types[0]"),
        ("Search", _search(entity_keys=["people:sarah"], limit=51), "limit"),
        ("Search", _search(entity_keys=["people:sarah"], limit=-1), "limit"),
        ("Search", _search(entity_keys=["people:sarah", "sarah"]), "entity_keys[1]"),
        ("Search", _search(entity_keys=["pets:rex"]), "entity_keys[0]"),
        ("Search", _search(keywords=["ok", " "]), "keywords[1]"),
        (
            "Search",
            _search(keywords=["x"], filter=common_pb2.Filter(tags=["a", "b c"])),
            "filter.tags[1]",
        ),
        (
            "Search",
            _search(
                keywords=["x"], filter=common_pb2.Filter(tag_mode=common_pb2.TagMode.ValueType(7))
            ),
            "filter.tag_mode",
        ),
        (
            "Search",
            _search(
                keywords=["x"],
                filter=common_pb2.Filter(
                    start=ts_to_proto(datetime(2024, 2, 1, tzinfo=UTC)),
                    end=ts_to_proto(datetime(2024, 1, 1, tzinfo=UTC)),
                ),
            ),
            "filter.end",
        ),
        (
            "Search",
            _search(keywords=["x"], filter=common_pb2.Filter(start=_bad_ts())),
            "filter.start",
        ),
        ("Relations", graph_pb2.RelationsRequest(tenant=T, ids=["a", "b", "c", "d"]), "ids"),
        ("Relations", graph_pb2.RelationsRequest(tenant=T, ids=[""]), "ids[0]"),
        (
            "UpdateAccess",
            graph_pb2.UpdateAccessRequest(tenant=T, updates=[common_pb2.AccessUpdate(id="a")]),
            "updates[0].last_accessed",
        ),
        ("Count", graph_pb2.CountRequest(tenant=""), "tenant"),
        ("Scan", graph_pb2.ScanRequest(tenant="a/b", limit=5), "tenant"),
        ("Scan", graph_pb2.ScanRequest(tenant=T, limit=0), "limit"),
        ("Scan", graph_pb2.ScanRequest(tenant=T, limit=51), "limit"),
        ("Scan", graph_pb2.ScanRequest(tenant=T, limit=5, cursor="c" * 257), "cursor"),
        ("UpdateRelevance", _relevance(("a", 0.5), ("", 0.5)), "updates[1].id"),
        ("UpdateRelevance", _relevance(("a", 1.5)), "updates[0].relevance_score"),
        ("UpdateRelevance", _relevance(("a", float("inf"))), "updates[0].relevance_score"),
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
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Upsert(_upsert(_memory(id="ok"), BAD_ENTITY))
    assert (await stub.Count(graph_pb2.CountRequest(tenant=T))).count == 0
    await stub.Upsert(_upsert(_memory(id="a"), _memory(id="b")))
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.AddRelations(_add(_relation(), _relation(strength=2.0)))
    assert (
        list((await stub.Relations(graph_pb2.RelationsRequest(tenant=T, ids=["a"]))).relations)
        == []
    )


async def test_scan_and_update_relevance(stub: Stub) -> None:
    m = full_memory()
    await stub.Upsert(
        _upsert(graph_memory(m, SARAH), graph_memory(mem("b")), graph_memory(mem("c")))
    )
    assert (await stub.UpdateRelevance(_relevance(("b", 0.75), ("ghost", 0.5)))).updated == 1
    first = await stub.Scan(graph_pb2.ScanRequest(tenant=T, limit=2))
    assert len(first.memories) == 2
    assert first.next_cursor != ""
    rest = await stub.Scan(graph_pb2.ScanRequest(tenant=T, limit=2, cursor=first.next_cursor))
    assert rest.next_cursor == ""
    scanned = {p.id: memory_from_proto(p) for p in [*first.memories, *rest.memories]}
    assert sorted(scanned) == sorted([m.id, "b", "c"])
    assert scanned["b"].relevance_score == 0.75
    assert scanned[m.id] == m


async def test_add_and_remove_relations_with_per_event_versions(stub: Stub) -> None:
    await stub.Upsert(_upsert(_memory(id="a"), _memory(id="b"), _memory(id="c")))
    relations = [
        _relation(),
        _relation(target_id="c", type="SIMILAR_TO", origin="system"),
    ]
    reply = await stub.AddRelations(
        graph_pb2.AddRelationsRequest(tenant=T, relations=relations, versions=[4, 6])
    )
    assert reply.applied == 2
    # a→b was written at 4, a→c at 6: a removal at 5 takes only a→b.
    removed = await stub.RemoveRelations(_remove(*relations, version=5))
    assert removed.removed == 1
    got = await stub.Relations(graph_pb2.RelationsRequest(tenant=T, ids=["a"]))
    assert [(r.target_id, r.type) for r in got.relations] == [("c", "SIMILAR_TO")]
    # A system removal leaves a user edge alone.
    await stub.AddRelations(_add(_relation(), version=7))
    system = _relation(origin="system")
    assert (await stub.RemoveRelations(_remove(system, version=8))).removed == 0
    assert (await stub.RemoveRelations(_remove(_relation(), version=8))).removed == 1
