"""Settings from the environment, and bootstrap turning them into a working service."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from qdrant_client import AsyncQdrantClient

from engram_core.model import Filter, Memory
from engram_embed.hashing import HashingEmbedder
from engram_vector import bootstrap
from engram_vector.adapters.edge import EdgeVectorIndex
from engram_vector.adapters.qdrant_server import QdrantVectorIndex
from engram_vector.config import EdgeSettings, HnswSettings, QdrantSettings, Settings


def test_every_setting_is_described() -> None:
    models: list[type[BaseModel]] = [Settings, EdgeSettings, QdrantSettings, HnswSettings]
    for model in models:
        for name, f in model.model_fields.items():
            assert f.description, f"{model.__name__}.{name}"


def test_env_reaches_nested_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENGRAM_VECTOR_BACKEND", "qdrant")
    monkeypatch.setenv("ENGRAM_VECTOR_PORT", "50070")
    monkeypatch.setenv("ENGRAM_VECTOR_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ENGRAM_VECTOR_EDGE__OPTIMIZE_AFTER_WRITES", "500")
    monkeypatch.setenv("ENGRAM_VECTOR_EDGE__HNSW__EF", "64")
    monkeypatch.setenv("ENGRAM_VECTOR_QDRANT__URL", "http://qdrant:6333")
    monkeypatch.setenv("ENGRAM_VECTOR_EMBED__PROVIDER", "hashing")
    s = Settings()
    assert (s.backend, s.port, s.data_dir) == ("qdrant", 50070, tmp_path)
    assert (s.edge.optimize_after_writes, s.edge.hnsw.ef) == (500, 64)
    assert s.qdrant.url == "http://qdrant:6333"
    assert s.embed.provider == "hashing"
    options = bootstrap.edge_options(s)
    assert (options.optimize_after_writes, options.hnsw_ef, options.dimension) == (500, 64, 384)


def test_unknown_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_VECTOR_BACKEND", "faiss")
    with pytest.raises(ValueError, match="backend"):
        Settings()


async def test_bootstrap_builds_the_edge_backend_under_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, dimension=16)
    settings = settings.model_copy(
        update={"embed": settings.embed.model_copy(update={"provider": "hashing", "dimension": 16})}
    )
    service = await bootstrap.build_service(settings)
    try:
        embedder = HashingEmbedder(16)
        memory = Memory(id="00000000-0000-0000-0000-000000000001", tenant="t", content="hello")
        await service.upsert("t", [(memory, embedder.embed_one("hello"))])
        [hit] = await service.search("t", Filter(), 5, query="hello")
        assert hit.id == memory.id
        assert (tmp_path / "vector" / "CURRENT").is_file()
        assert isinstance(await service._generations.index(), EdgeVectorIndex)
    finally:
        await service.close()


async def test_bootstrap_builds_the_qdrant_backend(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key_file = tmp_path / "qdrant.key"
    key_file.write_text("s3cret\n")
    seen: dict[str, Any] = {}

    def fake_client(**kwargs: Any) -> AsyncQdrantClient:
        seen.update(kwargs)
        return AsyncQdrantClient(location=":memory:")

    monkeypatch.setattr(bootstrap, "AsyncQdrantClient", fake_client)
    settings = Settings(
        backend="qdrant",
        dimension=16,
        qdrant=QdrantSettings(url="http://qdrant:6333", api_key_file=key_file, collection="c1"),
    )
    generations = await bootstrap.build_generations(settings, [HashingEmbedder(16)])
    try:
        index = await generations.index()
        assert isinstance(index, QdrantVectorIndex)
        assert index.dimension == 16
        assert seen["url"] == "http://qdrant:6333"
        assert seen["api_key"] == "s3cret"
        assert seen["prefer_grpc"] is True
    finally:
        await generations.close()


async def test_a_model_of_another_dimension_stops_the_start(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, dimension=16)
    with pytest.raises(ValueError, match="8-d vectors, the index holds 16-d"):
        await bootstrap.build_service(settings, embedder=HashingEmbedder(8))
    # The index it opened was closed again: the directory is free.
    generations = await bootstrap.build_generations(settings, [HashingEmbedder(16)])
    await generations.close()


async def test_a_store_names_the_model_its_vectors_were_made_with(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, dimension=16)
    service = await bootstrap.build_service(settings, embedder=HashingEmbedder(16))
    try:
        assert (await service._generations.record()).embedding_model == "hashing-16"
    finally:
        await service.close()
    assert "hashing-16" in (tmp_path / "vector-generations.json").read_text()
    other = _Renamed(HashingEmbedder(16), "another-model")
    with pytest.raises(ValueError, match=r"holds vectors of 'hashing-16'.*another-model"):
        await bootstrap.build_service(settings, embedder=other)


async def test_a_store_made_before_registries_takes_the_model_of_its_vectors(
    tmp_path: Path,
) -> None:
    """A store with memories and no registry (made before stores recorded their model) is
    v1 of the model its memories were embedded with, not of whatever is configured now."""
    settings = Settings(data_dir=tmp_path, dimension=16)
    embedder = HashingEmbedder(16)
    service = await bootstrap.build_service(settings, embedder=embedder)
    memory = Memory(
        id="00000000-0000-0000-0000-000000000001",
        tenant="t",
        content="hello",
        embedding_model=embedder.model_name,
    )
    try:
        await service.upsert("t", [(memory, embedder.embed_one("hello"))])
    finally:
        await service.close()
    (tmp_path / "vector-generations.json").unlink()
    with pytest.raises(ValueError, match="holds vectors of 'hashing-16'"):
        await bootstrap.build_service(settings, embedder=_Renamed(embedder, "another-model"))
    # An empty store without a registry is the configured model's.
    empty = Settings(data_dir=tmp_path / "empty", dimension=16)
    service = await bootstrap.build_service(empty, embedder=_Renamed(embedder, "another-model"))
    try:
        assert (await service._generations.record()).embedding_model == "another-model"
    finally:
        await service.close()


class _Renamed:
    """An embedder under another model name (as if the configured model had changed)."""

    def __init__(self, inner: HashingEmbedder, name: str) -> None:
        self._inner = inner
        self.model_name = name
        self.dimension = inner.dimension
        self.query_instruction = ""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._inner.embed(texts)
