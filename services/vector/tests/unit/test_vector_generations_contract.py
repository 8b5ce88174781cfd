"""Generations on Qdrant Edge (directories + pointer file, through the bootstrap factory) and
on qdrant-client (collections + alias, local mode) pass the generations contract; plus what
only each backend has: a data directory or collection made before generations is v1."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from engram_core.errors import FailedPrecondition
from engram_core.model import Memory
from engram_platform.generation_dirs import DirGenerations
from engram_testing.contracts.generations import (
    DIM,
    MODEL,
    MODELS,
    OTHER_MODEL,
    Reopen,
    VectorGenerationsContract,
)
from engram_vector import bootstrap
from engram_vector.adapters.edge import EdgeOptions, EdgeVectorIndex
from engram_vector.adapters.qdrant_generations import QdrantGenerations
from engram_vector.adapters.qdrant_server import QdrantOptions, QdrantVectorIndex
from engram_vector.config import EdgeSettings, Settings

T = "tenant-a"
_SHM = Path("/dev/shm")


@dataclass(frozen=True)
class NamedModel:
    """Only what the generations read of an embedder: its name and dimension."""

    model_name: str
    dimension: int


EMBEDDERS = [NamedModel(m, d) for m, d in MODELS.items()]


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    if not _SHM.is_dir():
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=_SHM, prefix="engram-vgen-") as d:
        yield Path(d)


def _settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, dimension=DIM, edge=EdgeSettings(optimize=False))


async def _edge(data_dir: Path) -> DirGenerations[EdgeVectorIndex]:
    store = await bootstrap.build_generations(_settings(data_dir), EMBEDDERS)  # type: ignore[arg-type]
    assert isinstance(store, DirGenerations)
    return store


class TestEdgeGenerations(VectorGenerationsContract):
    @pytest.fixture
    async def store(self, fast_dir: Path) -> AsyncIterator[DirGenerations[EdgeVectorIndex]]:
        store = await _edge(fast_dir)
        yield store
        await store.close()

    @pytest.fixture
    async def reopen(
        self, store: DirGenerations[EdgeVectorIndex], fast_dir: Path
    ) -> AsyncIterator[Reopen]:
        opened: list[DirGenerations[EdgeVectorIndex]] = []

        async def again() -> DirGenerations[EdgeVectorIndex]:
            await store.close()
            opened.append(await _edge(fast_dir))
            return opened[-1]

        yield again
        for s in opened:
            await s.close()


def _memory(id_: str) -> Memory:
    return Memory(id=id_, tenant=T, content=f"memory {id_}", version=1)


@pytest.mark.parametrize(("written_with", "v1_model"), [("", MODEL), (OTHER_MODEL, OTHER_MODEL)])
async def test_an_edge_directory_from_before_generations_is_v1(
    fast_dir: Path, written_with: str, v1_model: str
) -> None:
    """v1 takes the model its stored memories name (the configured one when they name none),
    and the registry is written at that first start, so the store names its model after."""
    legacy = await EdgeVectorIndex.open(
        fast_dir / "vector", EdgeOptions(dimension=DIM, optimize_enabled=False)
    )
    old = replace(_memory("old"), embedding_model=written_with)
    await legacy.upsert(T, [(old, [1.0] + [0.0] * (DIM - 1))])
    await legacy.close()
    store = await _edge(fast_dir)
    [v1] = await store.list_generations()
    assert (v1.name, v1.live, v1.count, v1.embedding_model) == ("v1", True, 1, v1_model)
    assert f'"{v1_model}"' in (fast_dir / "vector-generations.json").read_text()
    created = await store.create_generation(MODEL if v1_model == OTHER_MODEL else OTHER_MODEL)
    assert (fast_dir / f"vector-{created.name}").is_dir()
    await store.close()


async def test_an_edge_directory_left_by_a_crash_is_removed(fast_dir: Path) -> None:
    store = await _edge(fast_dir)
    await store.close()
    (fast_dir / "vector-v7").mkdir()
    store = await _edge(fast_dir)
    assert not (fast_dir / "vector-v7").exists()
    assert [g.name for g in await store.list_generations()] == ["v1"]
    await store.close()


async def _qdrant(path: Path, *, replace_legacy: bool = False) -> QdrantGenerations:
    client = AsyncQdrantClient(path=str(path))
    return await QdrantGenerations.open(
        client,
        QdrantOptions(collection="memories", dimension=DIM),
        MODELS,
        MODEL,
        replace_legacy=replace_legacy,
    )


class TestQdrantGenerations(VectorGenerationsContract):
    """Local mode on disk (so a second client can reopen it): aliases work there too."""

    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[QdrantGenerations]:
        store = await _qdrant(tmp_path / "qdrant")
        yield store
        await store.close()

    @pytest.fixture
    async def reopen(self, store: QdrantGenerations, tmp_path: Path) -> AsyncIterator[Reopen]:
        opened: list[QdrantGenerations] = []

        async def again() -> QdrantGenerations:
            await store.close()
            opened.append(await _qdrant(tmp_path / "qdrant"))
            return opened[-1]

        yield again
        for s in opened:
            await s.close()


async def test_qdrant_live_reads_go_through_the_alias(tmp_path: Path) -> None:
    store = await _qdrant(tmp_path / "qdrant")
    aliases = {a.alias_name: a.collection_name for a in (await store._client.get_aliases()).aliases}
    assert aliases == {"memories": "memories-v1"}
    created = await store.create_generation("")
    await store.swap_generation(created.name)
    aliases = {a.alias_name: a.collection_name for a in (await store._client.get_aliases()).aliases}
    assert aliases == {"memories": f"memories-{created.name}"}
    await store.close()


async def test_a_qdrant_collection_from_before_generations_is_v1(tmp_path: Path) -> None:
    client = AsyncQdrantClient(path=str(tmp_path / "qdrant"))
    legacy = await QdrantVectorIndex.open(
        client, QdrantOptions(collection="memories", dimension=DIM)
    )
    # Written with another model than the one configured now: v1 is that model's.
    old = replace(_memory("old"), embedding_model=OTHER_MODEL)
    await legacy.upsert(T, [(old, [1.0] + [0.0] * (DIM - 1))])
    await legacy.close()
    store = await _qdrant(tmp_path / "qdrant")
    [v1] = await store.list_generations()
    assert (v1.name, v1.live, v1.count, v1.embedding_model) == ("v1", True, 1, OTHER_MODEL)
    created = await store.create_generation(MODEL)
    with pytest.raises(FailedPrecondition) as err:
        await store.swap_generation(created.name)
    assert err.value.field == "name"
    assert [m.id for m in await (await store.index()).get(T, ["old"])] == ["old"]
    await store.close()

    # Allowed to replace it: the legacy collection goes, the alias takes its name.
    store = await _qdrant(tmp_path / "qdrant", replace_legacy=True)
    await (await store.index(created.name)).upsert(T, [(_memory("new"), [1.0] + [0.0] * (DIM - 1))])
    previous = await store.swap_generation(created.name)
    assert (previous.name, previous.count) == ("v1", 1)
    assert [g.name for g in await store.list_generations()] == [created.name]
    assert [m.id for m in await (await store.index()).get(T, ["new", "old"])] == ["new"]
    await store.close()
