"""In-memory store generations for unit tests: one fake index per generation, the shared
rules of `engram_core.generations`. `reopened()` gives a second instance over the same state,
as a restarted service would see it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from engram_core.errors import EngramError
from engram_core.generations import FIRST, GenerationRecord, Registry
from engram_core.model import Generation, utcnow
from engram_platform.generation_dirs import model_of
from engram_testing.fakes.common import FakeStore
from engram_testing.fakes.lexical import FakeTextIndex
from engram_testing.fakes.vector import FakeVectorIndex

I = TypeVar("I", bound=FakeStore[Any])  # noqa: E741 - the index type


@dataclass
class _State(Generic[I]):
    """What survives a restart: the registry (the pointer file) and every generation's data."""

    registry: Registry
    indexes: dict[str, I] = field(default_factory=dict)


class FakeGenerations(Generic[I]):
    """``models`` maps each embedding model the service could build to its dimension (None
    for lexical: the model is ignored). Set ``failure`` to make every call raise it."""

    def __init__(
        self,
        make: Callable[[GenerationRecord], I],
        models: Mapping[str, int] | None,
        state: _State[I],
    ) -> None:
        self._make = make
        self._models = None if models is None else dict(models)
        self._state = state
        self.failure: EngramError | None = None

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def reopened(self) -> FakeGenerations[I]:
        return FakeGenerations(self._make, self._models, self._state)

    @property
    def registry(self) -> Registry:
        return self._state.registry

    async def record(self, generation: str = "", *, fresh: bool = False) -> GenerationRecord:
        return self._state.registry.get(generation)

    async def index(self, generation: str = "") -> I:
        self._check()
        name = self._state.registry.get(generation).name
        if name not in self._state.indexes:
            self._state.indexes[name] = self._make(self._state.registry.get(name))
        return self._state.indexes[name]

    async def _public(self, record: GenerationRecord) -> Generation:
        count = await (await self.index(record.name)).count_all()
        return record.public(live=record.name == self._state.registry.live, count=count)

    async def create_generation(self, embedding_model: str) -> Generation:
        self._check()
        registry = self._state.registry
        model, dimension = model_of(self._models, embedding_model, registry.live_record)
        self._state.registry, record = registry.created(model, dimension, utcnow())
        return await self._public(record)

    async def list_generations(self) -> list[Generation]:
        self._check()
        return [await self._public(r) for r in self._state.registry.records]

    async def swap_generation(self, name: str) -> Generation:
        self._check()
        previous = self._state.registry.live_record
        self._state.registry = self._state.registry.swapped(name)
        return await self._public(previous)

    async def drop_generation(self, name: str) -> None:
        self._check()
        self._state.registry = self._state.registry.dropped(name)
        self._state.indexes.pop(name, None)

    async def close(self) -> None:
        return None


def fake_vector_generations(
    models: Mapping[str, int], default_model: str
) -> FakeGenerations[FakeVectorIndex]:
    """Generation v1 embeds with ``default_model``; ``models`` are those it could switch to."""
    first = GenerationRecord(FIRST, default_model, models[default_model], utcnow())
    return FakeGenerations(
        lambda r: FakeVectorIndex(dimension=r.dimension), models, _State(Registry.initial(first))
    )


def fake_text_generations() -> FakeGenerations[FakeTextIndex]:
    first = GenerationRecord(FIRST, "", 0, utcnow())
    return FakeGenerations(lambda r: FakeTextIndex(), None, _State(Registry.initial(first)))
