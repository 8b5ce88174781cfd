"""What the gateway relies on from its LexicalPort, asserted of the unit tests' fake and of
the real adapter (engram_clients.LexicalClient over the lexical service on its embedded
index).

Each subclass provides ``port`` (an empty LexicalPort), ``put`` (how memories get into it)
and ``down`` (a port whose service cannot be reached).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from engram_clients.lexical import LexicalClient
from engram_core.errors import InvalidArgument, Unavailable
from engram_core.model import Filter, Memory
from engram_core.ordering import Sort
from engram_gateway.service.ports import LexicalPort
from engram_testing.contracts.common import OTHER, T, mem

Put = Callable[..., Awaitable[None]]
MAX_LIMIT = 1000  # the largest limit the services take by default


def uid(n: int) -> str:
    return str(uuid.UUID(int=n))


DEPLOY = replace(
    mem(uid(1), "the deploy pipeline runs on fridays", tags=("project:ops",)), importance=0.9
)
LUNCH = replace(
    mem(uid(2), "lunch is at noon in the big room", tags=("team:office",)), importance=0.2
)
RUST = replace(
    mem(uid(3), "sarah prefers rust for the deploy services", tags=("project:ops",)),
    importance=0.5,
)
THEIRS = replace(mem(uid(4), "the deploy pipeline runs on fridays", tenant=OTHER), importance=1.0)

ARCHIVED = replace(mem(uid(7), "an archived note"), archived=True)


class LexicalPortContract:
    @pytest.fixture
    def port(self) -> LexicalPort:
        raise NotImplementedError

    @pytest.fixture
    def put(self) -> Put:
        raise NotImplementedError

    @pytest.fixture
    def down(self) -> LexicalPort:
        raise NotImplementedError

    async def test_search_reads_only_the_tenants_memories(
        self, port: LexicalPort, put: Put
    ) -> None:
        await put(DEPLOY, LUNCH, RUST, THEIRS)
        hits = await port.search(T, "deploy pipeline fridays", Filter(), 10)
        assert hits[0].id == DEPLOY.id
        assert THEIRS.id not in {h.id for h in hits}
        assert [h.id for h in await port.search(OTHER, "pipeline", Filter(), 10)] == [THEIRS.id]

    async def test_hits_are_best_first_and_carry_the_memory(
        self, port: LexicalPort, put: Put
    ) -> None:
        await put(DEPLOY, LUNCH, RUST)
        hits = await port.search(T, "deploy pipeline", Filter(), 10)
        assert [h.id for h in hits] == [DEPLOY.id, RUST.id]  # only what matches a word
        assert hits[0].score > hits[1].score > 0
        assert [h.memory for h in hits] == [DEPLOY, RUST]

    async def test_search_applies_the_filter(self, port: LexicalPort, put: Put) -> None:
        archived = replace(mem(uid(5), "the deploy pipeline was archived"), archived=True)
        await put(DEPLOY, LUNCH, RUST, archived)
        tagged = await port.search(T, "deploy", Filter(tags=("project:ops",)), 10)
        assert sorted(h.id for h in tagged) == sorted([DEPLOY.id, RUST.id])
        hidden = await port.search(T, "archived", Filter(), 10)
        assert hidden == []
        shown = await port.search(T, "archived", Filter(include_archived=True), 10)
        assert [h.id for h in shown] == [archived.id]

    async def test_limit_caps_the_hits(self, port: LexicalPort, put: Put) -> None:
        await put(*(mem(uid(10 + i), f"deploy note number {i}") for i in range(5)))
        assert len(await port.search(T, "deploy note", Filter(), 2)) == 2

    async def test_a_limit_above_the_maximum_is_refused(self, port: LexicalPort) -> None:
        with pytest.raises(InvalidArgument) as err:
            await port.search(T, "deploy", Filter(), MAX_LIMIT + 1)
        assert err.value.field == "limit"
        with pytest.raises(InvalidArgument) as err:
            await port.top(T, Filter(), Sort.IMPORTANCE, MAX_LIMIT + 1)
        assert err.value.field == "limit"

    async def test_top_lists_by_the_sort_within_the_filter(
        self, port: LexicalPort, put: Put
    ) -> None:
        await put(DEPLOY, LUNCH, RUST, THEIRS)
        assert await port.top(T, Filter(), Sort.IMPORTANCE, 10) == [DEPLOY, RUST, LUNCH]
        ops = await port.top(T, Filter(tags=("project:ops",)), Sort.IMPORTANCE, 1)
        assert ops == [DEPLOY]
        assert await port.top(T, Filter(), Sort.IMPORTANCE, 0) == []

    async def test_get_answers_the_ids_it_holds(self, port: LexicalPort, put: Put) -> None:
        await put(DEPLOY, LUNCH, THEIRS)
        got = await port.get(T, [DEPLOY.id, uid(99), THEIRS.id, LUNCH.id])
        assert sorted(got, key=lambda m: m.id) == [DEPLOY, LUNCH]

    async def test_count_is_per_tenant_archived_included(self, port: LexicalPort, put: Put) -> None:
        await put(DEPLOY, LUNCH, THEIRS, ARCHIVED)
        counts = (await port.count(T), await port.count(OTHER), await port.count("nobody"))
        assert counts == (3, 1, 0)

    async def test_an_unreachable_service_is_unavailable(self, down: LexicalPort) -> None:
        with pytest.raises(Unavailable):
            await down.search(T, "deploy", Filter(), 5, timeout=5.0)


class TestFakeLexical(LexicalPortContract):
    @pytest.fixture
    def port(self, harness: Any) -> LexicalPort:
        lexical: LexicalPort = harness.lexical
        return lexical

    @pytest.fixture
    def put(self, harness: Any) -> Put:
        async def put(*memories: Memory) -> None:
            harness.world.put(*memories)

        return put

    @pytest.fixture
    def down(self, harness: Any) -> LexicalPort:
        harness.lexical.fail = Unavailable("lexical: connection refused")
        lexical: LexicalPort = harness.lexical
        return lexical


class TestLexicalClient(LexicalPortContract):
    @pytest.fixture
    def port(self, lexical_client: LexicalClient) -> LexicalPort:
        return lexical_client

    @pytest.fixture
    def put(self, lexical_client: LexicalClient) -> Put:
        async def put(*memories: Memory) -> None:
            for m in memories:
                await lexical_client.upsert(m.tenant, [m])

        return put

    @pytest.fixture
    def down(self, closed_channel: Any) -> LexicalPort:
        return LexicalClient(closed_channel)
