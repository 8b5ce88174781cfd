"""The behaviour every store with generations (vector, lexical) must show, at the adapter level.

Subclass `VectorGenerationsContract` or `TextGenerationsContract` in a ``Test*`` class and
override two fixtures:

- ``store``: an object with the `engram_core.ports.Generations` methods plus
  ``async index(generation: str = "")`` (the index of a generation; "" = the live one; an
  unknown name → NotFound), over EMPTY storage (fresh per test), with generation "v1" live.
  Vector stores are built with `MODELS` (model → dimension) and `MODEL` as v1's model.
- ``reopen``: an async callable that closes ``store`` and opens a second instance over the
  same storage (what a restarted or second service instance sees); the fixture closes it.

The walk the rebuild takes is asserted here: create → fill the new generation → live reads
unaffected → swap → live reads see the new data → the old one still listed → drop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import pytest

from engram_core.errors import FailedPrecondition, InvalidArgument, NotFound
from engram_core.model import Filter, Generation, Memory
from engram_testing.contracts.common import OTHER, T, mem

MODEL = "model-a"
OTHER_MODEL = "model-b"
DIM = 8
MODELS = {MODEL: DIM, OTHER_MODEL: DIM // 2}
ALL = Filter(include_archived=True)

__all__ = [
    "DIM",
    "MODEL",
    "MODELS",
    "OTHER_MODEL",
    "GenerationStore",
    "Reopen",
    "TextGenerationsContract",
    "VectorGenerationsContract",
]


class GenerationStore(Protocol):
    async def create_generation(self, embedding_model: str) -> Generation: ...

    async def list_generations(self) -> list[Generation]: ...

    async def swap_generation(self, name: str) -> Generation: ...

    async def drop_generation(self, name: str) -> None: ...

    async def index(self, generation: str = "") -> Any: ...


Reopen = Callable[[], Awaitable[GenerationStore]]


def _live(generations: Sequence[Generation]) -> list[str]:
    return [g.name for g in generations if g.live]


def _by_name(generations: Sequence[Generation]) -> dict[str, Generation]:
    return {g.name: g for g in generations}


class GenerationsContract:
    """Abstract; see the module docstring. ``put``/``found`` write and search a generation."""

    @pytest.fixture
    def store(self) -> GenerationStore:
        raise NotImplementedError("a GenerationsContract subclass must provide `store`")

    @pytest.fixture
    def reopen(self) -> Reopen:
        raise NotImplementedError("a GenerationsContract subclass must provide `reopen`")

    async def put(self, index: Any, tenant: str, memories: Sequence[Memory]) -> None:
        raise NotImplementedError

    async def found(self, index: Any, tenant: str) -> list[str]:
        """Ids a search for the word "orchard" (vector: the direction of axis 0) returns."""
        raise NotImplementedError

    @staticmethod
    def orchard(id_: str, tenant: str = T, version: int = 1) -> Memory:
        return mem(id_, f"orchard {id_} fruit", tenant=tenant, version=version)

    # -- the rebuild walk --------------------------------------------------------------------

    async def test_a_new_store_has_one_live_generation(self, store: GenerationStore) -> None:
        [only] = await store.list_generations()
        assert (only.name, only.live, only.count) == ("v1", True, 0)

    async def test_create_makes_an_empty_generation_beside_the_live_one(
        self, store: GenerationStore
    ) -> None:
        await self.put(await store.index(), T, [self.orchard("old-1"), self.orchard("old-2")])
        created = await store.create_generation("")
        assert created.name != "v1"
        assert not created.live
        assert created.count == 0
        listed = _by_name(await store.list_generations())
        assert set(listed) == {"v1", created.name}
        assert listed["v1"].live
        assert listed["v1"].count == 2
        assert await (await store.index(created.name)).count(T) == 0
        second = await store.create_generation("")
        assert second.name not in {"v1", created.name}

    async def test_writes_to_a_generation_leave_live_reads_alone(
        self, store: GenerationStore
    ) -> None:
        await self.put(await store.index(), T, [self.orchard("old")])
        new = (await store.create_generation("")).name
        await self.put(await store.index(new), T, [self.orchard("fresh")])
        live = await store.index()
        assert await self.found(live, T) == ["old"]
        assert await live.get(T, ["fresh"]) == []
        assert await live.count(T) == 1
        staged = await store.index(new)
        assert [m.id for m in await staged.get(T, ["fresh", "old"])] == ["fresh"]
        assert await self.found(staged, T) == ["fresh"]

    async def test_swap_makes_the_new_generation_live_and_keeps_the_old(
        self, store: GenerationStore
    ) -> None:
        await self.put(await store.index(), T, [self.orchard("old")])
        new = (await store.create_generation("")).name
        await self.put(await store.index(new), T, [self.orchard("fresh"), self.orchard("fresh-2")])
        previous = await store.swap_generation(new)
        assert (previous.name, previous.live, previous.count) == ("v1", False, 1)
        assert sorted(await self.found(await store.index(), T)) == ["fresh", "fresh-2"]
        assert await (await store.index()).get(T, ["old"]) == []
        listed = _by_name(await store.list_generations())
        assert _live(list(listed.values())) == [new]
        assert (listed["v1"].live, listed["v1"].count) == (False, 1)
        assert listed[new].count == 2
        # The old one is still there, readable by name, until dropped; and can come back.
        assert await self.found(await store.index("v1"), T) == ["old"]
        back = await store.swap_generation("v1")
        assert back.name == new
        assert await self.found(await store.index(), T) == ["old"]

    async def test_live_writes_after_a_swap_land_in_the_new_generation(
        self, store: GenerationStore
    ) -> None:
        new = (await store.create_generation("")).name
        await store.swap_generation(new)
        await self.put(await store.index(), T, [self.orchard("after")])
        assert await (await store.index(new)).count(T) == 1
        assert await (await store.index("v1")).count(T) == 0

    async def test_drop_removes_an_old_generation(self, store: GenerationStore) -> None:
        await self.put(await store.index(), T, [self.orchard("old")])
        new = (await store.create_generation("")).name
        await self.put(await store.index(new), T, [self.orchard("fresh")])
        await store.swap_generation(new)
        await store.drop_generation("v1")
        assert [g.name for g in await store.list_generations()] == [new]
        with pytest.raises(NotFound):
            await store.index("v1")
        with pytest.raises(NotFound):
            await store.swap_generation("v1")
        assert await self.found(await store.index(), T) == ["fresh"]
        # A generation created after the drop starts empty, whatever its name.
        again = await store.create_generation("")
        assert await (await store.index(again.name)).count(T) == 0

    async def test_dropping_the_live_generation_is_refused(self, store: GenerationStore) -> None:
        await self.put(await store.index(), T, [self.orchard("kept")])
        await store.create_generation("")
        with pytest.raises(FailedPrecondition) as err:
            await store.drop_generation("v1")
        assert err.value.field == "name"
        assert _live(await store.list_generations()) == ["v1"]
        assert await self.found(await store.index(), T) == ["kept"]

    async def test_unknown_names_are_not_found(self, store: GenerationStore) -> None:
        for call in (
            lambda: store.swap_generation("v99"),
            lambda: store.drop_generation("v99"),
            lambda: store.index("v99"),
            lambda: store.swap_generation("../v1"),
        ):
            with pytest.raises(NotFound):
                await call()
        assert _live(await store.list_generations()) == ["v1"]

    async def test_tenants_stay_apart_inside_a_generation(self, store: GenerationStore) -> None:
        new = (await store.create_generation("")).name
        staged = await store.index(new)
        await self.put(staged, T, [self.orchard("shared-id"), self.orchard("mine")])
        await self.put(staged, OTHER, [self.orchard("shared-id", tenant=OTHER, version=7)])
        assert sorted(await self.found(staged, T)) == ["mine", "shared-id"]
        assert await self.found(staged, OTHER) == ["shared-id"]
        assert (await staged.count(T), await staged.count(OTHER)) == (2, 1)
        [theirs] = await staged.get(OTHER, ["shared-id", "mine"])
        assert (theirs.tenant, theirs.version) == (OTHER, 7)
        assert await staged.delete(OTHER, ["shared-id"], 8) == 1
        assert [m.id for m in await staged.get(T, ["shared-id"])] == ["shared-id"]
        assert _by_name(await store.list_generations())[new].count == 2

    async def test_version_guards_are_per_generation(self, store: GenerationStore) -> None:
        # A tombstone in the live generation says nothing about a rebuilt one: the replay
        # brings its own (newer) deletes.
        live = await store.index()
        await self.put(live, T, [self.orchard("x", version=3)])
        await live.delete(T, ["x"], 5)
        new = (await store.create_generation("")).name
        staged = await store.index(new)
        await self.put(staged, T, [self.orchard("x", version=2)])
        assert [m.version for m in await staged.get(T, ["x"])] == [2]
        assert await live.get(T, ["x"]) == []

    async def test_a_reopened_store_sees_the_swap(
        self, store: GenerationStore, reopen: Reopen
    ) -> None:
        await self.put(await store.index(), T, [self.orchard("old")])
        new = (await store.create_generation("")).name
        await self.put(await store.index(new), T, [self.orchard("fresh")])
        await store.swap_generation(new)
        second = await reopen()
        listed = _by_name(await second.list_generations())
        assert _live(list(listed.values())) == [new]
        assert (listed["v1"].count, listed[new].count) == (1, 1)
        assert await self.found(await second.index(), T) == ["fresh"]
        assert await self.found(await second.index("v1"), T) == ["old"]

    async def test_a_reopened_store_keeps_an_unswapped_generation(
        self, store: GenerationStore, reopen: Reopen
    ) -> None:
        new = (await store.create_generation("")).name
        await self.put(await store.index(new), T, [self.orchard("staged")])
        second = await reopen()
        assert _live(await second.list_generations()) == ["v1"]
        assert await self.found(await second.index(new), T) == ["staged"]
        assert await self.found(await second.index(), T) == []


def _axis(i: int, dim: int) -> list[float]:
    out = [0.0] * dim
    out[i % dim] = 1.0
    out[0] += 1.0  # every stored vector leans towards axis 0, the query
    return out


class VectorGenerationsContract(GenerationsContract):
    """Vector stores: each generation has its embedding model and dimension (`MODELS`)."""

    async def put(self, index: Any, tenant: str, memories: Sequence[Memory]) -> None:
        dim = index.dimension
        await index.upsert(tenant, [(m, _axis(k + 1, dim)) for k, m in enumerate(memories)])

    async def found(self, index: Any, tenant: str) -> list[str]:
        hits = await index.search(tenant, _axis(0, index.dimension), ALL, 50)
        return [h.id for h in hits]

    async def test_a_generation_records_its_model_and_dimension(
        self, store: GenerationStore
    ) -> None:
        [first] = await store.list_generations()
        assert first.embedding_model == MODEL
        same = await store.create_generation("")
        assert same.embedding_model == MODEL
        other = await store.create_generation(OTHER_MODEL)
        assert other.embedding_model == OTHER_MODEL
        assert (await store.index(other.name)).dimension == MODELS[OTHER_MODEL]
        assert (await store.index(same.name)).dimension == MODELS[MODEL]
        await self.put(await store.index(other.name), T, [self.orchard("small")])
        await store.swap_generation(other.name)
        assert (await store.index()).dimension == MODELS[OTHER_MODEL]
        assert await self.found(await store.index(), T) == ["small"]

    async def test_a_model_it_cannot_embed_with_is_invalid(self, store: GenerationStore) -> None:
        with pytest.raises(InvalidArgument) as err:
            await store.create_generation("no-such-model")
        assert err.value.field == "embedding_model"
        assert [g.name for g in await store.list_generations()] == ["v1"]

    async def test_a_reopened_store_keeps_each_generations_model(
        self, store: GenerationStore, reopen: Reopen
    ) -> None:
        other = await store.create_generation(OTHER_MODEL)
        await store.swap_generation(other.name)
        second = await reopen()
        models = {g.name: g.embedding_model for g in await second.list_generations()}
        assert models == {"v1": MODEL, other.name: OTHER_MODEL}
        assert (await second.index()).dimension == MODELS[OTHER_MODEL]


class TextGenerationsContract(GenerationsContract):
    """Text stores: the embedding model is ignored (recorded as "")."""

    async def put(self, index: Any, tenant: str, memories: Sequence[Memory]) -> None:
        await index.upsert(tenant, list(memories))

    async def found(self, index: Any, tenant: str) -> list[str]:
        return [h.id for h in await index.search(tenant, "orchard", ALL, 50)]

    async def test_the_model_is_ignored(self, store: GenerationStore) -> None:
        created = await store.create_generation("whatever-model")
        assert created.embedding_model == ""
