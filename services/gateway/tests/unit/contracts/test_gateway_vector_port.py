"""What the gateway relies on from its VectorPort, asserted of the unit tests' fake and of
the real adapter (engram_clients.VectorClient over the vector service on its embedded
store): a fake that passes here cannot make a unit test pass that the real one would fail.

Each subclass provides ``port`` (an empty VectorPort) and ``put`` (how memories get into
it: the fake's world, or the real service's Upsert).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from engram_clients.vector import VectorClient
from engram_core.errors import InvalidArgument, Unavailable
from engram_core.model import Filter, Memory
from engram_embed.hashing import HashingEmbedder
from engram_gateway.service.ports import VectorPort
from engram_testing.contracts.common import OTHER, T, mem

Put = Callable[..., Awaitable[None]]
MAX_LIMIT = 1000  # the largest limit the services take by default


def uid(n: int) -> str:
    return str(uuid.UUID(int=n))  # the vector store keys points by UUID


DEPLOY = mem(uid(1), "the deploy pipeline runs on fridays", tags=("project:ops",))
LUNCH = mem(uid(2), "lunch is at noon in the big room", tags=("team:office",))
RUST = mem(uid(3), "sarah prefers rust for the deploy services", tags=("project:ops",))
THEIRS = mem(uid(4), "the deploy pipeline runs on fridays", tenant=OTHER)

ARCHIVED = replace(mem(uid(7), "an archived note"), archived=True)
_SIX = [DEPLOY, LUNCH, RUST, ARCHIVED, mem(uid(8), "eight"), mem(uid(9), "nine")]


class VectorPortContract:
    @pytest.fixture
    def port(self) -> VectorPort:
        raise NotImplementedError

    @pytest.fixture
    def put(self) -> Put:
        raise NotImplementedError

    @pytest.fixture
    def down(self) -> VectorPort:
        """A port whose service cannot be reached."""
        raise NotImplementedError

    @pytest.fixture
    def dimension(self) -> int:
        """The size of the vectors the port's live model takes."""
        raise NotImplementedError

    async def test_search_reads_only_the_tenants_memories(self, port: VectorPort, put: Put) -> None:
        await put(DEPLOY, LUNCH, RUST, THEIRS)
        hits = await port.search(T, Filter(), 10, query=DEPLOY.content)
        assert hits[0].id == DEPLOY.id
        assert THEIRS.id not in {h.id for h in hits}
        assert await port.search(OTHER, Filter(), 10, query=DEPLOY.content) != []

    async def test_hits_are_best_first_and_carry_the_memory(
        self, port: VectorPort, put: Put
    ) -> None:
        await put(DEPLOY, LUNCH, RUST)
        hits = await port.search(T, Filter(), 10, query="deploy pipeline fridays")
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        stored = {m.id: m for m in (DEPLOY, LUNCH, RUST)}
        assert all(h.memory == stored[h.id] for h in hits)

    async def test_search_applies_the_filter(self, port: VectorPort, put: Put) -> None:
        archived = replace(mem(uid(5), "the deploy pipeline was archived"), archived=True)
        await put(DEPLOY, LUNCH, RUST, archived)
        tagged = await port.search(T, Filter(tags=("project:ops",)), 10, query=DEPLOY.content)
        assert {h.id for h in tagged} <= {DEPLOY.id, RUST.id}
        assert DEPLOY.id in {h.id for h in tagged}
        hidden = await port.search(T, Filter(), 10, query=archived.content)
        assert archived.id not in {h.id for h in hidden}
        shown = await port.search(T, Filter(include_archived=True), 10, query=archived.content)
        assert shown[0].id == archived.id

    async def test_limit_caps_the_hits(self, port: VectorPort, put: Put) -> None:
        await put(*(mem(uid(10 + i), f"deploy note number {i}") for i in range(5)))
        assert len(await port.search(T, Filter(), 2, query="deploy note")) == 2

    @pytest.mark.parametrize("limit", [0, MAX_LIMIT + 1])
    async def test_a_limit_out_of_range_is_refused(self, port: VectorPort, limit: int) -> None:
        with pytest.raises(InvalidArgument) as err:
            await port.search(T, Filter(), limit, query="deploy")
        assert err.value.field == "limit"

    async def test_neither_text_nor_vector_is_refused(self, port: VectorPort) -> None:
        with pytest.raises(InvalidArgument) as err:
            await port.search(T, Filter(), 5, query="  ")
        assert err.value.field == "query"

    async def test_a_vector_of_the_wrong_size_is_refused_by_field(self, port: VectorPort) -> None:
        # The gateway renames this field to the request's `embedding` (the client's own vector).
        with pytest.raises(InvalidArgument) as err:
            await port.search(T, Filter(), 5, vector=[1.0, 0.5])
        assert err.value.field == "vector"

    async def test_a_vector_of_the_models_size_is_searched_by(
        self, port: VectorPort, put: Put, dimension: int
    ) -> None:
        await put(DEPLOY, THEIRS)
        hits = await port.search(T, Filter(), 5, vector=[1.0] * dimension)
        assert {h.id for h in hits} <= {DEPLOY.id}

    async def test_the_live_generation_names_the_size_a_client_vector_needs(
        self, port: VectorPort, dimension: int
    ) -> None:
        [live] = [g for g in await port.list_generations() if g.live]
        assert live.dimension == dimension
        assert live.embedding_model

    async def test_search_many_answers_each_filter_as_search_does(
        self, port: VectorPort, put: Put
    ) -> None:
        await put(DEPLOY, LUNCH, RUST)
        flts = [Filter(), Filter(tags=("team:office",)), Filter(tags=("nothing:here",))]
        many = await port.search_many(T, flts, 5, query="deploy lunch")
        one = [await port.search(T, f, 5, query="deploy lunch") for f in flts]
        assert [[h.id for h in hits] for hits in many] == [[h.id for h in hits] for hits in one]
        assert many[2] == []

    async def test_get_answers_the_ids_it_holds(self, port: VectorPort, put: Put) -> None:
        await put(DEPLOY, LUNCH, THEIRS)
        got = await port.get(T, [DEPLOY.id, uid(99), THEIRS.id, LUNCH.id])
        # A missing id (or another tenant's) is left out, not an error: Lookup asks lexical.
        assert sorted(got, key=lambda m: m.id) == [DEPLOY, LUNCH]

    async def test_count_is_per_tenant_archived_included(self, port: VectorPort, put: Put) -> None:
        await put(DEPLOY, LUNCH, THEIRS, ARCHIVED)
        assert (await port.count(T), await port.count(OTHER), await port.count("nobody")) == (
            3,
            1,
            0,
        )

    async def _by_sequence(self, port: VectorPort, limit: int) -> list[Memory]:
        seen: list[Memory] = []
        cursor: str | None = None
        for _ in range(20):
            page = await port.scan_by_sequence(T, cursor, limit)
            assert len(page.memories) <= limit
            seen += page.memories
            cursor = page.next_cursor
            if cursor is None:
                return seen
        raise AssertionError("the scan by sequence never ended")

    @pytest.mark.parametrize("limit", [1, 2, 3, 10])
    async def test_scan_by_sequence_pages_every_memory_once_by_version(
        self, port: VectorPort, put: Put, limit: int
    ) -> None:
        # Versions 3 and 8 hold several memories each, as one StoreBatch event writes them.
        at = [replace(m, version=v) for m, v in zip(_SIX, (8, 3, 8, 3, 1, 8), strict=True)]
        await put(*at, THEIRS)
        seen = await self._by_sequence(port, limit)
        assert sorted(m.id for m in seen) == sorted(m.id for m in at)
        assert [m.version for m in seen] == [1, 3, 3, 8, 8, 8]

    async def test_scan_by_sequence_names_a_bad_cursor(self, port: VectorPort) -> None:
        with pytest.raises(InvalidArgument) as err:
            await port.scan_by_sequence(T, "not-a-cursor", 3)
        assert err.value.field == "cursor"

    async def test_an_unreachable_service_is_unavailable(self, down: VectorPort) -> None:
        with pytest.raises(Unavailable):
            await down.search(T, Filter(), 5, query="deploy", timeout=5.0)


class TestFakeVector(VectorPortContract):
    @pytest.fixture
    def port(self, harness: Any) -> VectorPort:
        vector: VectorPort = harness.vector
        return vector

    @pytest.fixture
    def put(self, harness: Any) -> Put:
        async def put(*memories: Memory) -> None:
            harness.world.put(*memories)

        return put

    @pytest.fixture
    def down(self, harness: Any) -> VectorPort:
        harness.vector.fail = Unavailable("vector: connection refused")
        vector: VectorPort = harness.vector
        return vector

    @pytest.fixture
    def dimension(self, harness: Any) -> int:
        return int(harness.vector.dimension)


class TestVectorClient(VectorPortContract):
    @pytest.fixture
    def port(self, vector_client: VectorClient) -> VectorPort:
        return vector_client

    @pytest.fixture
    def put(self, vector_client: VectorClient, embedder: HashingEmbedder) -> Put:
        async def put(*memories: Memory) -> None:
            for m in memories:
                await vector_client.upsert(m.tenant, [(m, embedder.embed_one(m.content))])

        return put

    @pytest.fixture
    def down(self, closed_channel: Any) -> VectorPort:
        return VectorClient(closed_channel)

    @pytest.fixture
    def dimension(self, embedder: HashingEmbedder) -> int:
        return embedder.dimension
