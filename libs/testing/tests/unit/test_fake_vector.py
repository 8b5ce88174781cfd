"""The in-memory vector index passes the VectorIndex contract."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from engram_core.errors import Unavailable
from engram_core.model import Filter
from engram_testing.contracts.vector import DIM, T, VectorIndexContract, axis, mem
from engram_testing.fakes.vector import FakeVectorIndex


class TestFakeVectorIndex(VectorIndexContract):
    @pytest.fixture
    async def index(self) -> AsyncIterator[FakeVectorIndex]:
        index = FakeVectorIndex(dimension=DIM)
        yield index
        await index.close()


async def test_failure_makes_every_call_raise() -> None:
    index = FakeVectorIndex(dimension=DIM)
    await index.upsert(T, [(mem("a"), axis(0))])
    index.failure = Unavailable("vector is down")
    with pytest.raises(Unavailable):
        await index.search(T, axis(0), Filter(), 10)
    with pytest.raises(Unavailable):
        await index.count(T)
    index.failure = None
    assert [h.id for h in await index.search(T, axis(0), Filter(), 10)] == ["a"]


def test_default_dimension_is_the_model_dimension() -> None:
    assert FakeVectorIndex().dimension == 384
