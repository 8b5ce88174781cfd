"""What the gateway relies on from its GraphPort, asserted of the unit tests' fake and of
the real adapter (engram_clients.GraphClient over the graph service on its embedded store).

Each subclass provides ``port`` (an empty GraphPort), ``put`` (memories in, each as ingest
writes it: ``enrich`` extracts its entities), ``relate`` (edges between stored memories)
and ``down`` (a port whose service cannot be reached).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from engram_clients.graph import GraphClient
from engram_core.enrich import enrich
from engram_core.errors import InvalidArgument, NotFound, Unavailable
from engram_core.model import Filter, Memory, Relation
from engram_core.validation import Limits
from engram_gateway.service.ports import GraphPort
from engram_testing.contracts.common import OTHER, T, full_memory, mem
from engram_testing.contracts.graph import rel

Put = Callable[..., Awaitable[None]]
MAX_LIMIT = 1000  # the largest limit the services take by default


def uid(n: int) -> str:
    return str(uuid.UUID(int=n))


def stored(m: Memory) -> Memory:
    """``m`` as ingest hands it to the stores: its entities extracted from the content."""
    return enrich(m, m.version, "")[0]


BILLING = stored(mem(uid(1), "The billing service moved to Postgres and Rust"))
REPORTS = stored(mem(uid(2), "The reporting job reads Postgres at noon", tags=("team:office",)))
NOTES = stored(mem(uid(3), "The deploy notes moved to the wiki"))
THEIRS = stored(mem(uid(4), "The billing service moved to Postgres and Rust", tenant=OTHER))
ARCHIVED = stored(replace(mem(uid(7), "An archived note"), archived=True))
POSTGRES = "tools:postgres"
RUST = "tools:rust"


class GraphPortContract:
    @pytest.fixture
    def port(self) -> GraphPort:
        raise NotImplementedError

    @pytest.fixture
    def put(self) -> Put:
        raise NotImplementedError

    @pytest.fixture
    def relate(self) -> Put:
        raise NotImplementedError

    @pytest.fixture
    def down(self) -> GraphPort:
        raise NotImplementedError

    def test_the_memories_mention_what_the_tests_search_for(self) -> None:
        assert BILLING.entities == (POSTGRES, RUST)
        assert (REPORTS.entities, NOTES.entities) == ((POSTGRES,), ())

    async def test_search_by_entity_key_in_the_tenant(self, port: GraphPort, put: Put) -> None:
        await put(BILLING, REPORTS, NOTES, THEIRS)
        hits = await port.search(T, [POSTGRES], [], Filter(), 10)
        assert sorted(h.id for h in hits) == sorted([BILLING.id, REPORTS.id])
        assert [h.id for h in await port.search(OTHER, [POSTGRES], [], Filter(), 10)] == [THEIRS.id]

    async def test_keywords_match_entity_names_not_the_text(
        self, port: GraphPort, put: Put
    ) -> None:
        await put(BILLING, REPORTS, NOTES)
        hits = await port.search(T, [], ["postg"], Filter(), 10)
        assert sorted(h.id for h in hits) == sorted([BILLING.id, REPORTS.id])
        # "deploy" and "reporting" are words of the text, not entities: the lexical stream's job.
        assert await port.search(T, [], ["deploy", "reporting"], Filter(), 10) == []

    async def test_a_rarer_entity_scores_higher(self, port: GraphPort, put: Put) -> None:
        await put(BILLING, REPORTS, NOTES)
        hits = await port.search(T, [POSTGRES, RUST], [], Filter(), 10)
        assert [h.id for h in hits] == [BILLING.id, REPORTS.id]
        # Scored by the IDF of the entities matched: ln(1 + n / df) summed.
        n = 3
        assert hits[1].score == pytest.approx(math.log(1 + n / 2), rel=1e-4)
        assert hits[0].score == pytest.approx(math.log(1 + n / 2) + math.log(1 + n), rel=1e-4)

    async def test_search_applies_the_filter_and_limit(self, port: GraphPort, put: Put) -> None:
        archived = stored(
            replace(mem(uid(5), "The old runbook for Postgres was archived"), archived=True)
        )
        await put(BILLING, REPORTS, archived)
        office = await port.search(T, [POSTGRES], [], Filter(tags=("team:office",)), 10)
        assert [h.id for h in office] == [REPORTS.id]
        assert archived.id not in {h.id for h in await port.search(T, [POSTGRES], [], Filter(), 10)}
        assert len(await port.search(T, [POSTGRES], [], Filter(include_archived=True), 2)) == 2

    async def test_a_hit_carries_the_stored_memory_or_none(self, port: GraphPort, put: Put) -> None:
        # The gateway takes a hit's memory as the result's, and fetches it when there is none.
        full = stored(replace(full_memory(), id=uid(6), content="Postgres runs the ledger"))
        await put(full)
        [hit] = await port.search(T, [POSTGRES], [], Filter(include_archived=True), 10)
        assert hit.id == full.id
        assert hit.memory in (None, full)

    async def test_a_limit_above_the_maximum_is_refused(self, port: GraphPort) -> None:
        with pytest.raises(InvalidArgument) as err:
            await port.search(T, [POSTGRES], [], Filter(), MAX_LIMIT + 1)
        assert err.value.field == "limit"

    async def test_relations_touching_the_ids(self, port: GraphPort, put: Put, relate: Put) -> None:
        await put(BILLING, REPORTS, NOTES)
        user = rel(BILLING.id, REPORTS.id, "LEADS_TO", 0.8)
        system = rel(NOTES.id, BILLING.id, "SIMILAR_TO", 0.3, origin="system")
        await relate(T, user, system)
        keys = {(r.source_id, r.target_id, r.type) for r in await port.relations(T, [BILLING.id])}
        assert keys == {
            (user.source_id, user.target_id, user.type),
            (NOTES.id, BILLING.id, "SIMILAR_TO"),
        }
        assert await port.relations(T, [REPORTS.id]) == [user]
        assert await port.relations(T, [BILLING.id], origin="system") == [system]
        assert await port.relations(OTHER, [BILLING.id]) == []

    async def test_related_walks_both_ways_nearest_first(
        self, port: GraphPort, put: Put, relate: Put
    ) -> None:
        await put(BILLING, REPORTS, NOTES)
        await relate(
            T,
            rel(BILLING.id, REPORTS.id, "LEADS_TO", 0.8),
            rel(NOTES.id, REPORTS.id, "RELATES_TO", 0.5),
        )
        view = [
            (h.id, h.type, round(h.strength, 6), h.depth)
            for h in await port.related(T, BILLING.id, 2, [], 10)
        ]
        assert view == [(REPORTS.id, "LEADS_TO", 0.8, 1), (NOTES.id, "LEADS_TO", 0.4, 2)]
        one = await port.related(T, BILLING.id, 1, [], 10)
        assert [h.id for h in one] == [REPORTS.id]
        assert await port.related(T, BILLING.id, 2, ["RELATES_TO"], 10) == []
        assert len(await port.related(T, BILLING.id, 2, [], 1)) == 1

    async def test_related_takes_the_deepest_walk_the_gateway_allows(
        self, port: GraphPort, put: Put
    ) -> None:
        await put(BILLING)
        assert await port.related(T, BILLING.id, Limits().max_depth, [], MAX_LIMIT) == []
        with pytest.raises(InvalidArgument) as err:
            await port.related(T, BILLING.id, Limits().max_depth + 1, [], 10)
        assert err.value.field == "depth"
        with pytest.raises(InvalidArgument) as err:
            await port.related(T, BILLING.id, 1, [], MAX_LIMIT + 1)
        assert err.value.field == "limit"

    async def test_related_of_an_unknown_memory_is_not_found(
        self, port: GraphPort, put: Put
    ) -> None:
        await put(BILLING)
        with pytest.raises(NotFound):
            await port.related(T, uid(99), 1, [], 10)

    async def test_count_is_per_tenant_archived_included(self, port: GraphPort, put: Put) -> None:
        await put(BILLING, REPORTS, THEIRS, ARCHIVED)
        counts = (await port.count(T), await port.count(OTHER), await port.count("nobody"))
        assert counts == (3, 1, 0)

    async def test_an_unreachable_service_is_unavailable(self, down: GraphPort) -> None:
        with pytest.raises(Unavailable):
            await down.search(T, [POSTGRES], [], Filter(), 5, timeout=5.0)


class TestFakeGraph(GraphPortContract):
    @pytest.fixture
    def port(self, harness: Any) -> GraphPort:
        graph: GraphPort = harness.graph
        return graph

    @pytest.fixture
    def put(self, harness: Any) -> Put:
        async def put(*memories: Memory) -> None:
            harness.world.put(*memories)

        return put

    @pytest.fixture
    def relate(self, harness: Any) -> Put:
        async def relate(tenant: str, *relations: Relation) -> None:
            harness.world.relations.extend((tenant, r) for r in relations)

        return relate

    @pytest.fixture
    def down(self, harness: Any) -> GraphPort:
        harness.graph.fail = Unavailable("graph: connection refused")
        graph: GraphPort = harness.graph
        return graph


class TestGraphClient(GraphPortContract):
    @pytest.fixture
    def port(self, graph_client: GraphClient) -> GraphPort:
        return graph_client

    @pytest.fixture
    def put(self, graph_client: GraphClient) -> Put:
        async def put(*memories: Memory) -> None:
            for m in memories:
                entities = enrich(m, m.version, "")[1]
                await graph_client.upsert(m.tenant, [(m, entities)])

        return put

    @pytest.fixture
    def relate(self, graph_client: GraphClient) -> Put:
        async def relate(tenant: str, *relations: Relation) -> None:
            await graph_client.add_relations(tenant, relations, version=10)

        return relate

    @pytest.fixture
    def down(self, closed_channel: Any) -> GraphPort:
        return GraphClient(closed_channel)
