"""GraphService rules over the in-memory store, wired through bootstrap; settings and bootstrap."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engram_core.errors import InvalidArgument, Unavailable
from engram_core.model import Entity, Filter, UpsertResult
from engram_graph.adapters.ladybug_store import LadybugGraphStore
from engram_graph.bootstrap import build_service, build_store
from engram_graph.config import Settings
from engram_graph.service import GraphService
from engram_testing.contracts.graph import SARAH, T, mem, rel
from engram_testing.fakes.graph import FakeGraphStore


@pytest.fixture
def fake() -> FakeGraphStore:
    return FakeGraphStore()


@pytest.fixture
def service(fake: FakeGraphStore, tmp_path: Path) -> GraphService:
    return build_service(Settings(data_dir=tmp_path, max_batch=5, max_seeds=3), store=fake)


async def test_relation_types_are_normalised(service: GraphService) -> None:
    await service.upsert(T, [(mem("a"), []), (mem("b"), [])])
    assert await service.add_relations(T, [rel("a", "b", " leads_to ")], 1) == 1
    [edge] = await service.relations(T, ["a"])
    assert edge.type == "LEADS_TO"
    [hit] = await service.related(T, "a", 1, ["Leads_To"], 10)
    assert (hit.id, hit.type) == ("b", "LEADS_TO")
    assert await service.related(T, "a", 1, ["MENTIONS"], 10) == []
    with pytest.raises(InvalidArgument) as err:
        await service.related(T, "a", 1, ["LEADS_TO", "LIKES"], 10)
    assert err.value.field == "types[1]"


async def test_system_types_are_accepted_but_mentions_is_not(service: GraphService) -> None:
    await service.upsert(T, [(mem("a"), []), (mem("b"), [])])
    system = rel("a", "b", "SIMILAR_TO", 0.3, origin="system")
    assert await service.add_relations(T, [system], 1) == 1
    with pytest.raises(InvalidArgument) as err:
        await service.add_relations(T, [rel("a", "b", "MENTIONS")], 1)
    assert err.value.field == "relations[0].type"


@pytest.mark.parametrize("strength", [0.0, 1.0])
async def test_strength_bounds_are_inclusive(service: GraphService, strength: float) -> None:
    await service.upsert(T, [(mem("a"), []), (mem("b"), [])])
    assert await service.add_relations(T, [rel("a", "b", strength=strength)], 1) == 1


@pytest.mark.parametrize("strength", [-0.01, 1.01, float("inf"), float("nan")])
async def test_strength_outside_the_unit_interval_is_refused(
    service: GraphService, strength: float
) -> None:
    with pytest.raises(InvalidArgument) as err:
        await service.add_relations(T, [rel("a", "b"), rel("a", "b", strength=strength)], 1)
    assert err.value.field == "relations[1].strength"


async def test_upsert_stamps_tenant_prefixes_and_entity_names(
    service: GraphService, fake: FakeGraphStore
) -> None:
    sent = replace(mem("a", tenant="someone-else", tags=("project:alpha:api",)), tag_prefixes=())
    unnamed = Entity("tools", "ladybug", "  ")
    assert await service.upsert(T, [(sent, [unnamed])]) == UpsertResult(1, 0)
    [got] = await fake.get(T, ["a"])
    assert (got.tenant, got.tag_prefixes) == (T, ("project", "project:alpha", "project:alpha:api"))
    # The slug stands in for a blank name, so keywords still find the entity.
    assert [h.id for h in await service.search(T, [], ["ladybug"], Filter(), 5)] == ["a"]


@pytest.mark.parametrize(
    ("entity", "field"),
    [
        (Entity("animals", "cat", "Cat"), "memories[0].entities[1].kind"),
        (Entity("people", "", "Nobody"), "memories[0].entities[1].slug"),
        (Entity("people", "two words", "Two"), "memories[0].entities[1].slug"),
    ],
)
async def test_bad_entities_are_refused(
    service: GraphService, fake: FakeGraphStore, entity: Entity, field: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        await service.upsert(T, [(mem("a"), [SARAH, entity])])
    assert err.value.field == field
    assert await fake.count(T) == 0


async def test_limits_and_depth_take_defaults_and_bounds(service: GraphService) -> None:
    await service.upsert(T, [(mem(f"m{i}"), [SARAH]) for i in range(5)])
    await service.upsert(T, [(mem(f"n{i}"), [SARAH]) for i in range(5)])
    assert len(await service.search(T, ["people:sarah"], [], Filter(), 0)) == 10
    await service.add_relations(T, [rel("m0", "m1"), rel("m1", "m2")], 1)
    assert [h.depth for h in await service.related(T, "m0", 0, [], 0)] == [1]
    for depth in (-1, 4):
        with pytest.raises(InvalidArgument) as err:
            await service.related(T, "m0", depth, [], 5)
        assert err.value.field == "depth"
    with pytest.raises(InvalidArgument) as err:
        await service.search(T, ["people:sarah"], [], Filter(), 1001)
    assert err.value.field == "limit"


async def test_batches_and_seeds_are_bounded(service: GraphService) -> None:
    with pytest.raises(InvalidArgument) as err:
        await service.upsert(T, [(mem(f"m{i}"), []) for i in range(6)])
    assert err.value.field == "memories"
    with pytest.raises(InvalidArgument) as err:
        await service.delete(T, [f"m{i}" for i in range(6)], 1)
    assert err.value.field == "ids"
    with pytest.raises(InvalidArgument) as err:
        await service.search(T, [], ["a", "b", "c", "d"], Filter(), 5)
    assert err.value.field == "keywords"


async def test_search_without_seeds_never_reaches_the_store(
    service: GraphService, fake: FakeGraphStore
) -> None:
    fake.failure = Unavailable("down")
    assert await service.search(T, [], [], Filter(), 5) == []
    with pytest.raises(Unavailable):
        await service.search(T, ["people:sarah"], [], Filter(), 5)


def test_settings_read_the_graph_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENGRAM_GRAPH_QUERY_TIMEOUT_MS", "1234")
    monkeypatch.setenv("ENGRAM_GRAPH_DATA_DIR", str(tmp_path))
    settings = Settings()
    assert settings.query_timeout_ms == 1234
    assert settings.backend == "ladybug"
    assert settings.resolved_db_path() == tmp_path / "graph" / "graph.lbug"
    assert Settings(db_path=tmp_path / "x.lbug").resolved_db_path() == tmp_path / "x.lbug"


async def test_bootstrap_builds_the_ladybug_store(tmp_path: Path) -> None:
    store = build_store(Settings(data_dir=tmp_path, buffer_pool_mb=32))
    try:
        assert isinstance(store, LadybugGraphStore)
        assert (tmp_path / "graph" / "graph.lbug").is_file()
    finally:
        await store.close()


async def test_versions_are_one_per_relation(service: GraphService, fake: FakeGraphStore) -> None:
    await service.upsert(T, [(mem("a"), []), (mem("b"), [])])
    with pytest.raises(InvalidArgument) as err:
        await service.add_relations(T, [rel("a", "b")], 1, [1, 2])
    assert err.value.field == "versions"
    with pytest.raises(InvalidArgument) as err:
        await service.remove_relations(T, [rel("a", "b")], 1, [-1])
    assert err.value.field == "versions[0]"
    assert await service.add_relations(T, [rel("a", "b", " similar_to ")], 0, [3]) == 1
    # A removal is checked like an add (registry type, origin) but its strength is moot.
    assert await service.remove_relations(T, [rel("a", "b", "similar_to", 7.0)], 3) == 1
    assert await fake.relations(T, ["a"]) == []
    with pytest.raises(InvalidArgument) as err:
        await service.remove_relations(T, [rel("a", "b", "MENTIONS")], 4)
    assert err.value.field == "relations[0].type"


async def test_relations_of_an_unknown_origin_are_refused(service: GraphService) -> None:
    await service.upsert(T, [(mem("a"), []), (mem("b"), [])])
    await service.add_relations(T, [rel("a", "b")], 1)
    with pytest.raises(InvalidArgument) as err:
        await service.relations(T, ["a"], "agent")
    assert err.value.field == "origin"
    assert [r.target_id for r in await service.relations(T, ["a"], "user")] == ["b"]
