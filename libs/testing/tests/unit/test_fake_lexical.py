"""The in-memory text index passes the TextIndex contract."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from engram_core.errors import Unavailable
from engram_core.model import Filter
from engram_testing.contracts.lexical import TextIndexContract, mem
from engram_testing.fakes.lexical import FakeTextIndex, tokens


class TestFakeTextIndex(TextIndexContract):
    @pytest.fixture
    async def index(self) -> AsyncIterator[FakeTextIndex]:
        index = FakeTextIndex()
        yield index
        await index.close()


def test_tokens_stem_common_word_forms() -> None:
    assert tokens("Running runs RUN") == ["run", "run", "run"]
    assert tokens("databases database") == ["databas", "databas"]
    assert tokens("project:alpha snake_case") == ["project", "alpha", "snak", "case"]


async def test_failure_makes_every_call_raise() -> None:
    index = FakeTextIndex()
    await index.upsert("t", [mem("a", "text", tenant="t")])
    index.failure = Unavailable("lexical is down")
    with pytest.raises(Unavailable):
        await index.search("t", "text", Filter(), 10)
    index.failure = None
    assert [h.id for h in await index.search("t", "text", Filter(), 10)] == ["a"]
