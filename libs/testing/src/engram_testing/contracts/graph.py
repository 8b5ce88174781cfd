"""The behaviour every `engram_core.ports.GraphStore` adapter must show.

Subclass `GraphStoreContract` in a ``Test*`` class and override the ``store`` fixture to yield
an EMPTY store (fresh per test); every test here then runs against it.

Semantics pinned here (the fake and every adapter agree):

- Upsert applies a memory only when its version is newer than the stored one and than any
  tombstone; an applied upsert replaces the memory's MENTIONS set with the given entities
  (entities are MERGE'd: one node per tenant/kind/slug, the first name seen is kept) and
  keeps the derived state of `engram_core.ports` (newer access statistics, a higher
  relevance_score); relations survive it.
- UpdateAccess sets last_accessed and access_count of live memories unless the stored
  last_accessed is newer.
- Delete applies when its version is newer than the stored one: the memory, its MENTIONS and
  every relation touching it go; a tombstone at that version stays behind.
- ``add_relations`` needs both endpoints live in the tenant (else NotFound naming the id, and
  nothing of the batch is written); one edge per (source, target, type): re-adding updates
  strength, properties and origin (created_at stays); a system-origin edge never replaces a
  user-origin one; an edge write older than the stored edge's version is skipped. With
  ``versions`` each relation carries its own version (a batch of events in one call).
- ``remove_relations`` removes each (source, target, type) edge unless it was written by a
  newer version, or it is a user edge and the removal's origin is system; absent edges and
  endpoints are skipped.
- ``related`` walks relations in both directions, nearest first; a memory's strength is the
  best product of strengths over its shortest paths, its type the first edge of that path;
  the start node and tombstones never come back; unknown start → NotFound.
- ``search`` scores a memory by the IDF of the distinct matching entities it MENTIONS (entity
  keys ``kind:slug`` exactly, keywords as case-insensitive substrings of entity names): the sum
  of ``ln(1 + n / df)``, ``n`` the tenant's live memories, ``df`` those mentioning the entity
  (archived included, the filter not applied), so a rare entity counts more than a common
  one; ties go to the newer timestamp; the filter is applied inside the query.
- Anything a caller sends — content, tags, names, keywords, ids — is data, never query text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram_core.errors import NotFound
from engram_core.filters import matches
from engram_core.model import (
    AccessUpdate,
    Entity,
    Filter,
    Hit,
    Memory,
    RelatedHit,
    Relation,
    RelevanceUpdate,
    UpsertResult,
)
from engram_core.ports import GraphStore
from engram_testing.contracts.common import (
    ALL,
    BASE,
    FILTER_CASES,
    FILTER_CORPUS,
    OTHER,
    MemoryStoreContract,
    T,
    filter_params,
    full_memory,
    ids,
    mem,
)

__all__ = [
    "ALL",
    "ALPHA",
    "BASE",
    "BOB",
    "FILTER_CASES",
    "FILTER_CORPUS",
    "OTHER",
    "PARIS",
    "QDRANT",
    "SARAH",
    "SARAH_PLACE",
    "GraphStoreContract",
    "T",
    "edge_keys",
    "full_memory",
    "idf",
    "ids",
    "mem",
    "rel",
    "related_view",
]

SARAH = Entity("people", "sarah", "Sarah Connor")
BOB = Entity("people", "bob", "Bob Dylan")
QDRANT = Entity("tools", "qdrant", "Qdrant")
ALPHA = Entity("projects", "alpha", "Project Alpha")
PARIS = Entity("places", "paris", "Paris")
# Same slug as SARAH, another kind: a different entity.
SARAH_PLACE = Entity("places", "sarah", "Sarah Island")


def rel(
    source: str,
    target: str,
    type_: str = "RELATES_TO",
    strength: float = 0.5,
    *,
    origin: str = "user",
    properties: dict[str, object] | None = None,
    minutes: float = 0,
) -> Relation:
    return Relation(
        source_id=source,
        target_id=target,
        type=type_,
        strength=strength,
        properties=properties or {},
        origin=origin,
        created_at=BASE + timedelta(minutes=minutes),
    )


def idf(n: int, df: int) -> float:
    """What one matching entity adds to a search hit's score."""
    return math.log(1.0 + n / df)


def scored(hits: Sequence[Hit], expected: Sequence[tuple[str, float]]) -> bool:
    """The hits are ``expected`` (id, score) in order, scores equal up to rounding."""
    return [h.id for h in hits] == [i for i, _ in expected] and all(
        math.isclose(h.score, score, rel_tol=1e-9)
        for h, (_, score) in zip(hits, expected, strict=False)
    )


def related_view(hits: Sequence[RelatedHit]) -> list[tuple[str, str, float, int]]:
    return [(h.id, h.type, round(h.strength, 9), h.depth) for h in hits]


def edge_keys(relations: Sequence[Relation]) -> set[tuple[str, str, str]]:
    return {(r.source_id, r.target_id, r.type) for r in relations}


# Text that would do damage if it were ever spliced into a Cypher query.
CYPHER = "'}) MATCH (n) DETACH DELETE n //"
CYPHER_2 = '"}) RETURN 1; MATCH (m:Memory) SET m.deleted = true //'


class GraphStoreContract(MemoryStoreContract):
    """Abstract: subclasses override ``store`` to yield an empty GraphStore."""

    @pytest.fixture
    def store(self) -> GraphStore:
        raise NotImplementedError("a GraphStoreContract subclass must provide the store fixture")

    @pytest.fixture
    def port(self, store: GraphStore) -> GraphStore:
        return store

    def item(self, m: Memory, slot: int = 0) -> Any:
        return (m, [])

    def corpus(self) -> list[Any]:
        # Every corpus memory mentions SARAH; the filter decides what comes back.
        return [(m, [SARAH]) for m in FILTER_CORPUS]

    # -- round trip and get --------------------------------------------------------------------

    async def test_get_round_trips_every_field(self, store: GraphStore) -> None:
        m = full_memory()
        assert await store.upsert(T, [(m, [SARAH])]) == UpsertResult(applied=1, skipped=0)
        assert await store.get(T, [m.id]) == [m]

    async def test_upsert_stores_the_tenant_it_was_called_with(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("x", tenant=OTHER), [SARAH])])
        assert [m.tenant for m in await store.get(T, ["x"])] == [T]
        assert await store.get(OTHER, ["x"]) == []
        assert await store.search(OTHER, ["people:sarah"], [], ALL, 10) == []

    async def test_query_text_in_data_stays_data(self, store: GraphStore) -> None:
        evil_entity = Entity("concepts", "injection", CYPHER_2)
        m = replace(
            mem("evil", CYPHER, tags=("note:x",)),
            metadata={"q": CYPHER_2, CYPHER: 1},
        )
        await store.upsert(T, [(m, [evil_entity]), (mem("other"), [SARAH])])
        await store.add_relations(
            T, [rel("evil", "other", properties={"why": CYPHER, CYPHER_2: [CYPHER]})], 1
        )
        assert await store.get(T, ["evil"]) == [m]
        assert await store.count(T) == 2
        assert ids(await store.search(T, [], ["delete n", "set m.deleted"], ALL, 10)) == ["evil"]
        assert ids(await store.search(T, [], [CYPHER], ALL, 10)) == []
        assert ids(await store.search(T, ["people:sarah"], [], ALL, 10)) == ["other"]
        [edge] = await store.relations(T, ["other"])
        assert dict(edge.properties) == {"why": CYPHER, CYPHER_2: [CYPHER]}
        # Ids that look like queries are just unknown ids.
        assert await store.get(T, [CYPHER, CYPHER_2]) == []
        assert await store.delete(T, [CYPHER], version=5) == 0
        with pytest.raises(NotFound):
            await store.related(T, CYPHER, 1, [], 10)
        assert await store.count(T) == 2
        assert await store.upsert(T, [(mem(CYPHER, CYPHER_2, version=6), [evil_entity])]) == (
            UpsertResult(1, 0)
        )
        assert [m.content for m in await store.get(T, [CYPHER])] == [CYPHER_2]
        assert await store.count(T) == 3

    # -- versions and tombstones ---------------------------------------------------------------

    async def test_upsert_applies_only_newer_versions(self, store: GraphStore) -> None:
        assert await store.upsert(T, [(mem("a", "apple", version=2), [SARAH])]) == (
            UpsertResult(1, 0)
        )
        assert await store.upsert(T, [(mem("a", "banana", version=1), [BOB])]) == (
            UpsertResult(0, 1)
        )
        assert await store.upsert(T, [(mem("a", "banana", version=2), [BOB])]) == (
            UpsertResult(0, 1)
        )
        assert [m.content for m in await store.get(T, ["a"])] == ["apple"]
        # The skipped writes did not touch the mentions either.
        assert ids(await store.search(T, ["people:sarah"], [], ALL, 10)) == ["a"]
        assert await store.search(T, ["people:bob"], [], ALL, 10) == []

        assert await store.upsert(T, [(mem("a", "cherry", version=3), [BOB])]) == (
            UpsertResult(1, 0)
        )
        assert [(m.content, m.version) for m in await store.get(T, ["a"])] == [("cherry", 3)]
        assert await store.count(T) == 1

    async def test_newer_upsert_replaces_the_mentions(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a", version=1), [SARAH, QDRANT])])
        await store.upsert(T, [(mem("a", version=2), [QDRANT, PARIS])])
        assert await store.search(T, ["people:sarah"], [], ALL, 10) == []
        assert await store.search(T, [], ["sarah"], ALL, 10) == []
        [hit] = await store.search(T, ["tools:qdrant", "places:paris"], [], ALL, 10)
        assert scored([hit], [("a", 2 * idf(1, 1))])
        # An empty entity list clears them all.
        await store.upsert(T, [(mem("a", version=3), [])])
        assert await store.search(T, ["tools:qdrant", "places:paris"], ["qdrant"], ALL, 10) == []
        assert await store.count(T) == 1

    async def test_duplicate_ids_in_one_batch_keep_the_highest_version(
        self, store: GraphStore
    ) -> None:
        result = await store.upsert(
            T,
            [
                (mem("a", "middle", version=2), [BOB]),
                (mem("a", "newest", version=3), [SARAH]),
                (mem("a", "old", version=1), [QDRANT]),
            ],
        )
        assert result == UpsertResult(applied=1, skipped=2)
        assert [m.content for m in await store.get(T, ["a"])] == ["newest"]
        [hit] = await store.search(T, ["people:sarah", "people:bob", "tools:qdrant"], [], ALL, 10)
        assert scored([hit], [("a", idf(1, 1))])
        assert await store.count(T) == 1

    async def test_delete_leaves_a_tombstone(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a", version=1), [SARAH]), (mem("b"), [SARAH])])
        assert await store.delete(T, ["a"], version=2) == 1
        assert await store.get(T, ["a"]) == []
        assert ids(await store.search(T, ["people:sarah"], [], ALL, 10)) == ["b"]
        assert await store.count(T) == 1

        # A redelivered older write cannot resurrect it, nor one at the tombstone's version.
        assert await store.upsert(T, [(mem("a", version=1), [SARAH])]) == UpsertResult(0, 1)
        assert await store.upsert(T, [(mem("a", version=2), [SARAH])]) == UpsertResult(0, 1)
        assert await store.get(T, ["a"]) == []
        assert ids(await store.search(T, ["people:sarah"], [], ALL, 10)) == ["b"]
        assert await store.count(T) == 1

        # A newer write re-creates it.
        assert await store.upsert(T, [(mem("a", "again", version=3), [SARAH])]) == (
            UpsertResult(1, 0)
        )
        assert [m.content for m in await store.get(T, ["a"])] == ["again"]
        assert set(ids(await store.search(T, ["people:sarah"], [], ALL, 10))) == {"a", "b"}
        assert await store.count(T) == 2

    async def test_delete_before_upsert_blocks_older_writes(self, store: GraphStore) -> None:
        assert await store.delete(T, ["early"], version=5) == 0
        assert await store.upsert(T, [(mem("early", "late", version=4), [SARAH])]) == (
            UpsertResult(0, 1)
        )
        assert await store.get(T, ["early"]) == []
        assert await store.search(T, ["people:sarah"], [], ALL, 10) == []
        assert await store.count(T) == 0
        assert await store.upsert(T, [(mem("early", "recreated", version=6), [])]) == (
            UpsertResult(1, 0)
        )
        assert [m.content for m in await store.get(T, ["early"])] == ["recreated"]

    async def test_delete_with_an_older_version_changes_nothing(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a", "kept", version=7), [SARAH]), (mem("b"), [])])
        await store.add_relations(T, [rel("a", "b")], 7)
        assert await store.delete(T, ["a"], version=3) == 0
        assert [m.content for m in await store.get(T, ["a"])] == ["kept"]
        assert ids(await store.search(T, ["people:sarah"], [], ALL, 10)) == ["a"]
        assert edge_keys(await store.relations(T, ["a"])) == {("a", "b", "RELATES_TO")}

    async def test_delete_removes_edges_and_mentions(self, store: GraphStore) -> None:
        await store.upsert(
            T, [(mem("a"), [SARAH]), (mem("b"), [SARAH]), (mem("c"), []), (mem("d"), [])]
        )
        await store.add_relations(T, [rel("a", "b"), rel("c", "a"), rel("c", "d")], 1)
        assert await store.delete(T, ["a"], version=2) == 1
        assert edge_keys(await store.relations(T, ["a", "b", "c"])) == {("c", "d", "RELATES_TO")}
        assert await store.related(T, "b", 3, [], 10) == []
        assert ids(await store.search(T, ["people:sarah"], [], ALL, 10)) == ["b"]
        # Re-created, it starts with no edges and only its new mentions.
        await store.upsert(T, [(mem("a", version=3), [QDRANT])])
        assert await store.relations(T, ["a"]) == []
        assert await store.related(T, "a", 3, [], 10) == []
        assert ids(await store.search(T, ["people:sarah"], [], ALL, 10)) == ["b"]
        assert ids(await store.search(T, ["tools:qdrant"], [], ALL, 10)) == ["a"]

    async def test_delete_tenant_removes_edges_and_entities(self, store: GraphStore) -> None:
        for tenant in (T, OTHER):
            await store.upsert(
                tenant, [(mem("a", tenant=tenant), [SARAH]), (mem("b", tenant=tenant), [])]
            )
            await store.add_relations(tenant, [rel("a", "b")], 1)
        assert await store.delete_tenant(T) == 2
        assert await store.relations(T, ["a", "b"]) == []
        assert await store.search(T, ["people:sarah"], [], ALL, 10) == []
        # Re-created, it starts with no edges and no mentions.
        await store.upsert(T, [(mem("a", version=1), []), (mem("b", version=1), [])])
        assert await store.relations(T, ["a"]) == []
        assert await store.related(T, "a", 3, [], 10) == []
        assert ids(await store.search(OTHER, ["people:sarah"], [], ALL, 10)) == ["a"]
        assert edge_keys(await store.relations(OTHER, ["a"])) == {("a", "b", "RELATES_TO")}

    async def test_tombstones_never_show_up(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a", tags=("x:y",)), [SARAH]), (mem("b"), [SARAH])])
        await store.add_relations(T, [rel("a", "b")], 1)
        await store.delete(T, ["a"], version=2)
        await store.delete(T, ["never-stored"], version=2)
        assert await store.get(T, ["a", "never-stored"]) == []
        for flt in (Filter(), ALL, Filter(exclude_tags=("x",)), Filter(start=BASE - timedelta(1))):
            assert ids(await store.search(T, ["people:sarah"], ["sarah"], flt, 10)) == ["b"]
        assert await store.related(T, "b", 3, [], 10) == []
        for tomb in ("a", "never-stored"):
            with pytest.raises(NotFound):
                await store.related(T, tomb, 1, [], 10)
            with pytest.raises(NotFound):
                await store.add_relations(T, [rel("b", tomb)], 3)
        assert await store.relations(T, ["a", "never-stored"]) == []
        assert await store.count(T) == 1

    # -- tenants -------------------------------------------------------------------------------

    async def test_tenants_are_isolated(self, store: GraphStore) -> None:
        await store.upsert(
            T,
            [(mem("same", "alpha secret", version=5), [SARAH]), (mem("t-only"), [SARAH])],
        )
        await store.add_relations(T, [rel("same", "t-only", strength=0.9)], 5)
        await store.upsert(OTHER, [(mem("same", "beta secret", tenant=OTHER), [BOB])])
        # The version guard is per tenant: version 1 applied although tenant-a holds version 5.
        assert [(m.content, m.tenant) for m in await store.get(OTHER, ["same"])] == [
            ("beta secret", OTHER)
        ]
        assert await store.get(OTHER, ["t-only"]) == []
        # Entities are per tenant too: tenant-b has no Sarah, tenant-a no Bob.
        assert await store.search(OTHER, ["people:sarah"], ["sarah"], ALL, 10) == []
        assert await store.search(T, ["people:bob"], ["bob"], ALL, 10) == []
        assert ids(await store.search(OTHER, ["people:bob"], [], ALL, 10)) == ["same"]
        # Relations: tenant-a's edge is invisible to tenant-b, and cannot be reached from it.
        assert await store.relations(OTHER, ["same", "t-only"]) == []
        assert await store.related(OTHER, "same", 3, [], 10) == []
        with pytest.raises(NotFound):
            await store.related(OTHER, "t-only", 1, [], 10)
        with pytest.raises(NotFound):
            await store.add_relations(OTHER, [rel("same", "t-only")], 9)
        assert await store.count(T) == 2
        assert await store.count(OTHER) == 1

        assert await store.delete(OTHER, ["same", "t-only"], version=9) == 1
        assert [m.content for m in await store.get(T, ["same"])] == ["alpha secret"]
        assert related_view(await store.related(T, "same", 1, [], 10)) == [
            ("t-only", "RELATES_TO", 0.9, 1)
        ]
        assert await store.count(T) == 2
        assert await store.count(OTHER) == 0

        update = AccessUpdate(id="t-only", last_accessed=BASE, access_count=3)
        assert await store.update_access(OTHER, [update]) == 0
        assert [m.access_count for m in await store.get(T, ["t-only"])] == [0]

    async def test_same_ids_and_entity_keys_in_two_tenants_never_mix(
        self, store: GraphStore
    ) -> None:
        # Both tenants hold memories "a" and "b" and an entity people:bob, named differently.
        await store.upsert(T, [(mem("a"), [Entity("people", "bob", "Robert")]), (mem("b"), [])])
        await store.upsert(OTHER, [(mem("a", tenant=OTHER), [BOB]), (mem("b", tenant=OTHER), [])])
        await store.add_relations(T, [rel("a", "b", strength=0.9)], 1)
        assert await store.related(OTHER, "a", 3, [], 10) == []
        assert await store.related(OTHER, "b", 3, [], 10) == []
        assert await store.relations(OTHER, ["a", "b"]) == []
        assert await store.search(T, [], ["dylan"], ALL, 10) == []
        assert ids(await store.search(OTHER, [], ["dylan"], ALL, 10)) == ["a"]
        assert await store.search(OTHER, [], ["robert"], ALL, 10) == []
        assert ids(await store.search(T, [], ["robert"], ALL, 10)) == ["a"]

    # -- relations -----------------------------------------------------------------------------

    async def test_add_relations_round_trips(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), []), (mem("b"), []), (mem("c"), [])])
        r1 = rel("a", "b", "LEADS_TO", 0.8, properties={"why": "x", "n": [1, 2]}, minutes=5)
        r2 = rel("c", "a", "SIMILAR_TO", 0.3, origin="system", minutes=7)
        assert await store.add_relations(T, [r1, r2], 1) == 2
        got = {(r.source_id, r.target_id, r.type): r for r in await store.relations(T, ["a"])}
        assert got == {("a", "b", "LEADS_TO"): r1, ("c", "a", "SIMILAR_TO"): r2}
        assert await store.relations(T, ["b"]) == [r1]
        assert await store.relations(T, ["missing"]) == []
        assert await store.relations(T, []) == []
        # Each edge once, even when both of its ends are asked for.
        assert len(await store.relations(T, ["a", "b", "c"])) == 2

    async def test_add_relations_needs_both_endpoints(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), []), (mem("b"), [])])
        with pytest.raises(NotFound) as err:
            await store.add_relations(T, [rel("a", "b"), rel("a", "ghost-target")], 1)
        assert "ghost-target" in err.value.message
        with pytest.raises(NotFound) as err:
            await store.add_relations(T, [rel("ghost-source", "b")], 1)
        assert "ghost-source" in err.value.message
        # Nothing of the failed batches was written.
        assert await store.relations(T, ["a", "b"]) == []
        assert await store.count(T) == 2

    async def test_re_adding_an_edge_updates_it(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), []), (mem("b"), [])])
        assert await store.add_relations(T, [rel("a", "b", strength=0.2, minutes=1)], 1) == 1
        again = rel("a", "b", strength=0.7, properties={"note": "stronger"}, minutes=9)
        assert await store.add_relations(T, [again], 2) == 1
        [edge] = await store.relations(T, ["a"])
        assert edge == replace(again, created_at=BASE + timedelta(minutes=1))
        # Another type is another edge; the reverse direction is another edge too.
        await store.add_relations(T, [rel("a", "b", "LEADS_TO"), rel("b", "a")], 3)
        assert edge_keys(await store.relations(T, ["a"])) == {
            ("a", "b", "RELATES_TO"),
            ("a", "b", "LEADS_TO"),
            ("b", "a", "RELATES_TO"),
        }

    async def test_system_edge_never_replaces_a_user_edge(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), []), (mem("b"), [])])
        user = rel("a", "b", "RELATES_TO", 0.9, properties={"by": "user"})
        await store.add_relations(T, [user], 1)
        system = rel("a", "b", "RELATES_TO", 0.1, origin="system")
        assert await store.add_relations(T, [system], 2) == 0
        assert await store.relations(T, ["a"]) == [user]
        # A user edge does replace a system one.
        await store.add_relations(T, [rel("b", "a", "SIMILAR_TO", 0.2, origin="system")], 3)
        assert await store.add_relations(T, [rel("b", "a", "SIMILAR_TO", 0.6)], 4) == 1
        got = {r.type: r for r in await store.relations(T, ["b"]) if r.source_id == "b"}
        assert (got["SIMILAR_TO"].origin, got["SIMILAR_TO"].strength) == ("user", 0.6)

    async def test_an_older_edge_write_is_skipped(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), []), (mem("b"), [])])
        await store.add_relations(T, [rel("a", "b", strength=0.4)], 10)
        assert await store.add_relations(T, [rel("a", "b", strength=0.9)], 9) == 0
        assert [r.strength for r in await store.relations(T, ["a"])] == [0.4]
        # The same version again (a redelivery) is idempotent.
        assert await store.add_relations(T, [rel("a", "b", strength=0.4)], 10) == 1
        assert [r.strength for r in await store.relations(T, ["a"])] == [0.4]

    async def test_relations_survive_a_newer_upsert(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), []), (mem("b"), [])])
        await store.add_relations(T, [rel("a", "b")], 1)
        await store.upsert(T, [(mem("a", "edited", version=2), [SARAH])])
        assert edge_keys(await store.relations(T, ["a"])) == {("a", "b", "RELATES_TO")}

    async def test_per_relation_versions_apply_a_batch_of_events(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), []), (mem("b"), []), (mem("c"), [])])
        await store.add_relations(T, [rel("a", "b", strength=0.5)], 20)
        batch = [
            rel("a", "b", strength=0.1),  # event 15: older than the stored edge (20)
            rel("a", "c", strength=0.3),  # event 16
            rel("a", "c", strength=0.6),  # event 18: the newer duplicate wins
            rel("b", "c", strength=0.2),  # event 30
        ]
        await store.add_relations(T, batch, 99, [15, 16, 18, 30])

        def strengths(rels: Sequence[Relation]) -> dict[tuple[str, str], float]:
            return {(r.source_id, r.target_id): r.strength for r in rels}

        got = strengths(await store.relations(T, ["a", "b"]))
        assert got == {("a", "b"): 0.5, ("a", "c"): 0.6, ("b", "c"): 0.2}
        # Each edge kept its own event's version, not the batch's 99 nor its largest (30).
        assert await store.add_relations(T, [rel("a", "c", strength=0.9)], 17) == 0
        assert await store.add_relations(T, [rel("a", "c", strength=0.8)], 19) == 1
        assert await store.add_relations(T, [rel("b", "c", strength=0.9)], 25) == 0
        got = strengths(await store.relations(T, ["a", "b"]))
        assert got == {("a", "b"): 0.5, ("a", "c"): 0.8, ("b", "c"): 0.2}

    async def test_remove_relations(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem(x), []) for x in "abc"])
        await store.add_relations(
            T, [rel("a", "b", "SIMILAR_TO", origin="system"), rel("a", "b"), rel("b", "c")], 5
        )
        # Only the named type goes; the same pair's other edge stays.
        assert await store.remove_relations(T, [rel("a", "b", "SIMILAR_TO")], 6) == 1
        assert edge_keys(await store.relations(T, ["a", "b"])) == {
            ("a", "b", "RELATES_TO"),
            ("b", "c", "RELATES_TO"),
        }
        # Absent edges, absent endpoints and the reverse direction are no error, no change.
        gone = [rel("a", "b", "SIMILAR_TO"), rel("b", "a"), rel("a", "ghost"), rel("x", "y")]
        assert await store.remove_relations(T, gone, 7) == 0
        assert len(await store.relations(T, ["b"])) == 2
        # An edge written by a newer event stays; a removal at or after its version removes it.
        assert await store.remove_relations(T, [rel("b", "c")], 4) == 0
        assert await store.remove_relations(T, [rel("b", "c")], 8, [5]) == 1
        assert edge_keys(await store.relations(T, ["a", "b", "c"])) == {("a", "b", "RELATES_TO")}
        # Removed edges can come back with a later add.
        assert await store.add_relations(T, [rel("b", "c", strength=0.7)], 9) == 1
        assert [r.strength for r in await store.relations(T, ["c"])] == [0.7]

    async def test_relations_read_before_a_change_are_not_answered_after_it(
        self, store: GraphStore
    ) -> None:
        """Each change follows a read of the same ids (an adapter may keep what it read)."""
        await store.upsert(T, [(mem(x), []) for x in "abc"])
        assert await store.relations(T, ["a", "b", "c"]) == []
        await store.add_relations(T, [rel("a", "b"), rel("b", "c")], 1)
        assert edge_keys(await store.relations(T, ["a", "c"])) == {
            ("a", "b", "RELATES_TO"),
            ("b", "c", "RELATES_TO"),
        }
        await store.add_relations(T, [rel("a", "b", strength=0.9)], 2)
        assert [r.strength for r in await store.relations(T, ["a"])] == [0.9]
        await store.remove_relations(T, [rel("a", "b")], 3)
        assert edge_keys(await store.relations(T, ["a", "b"])) == {("b", "c", "RELATES_TO")}
        await store.delete(T, ["b"], version=4)  # takes b's edges from its neighbour c too
        assert await store.relations(T, ["c"]) == []

    async def test_relations_of_one_origin(self, store: GraphStore) -> None:
        """``origin`` keeps that origin's edges. Each change follows a read (an adapter may keep
        what it read, such as that a tenant has no edges agents made)."""
        await store.upsert(T, [(mem(x), []) for x in "abc"])
        await store.upsert(OTHER, [(mem(x), []) for x in "ab"])
        await store.add_relations(OTHER, [rel("a", "b")], 1)  # another tenant's: not T's
        await store.add_relations(T, [rel("a", "b", "SIMILAR_TO", origin="system")], 1)
        assert await store.relations(T, ["a", "b"], "user") == []
        assert edge_keys(await store.relations(T, ["a"], "system")) == {("a", "b", "SIMILAR_TO")}
        assert edge_keys(await store.relations(T, ["a"])) == {("a", "b", "SIMILAR_TO")}
        await store.add_relations(T, [rel("b", "c", "INVALIDATED_BY")], 2)
        assert edge_keys(await store.relations(T, ["a", "b", "c"], "user")) == {
            ("b", "c", "INVALIDATED_BY")
        }
        assert edge_keys(await store.relations(T, ["b"], "system")) == {("a", "b", "SIMILAR_TO")}
        await store.remove_relations(T, [rel("b", "c", "INVALIDATED_BY")], 3)
        assert await store.relations(T, ["b", "c"], "user") == []
        await store.add_relations(T, [rel("a", "c")], 4)
        assert edge_keys(await store.relations(T, ["c"], "user")) == {("a", "c", "RELATES_TO")}
        await store.delete(T, ["c"], version=5)  # takes its edges
        assert await store.relations(T, ["a"], "user") == []

    async def test_system_removal_never_removes_a_user_edge(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem(x), []) for x in "abc"])
        await store.add_relations(T, [rel("a", "b", "SIMILAR_TO")], 1)  # a user wrote it
        await store.add_relations(T, [rel("b", "c", "SIMILAR_TO", origin="system")], 2)
        system = [rel("a", "b", "SIMILAR_TO", origin="system"), rel("b", "c", "SIMILAR_TO")]
        system[1] = replace(system[1], origin="system")
        assert await store.remove_relations(T, system, 3) == 1
        assert edge_keys(await store.relations(T, ["b"])) == {("a", "b", "SIMILAR_TO")}
        # A user removal removes whatever is there.
        assert await store.remove_relations(T, [rel("a", "b", "SIMILAR_TO")], 4) == 1
        assert await store.relations(T, ["b"]) == []

    async def test_remove_relations_is_tenant_scoped(self, store: GraphStore) -> None:
        for tenant in (T, OTHER):
            await store.upsert(tenant, [(mem("a"), []), (mem("b"), [])])
            await store.add_relations(tenant, [rel("a", "b")], 1)
        assert await store.remove_relations(OTHER, [rel("a", "b")], 2) == 1
        assert edge_keys(await store.relations(T, ["a"])) == {("a", "b", "RELATES_TO")}
        assert await store.relations(OTHER, ["a"]) == []
        assert await store.remove_relations(T, [], 3) == 0

    # -- related -------------------------------------------------------------------------------

    async def _chain(self, store: GraphStore) -> None:
        # a -0.5-> b -0.4-> c -0.5-> d ; e -0.8-> a (incoming) ; f only 4 hops away.
        await store.upsert(T, [(mem(x), []) for x in "abcdef"])
        await store.add_relations(
            T,
            [
                rel("a", "b", "LEADS_TO", 0.5),
                rel("b", "c", "RELATES_TO", 0.4),
                rel("c", "d", "PART_OF", 0.5),
                rel("e", "a", "DERIVED_FROM", 0.8),
                rel("d", "f", "RELATES_TO", 1.0),
            ],
            1,
        )

    async def test_related_walks_nearest_first(self, store: GraphStore) -> None:
        await self._chain(store)
        assert related_view(await store.related(T, "a", 1, [], 10)) == [
            ("e", "DERIVED_FROM", 0.8, 1),
            ("b", "LEADS_TO", 0.5, 1),
        ]
        assert related_view(await store.related(T, "a", 2, [], 10)) == [
            ("e", "DERIVED_FROM", 0.8, 1),
            ("b", "LEADS_TO", 0.5, 1),
            ("c", "LEADS_TO", 0.2, 2),
        ]
        assert related_view(await store.related(T, "a", 3, [], 10)) == [
            ("e", "DERIVED_FROM", 0.8, 1),
            ("b", "LEADS_TO", 0.5, 1),
            ("c", "LEADS_TO", 0.2, 2),
            ("d", "LEADS_TO", 0.1, 3),
        ]
        # From the middle, both directions.
        assert related_view(await store.related(T, "c", 1, [], 10)) == [
            ("d", "PART_OF", 0.5, 1),
            ("b", "RELATES_TO", 0.4, 1),
        ]

    async def test_related_limit_keeps_the_nearest(self, store: GraphStore) -> None:
        await self._chain(store)
        assert [h.id for h in await store.related(T, "a", 3, [], 1)] == ["e"]
        assert [h.id for h in await store.related(T, "a", 3, [], 3)] == ["e", "b", "c"]

    async def test_related_types_restrict_every_hop(self, store: GraphStore) -> None:
        await self._chain(store)
        assert related_view(await store.related(T, "a", 3, ["LEADS_TO"], 10)) == [
            ("b", "LEADS_TO", 0.5, 1)
        ]
        got = await store.related(T, "a", 3, ["LEADS_TO", "RELATES_TO"], 10)
        assert related_view(got) == [("b", "LEADS_TO", 0.5, 1), ("c", "LEADS_TO", 0.2, 2)]
        assert await store.related(T, "a", 3, ["CONTRADICTS"], 10) == []

    async def test_related_prefers_the_shortest_then_strongest_path(
        self, store: GraphStore
    ) -> None:
        # s reaches t in 2 hops two ways (0.9*0.5 and 0.3*1.0) and in 1 weak hop via a cycle.
        await store.upsert(T, [(mem(x), []) for x in ("s", "x", "y", "t", "u")])
        await store.add_relations(
            T,
            [
                rel("s", "x", "LEADS_TO", 0.9),
                rel("x", "u", "LEADS_TO", 0.5),
                rel("s", "y", "RELATES_TO", 0.3),
                rel("y", "u", "RELATES_TO", 1.0),
                rel("s", "t", "CONTRADICTS", 0.05),
                rel("t", "u", "RELATES_TO", 1.0),
                rel("u", "s", "RELATES_TO", 0.01),
            ],
            1,
        )
        got = related_view(await store.related(T, "s", 3, [], 10))
        # u is 1 hop away through its edge back to s: that shortest path wins, weak as it is.
        assert got == [
            ("x", "LEADS_TO", 0.9, 1),
            ("y", "RELATES_TO", 0.3, 1),
            ("t", "CONTRADICTS", 0.05, 1),
            ("u", "RELATES_TO", 0.01, 1),
        ]
        without_back_edge = related_view(
            await store.related(T, "s", 3, ["LEADS_TO", "CONTRADICTS"], 10)
        )
        assert without_back_edge == [
            ("x", "LEADS_TO", 0.9, 1),
            ("t", "CONTRADICTS", 0.05, 1),
            ("u", "LEADS_TO", 0.45, 2),
        ]
        # Without CONTRADICTS, t is only reachable through u (2 hops); the walk from x, y and u
        # never comes back to s.
        assert related_view(await store.related(T, "s", 2, ["LEADS_TO", "RELATES_TO"], 10)) == [
            ("x", "LEADS_TO", 0.9, 1),
            ("y", "RELATES_TO", 0.3, 1),
            ("u", "RELATES_TO", 0.01, 1),
            ("t", "RELATES_TO", 0.01, 2),
        ]

    async def test_related_two_hop_best_product(self, store: GraphStore) -> None:
        # The weak path is written first and its middle node sorts first: the walk must still
        # keep the strongest product, not the first path it meets.
        await store.upsert(T, [(mem(x), []) for x in ("s", "a1", "z9", "u")])
        await store.add_relations(
            T,
            [
                rel("s", "a1", "RELATES_TO", 0.3),
                rel("a1", "u", "RELATES_TO", 1.0),
                rel("s", "z9", "LEADS_TO", 0.9),
                rel("z9", "u", "LEADS_TO", 0.5),
            ],
            1,
        )
        assert related_view(await store.related(T, "s", 2, [], 10)) == [
            ("z9", "LEADS_TO", 0.9, 1),
            ("a1", "RELATES_TO", 0.3, 1),
            ("u", "LEADS_TO", 0.45, 2),
        ]

    async def test_related_unknown_start_is_not_found(self, store: GraphStore) -> None:
        with pytest.raises(NotFound) as err:
            await store.related(T, "nobody", 2, [], 10)
        assert "nobody" in err.value.message
        await store.upsert(T, [(mem("lonely"), [SARAH])])
        assert await store.related(T, "lonely", 3, [], 10) == []

    # -- search --------------------------------------------------------------------------------

    async def test_search_scores_by_matched_entities(self, store: GraphStore) -> None:
        await store.upsert(
            T,
            [
                (mem("two", minutes=1), [SARAH, QDRANT, PARIS]),
                (mem("one-new", minutes=9), [QDRANT]),
                (mem("one-old", minutes=2), [SARAH]),
                (mem("none", minutes=30), [BOB, PARIS]),
                (mem("island", minutes=40), [SARAH_PLACE]),
            ],
        )
        hits = await store.search(T, ["people:sarah", "tools:qdrant"], [], Filter(), 10)
        # n = 5; sarah and qdrant are each mentioned by 2 memories.
        assert scored(
            hits,
            [
                ("two", 2 * idf(5, 2)),
                ("one-new", idf(5, 2)),
                ("one-old", idf(5, 2)),
            ],
        )
        assert all(h.memory is not None and h.memory.id == h.id for h in hits)

    async def test_search_idf_follows_the_tenants_writes(self, store: GraphStore) -> None:
        # n is the tenant's live memories when the search runs, whatever was searched before.
        await store.upsert(T, [(mem("s1"), [SARAH]), (mem("s2"), [SARAH]), (mem("x1"), [BOB])])
        await store.upsert(OTHER, [(mem("o1", tenant=OTHER), [SARAH])])

        async def sarah_scores() -> set[float]:
            hits = await store.search(T, ["people:sarah"], [], Filter(), 10)
            assert {h.id for h in hits} == {"s1", "s2"}
            return {round(h.score, 9) for h in hits}

        assert await sarah_scores() == {round(idf(3, 2), 9)}
        await store.upsert(T, [(mem(f"y{i}"), [BOB]) for i in range(3)])
        assert await sarah_scores() == {round(idf(6, 2), 9)}
        await store.upsert(OTHER, [(mem(f"o{i}", tenant=OTHER), []) for i in range(2, 9)])
        assert await sarah_scores() == {round(idf(6, 2), 9)}
        await store.delete(T, ["y0", "y1"], 5)
        assert await sarah_scores() == {round(idf(4, 2), 9)}

    async def test_search_keywords_match_entity_names(self, store: GraphStore) -> None:
        await store.upsert(
            T,
            [
                (mem("s", minutes=1), [SARAH]),
                (mem("si", minutes=2), [SARAH_PLACE]),
                (mem("q", minutes=3), [QDRANT]),
                (mem("both", minutes=4), [SARAH, SARAH_PLACE]),
            ],
        )
        # Case-insensitive substring of the name, not of the slug or kind.
        hits = await store.search(T, [], ["SARAH"], Filter(), 10)
        both, one = 2 * idf(4, 2), idf(4, 2)
        assert scored(hits, [("both", both), ("si", one), ("s", one)])
        assert ids(await store.search(T, [], ["drant"], Filter(), 10)) == ["q"]
        assert await store.search(T, [], ["tools"], Filter(), 10) == []
        assert await store.search(T, [], ["people"], Filter(), 10) == []
        # An entity matched by key and by keyword counts once; qdrant (1 of 4) is rarer than
        # people:sarah (2 of 4), so q comes first though it is older than "both".
        hits = await store.search(T, ["people:sarah"], ["connor", "qdrant"], Filter(), 10)
        assert scored(
            hits,
            [
                ("q", idf(4, 1)),
                ("both", idf(4, 2)),
                ("s", idf(4, 2)),
            ],
        )
        # Keys are exact "kind:slug".
        assert ids(await store.search(T, ["places:sarah"], [], Filter(), 10)) == ["both", "si"]
        assert await store.search(T, ["people:sar", "sarah", "people"], [], Filter(), 10) == []

    async def test_search_counts_a_rare_entity_more_than_a_common_one(
        self, store: GraphStore
    ) -> None:
        # SARAH in 6 of 8 memories, QDRANT in 1, BOB in 2 (one of them archived: it counts
        # in df and n, as it is still a memory). Filters do not change df.
        common = [(mem(f"c{i}", minutes=50 + i), [SARAH]) for i in range(5)]
        await store.upsert(
            T,
            [
                *common,
                (mem("rare", minutes=1), [QDRANT]),
                (mem("two-common", minutes=2), [SARAH, BOB]),
                (mem("bob-archived", minutes=3, archived=True), [BOB]),
            ],
        )
        await store.upsert(OTHER, [(mem(f"o{i}", tenant=OTHER), [QDRANT]) for i in range(9)])
        keys = ["people:sarah", "tools:qdrant", "people:bob"]
        hits = await store.search(T, keys, [], Filter(), 3)
        assert scored(
            hits,
            [
                ("two-common", idf(8, 6) + idf(8, 2)),
                ("rare", idf(8, 1)),
                ("c4", idf(8, 6)),
            ],
        )
        later = Filter(start=BASE + timedelta(minutes=53))
        hits = await store.search(T, keys, [], later, 10)
        assert scored(
            hits,
            [
                ("c4", idf(8, 6)),
                ("c3", idf(8, 6)),
            ],
        )

    async def test_search_with_nothing_to_match_is_empty(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), [SARAH])])
        assert await store.search(T, [], [], ALL, 10) == []

    async def test_search_limit_keeps_the_best(self, store: GraphStore) -> None:
        items = [(mem(f"m{i:02d}", minutes=i), [SARAH]) for i in range(12)]
        items.append((mem("top", minutes=-5), [SARAH, QDRANT]))
        await store.upsert(T, items)
        hits = await store.search(T, ["people:sarah", "tools:qdrant"], [], Filter(), 3)
        assert ids(hits) == ["top", "m11", "m10"]
        assert len(await store.search(T, ["people:sarah"], [], Filter(), 100)) == 13
        assert len(await store.search(T, ["people:sarah"], [], Filter(), 1)) == 1

    @pytest.mark.parametrize(("flt", "expected"), filter_params(FILTER_CASES))
    async def test_filter(self, store: GraphStore, flt: Filter, expected: set[str]) -> None:
        # The expectation is hand-written; the reference semantics must agree with it.
        assert {m.id for m in FILTER_CORPUS if matches(m, flt)} == expected
        await store.upsert(T, self.corpus())
        await store.upsert(OTHER, [(mem("o1", tenant=OTHER, tags=("project:alpha",)), [SARAH])])
        assert set(ids(await store.search(T, ["people:sarah"], [], flt, 100))) == expected
        assert set(ids(await store.search(T, [], ["connor"], flt, 100))) == expected

    async def test_filter_is_applied_inside_the_query(self, store: GraphStore) -> None:
        # The only match of the filter has the lowest score of all; a post-filtered top-k
        # would come back empty.
        strong = [(mem(f"n{i}", tags=("fruit:common",)), [SARAH, QDRANT]) for i in range(30)]
        weak = (mem("weak", tags=("fruit:rare",), type_="Insight"), [SARAH])
        await store.upsert(T, [*strong, weak])
        keys = ["people:sarah", "tools:qdrant"]
        assert ids(await store.search(T, keys, [], Filter(tags=("fruit:rare",)), 1)) == ["weak"]
        assert ids(await store.search(T, keys, [], Filter(exclude_tags=("fruit:common",)), 1)) == [
            "weak"
        ]
        assert ids(await store.search(T, keys, [], Filter(types=("Insight",)), 3)) == ["weak"]

    async def test_search_hits_carry_the_stored_memory(self, store: GraphStore) -> None:
        m = replace(full_memory(), archived=False)
        await store.upsert(T, [(m, [SARAH])])
        [hit] = await store.search(T, ["people:sarah"], [], Filter(), 5)
        assert scored([hit], [(m.id, idf(1, 1))])
        assert hit.memory == m

    async def test_entity_names_keep_the_first_seen(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), [SARAH])])
        renamed = Entity("people", "sarah", "Sally")
        await store.upsert(T, [(mem("b"), [renamed])])
        assert set(ids(await store.search(T, [], ["connor"], Filter(), 10))) == {"a", "b"}
        assert await store.search(T, [], ["sally"], Filter(), 10) == []

    # -- empty requests ------------------------------------------------------------------------

    async def test_empty_requests_do_nothing(self, store: GraphStore) -> None:
        assert await store.upsert(T, []) == UpsertResult(0, 0)
        assert await store.delete(T, [], version=3) == 0
        assert await store.add_relations(T, [], 3) == 0
        assert await store.get(T, []) == []
        assert await store.update_access(T, []) == 0
        assert await store.relations(T, []) == []
        assert await store.search(T, ["people:sarah"], ["sarah"], ALL, 10) == []
        assert await store.count(T) == 0

    # -- access statistics ---------------------------------------------------------------------

    async def test_update_access_sets_statistics_only(self, store: GraphStore) -> None:
        m = replace(full_memory(), archived=False)
        await store.upsert(T, [(m, [SARAH])])
        seen = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)
        updates = [AccessUpdate(id=m.id, last_accessed=seen, access_count=12)]
        assert await store.update_access(T, updates) == 1
        expected = replace(m, last_accessed=seen, access_count=12)
        assert await store.get(T, [m.id]) == [expected]
        [hit] = await store.search(T, ["people:sarah"], [], Filter(), 5)
        assert hit.memory == expected
        # The version guard is untouched: the same version is still stale, a newer one applies.
        assert await store.upsert(T, [(m, [SARAH])]) == UpsertResult(0, 1)
        assert await store.upsert(T, [(replace(m, version=m.version + 1), [SARAH])]) == (
            UpsertResult(1, 0)
        )

    async def test_update_access_skips_unknown_and_deleted(self, store: GraphStore) -> None:
        await store.upsert(T, [(mem("a"), []), (mem("b"), [])])
        await store.delete(T, ["b"], version=2)
        updates = [
            AccessUpdate(id=i, last_accessed=BASE, access_count=1) for i in ("a", "b", "missing")
        ]
        assert await store.update_access(T, updates) == 1
        assert await store.get(T, ["b", "missing"]) == []
        assert await store.count(T) == 1

    # -- relevance -----------------------------------------------------------------------------

    async def test_relevance_shows_in_search_hits(self, store: GraphStore) -> None:
        m = replace(full_memory(), archived=False, relevance_score=0.5)
        await store.upsert(T, [(m, [SARAH])])
        assert await store.update_relevance(T, [RelevanceUpdate(m.id, 0.875)]) == 1
        [hit] = await store.search(T, ["people:sarah"], [], Filter(), 5)
        assert hit.memory == replace(m, relevance_score=0.875)
        # An upsert carrying a lower score keeps the stored one, in hits too; so do the edges.
        await store.upsert(T, [(mem("b"), [])])
        await store.add_relations(T, [rel(m.id, "b")], 1)
        edited = replace(m, content="edited", version=m.version + 1)
        await store.upsert(T, [(edited, [BOB])])
        [hit] = await store.search(T, ["people:bob"], [], Filter(), 5)
        assert hit.memory == replace(edited, relevance_score=0.875)
        assert edge_keys(await store.relations(T, [m.id])) == {(m.id, "b", "RELATES_TO")}
