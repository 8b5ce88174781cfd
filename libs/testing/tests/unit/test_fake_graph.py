"""The in-memory graph store passes the GraphStore contract."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from engram_core.errors import Unavailable
from engram_core.model import Filter
from engram_testing.contracts.graph import SARAH, GraphStoreContract, T, mem
from engram_testing.fakes.graph import FakeGraphStore


class TestFakeGraphStore(GraphStoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[FakeGraphStore]:
        store = FakeGraphStore()
        yield store
        await store.close()


async def test_failure_makes_every_call_raise() -> None:
    store = FakeGraphStore()
    await store.upsert(T, [(mem("a"), [SARAH])])
    store.failure = Unavailable("graph is down")
    with pytest.raises(Unavailable):
        await store.search(T, ["people:sarah"], [], Filter(), 10)
    with pytest.raises(Unavailable):
        await store.related(T, "a", 1, [], 10)
    store.failure = None
    assert [h.id for h in await store.search(T, ["people:sarah"], [], Filter(), 10)] == ["a"]
