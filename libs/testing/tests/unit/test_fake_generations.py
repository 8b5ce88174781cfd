"""The in-memory generations pass the generations contracts (vector and text)."""

from __future__ import annotations

import pytest

from engram_testing.contracts.generations import (
    MODEL,
    MODELS,
    Reopen,
    TextGenerationsContract,
    VectorGenerationsContract,
)
from engram_testing.fakes.generations import (
    FakeGenerations,
    fake_text_generations,
    fake_vector_generations,
)
from engram_testing.fakes.lexical import FakeTextIndex
from engram_testing.fakes.vector import FakeVectorIndex


class TestFakeVectorGenerations(VectorGenerationsContract):
    @pytest.fixture
    def store(self) -> FakeGenerations[FakeVectorIndex]:
        return fake_vector_generations(MODELS, MODEL)

    @pytest.fixture
    def reopen(self, store: FakeGenerations[FakeVectorIndex]) -> Reopen:
        async def again() -> FakeGenerations[FakeVectorIndex]:
            return store.reopened()

        return again


class TestFakeTextGenerations(TextGenerationsContract):
    @pytest.fixture
    def store(self) -> FakeGenerations[FakeTextIndex]:
        return fake_text_generations()

    @pytest.fixture
    def reopen(self, store: FakeGenerations[FakeTextIndex]) -> Reopen:
        async def again() -> FakeGenerations[FakeTextIndex]:
            return store.reopened()

        return again
