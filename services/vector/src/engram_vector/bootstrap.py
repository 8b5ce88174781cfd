"""Builds the vector service from settings: the only module that knows the adapters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from qdrant_client import AsyncQdrantClient

from engram_core.generations import FIRST, GenerationRecord
from engram_core.model import utcnow
from engram_core.ports import Cache, Embedder
from engram_embed.factory import make_embedder
from engram_platform.coordination import open_cache
from engram_platform.generation_dirs import DirGenerations
from engram_vector.adapters.edge import EdgeOptions, EdgeVectorIndex
from engram_vector.adapters.qdrant_generations import QdrantGenerations
from engram_vector.adapters.qdrant_server import QdrantOptions
from engram_vector.config import Settings
from engram_vector.service import VectorService
from engram_vector.service.vector_service import VectorGenerations


def edge_options(settings: Settings) -> EdgeOptions:
    e = settings.edge
    return EdgeOptions(
        dimension=settings.dimension,
        hnsw_m=e.hnsw.m,
        hnsw_ef_construct=e.hnsw.ef_construct,
        hnsw_ef=e.hnsw.ef,
        full_scan_threshold_kb=e.full_scan_threshold_kb,
        indexing_threshold_kb=e.indexing_threshold_kb,
        indexing_threads=e.indexing_threads,
        optimize_enabled=e.optimize,
        optimize_after_writes=e.optimize_after_writes,
        optimize_min_writes=e.optimize_min_writes,
        optimize_idle_s=e.optimize_idle_s,
    )


def qdrant_options(settings: Settings) -> QdrantOptions:
    q = settings.qdrant
    return QdrantOptions(
        collection=q.collection,
        dimension=settings.dimension,
        hnsw_m=q.hnsw.m,
        hnsw_ef_construct=q.hnsw.ef_construct,
        hnsw_ef=q.hnsw.ef,
        per_tenant_hnsw=q.per_tenant_hnsw,
        quantization=q.quantization,
        on_disk=q.on_disk,
        shard_number=q.shard_number,
        replication_factor=q.replication_factor,
    )


def build_embedders(
    settings: Settings, embedder: Embedder | None = None, next_embedder: Embedder | None = None
) -> list[Embedder]:
    """The ``embed`` embedder first (generation v1's model when none is recorded), then the
    ``next_embed`` one when configured."""
    out = [embedder or make_embedder(settings.embed)]
    if next_embedder is None and settings.next_embed is not None:
        next_embedder = make_embedder(settings.next_embed)
    if next_embedder is not None:
        out.append(next_embedder)
    return out


def _models(embedders: Sequence[Embedder]) -> dict[str, int]:
    return {e.model_name: e.dimension for e in embedders}


async def build_generations(settings: Settings, embedders: Sequence[Embedder]) -> VectorGenerations:
    """The configured backend's generations; the live one is opened (a start-up check)."""
    default_model = embedders[0].model_name
    if settings.backend == "edge":
        first = GenerationRecord(FIRST, default_model, settings.dimension, utcnow())
        options = edge_options(settings)

        async def open_index(path: Path | None, record: GenerationRecord) -> EdgeVectorIndex:
            assert path is not None  # Edge generations always live on disk
            return await EdgeVectorIndex.open(path, replace(options, dimension=record.dimension))

        edge = DirGenerations(settings.data_dir / "vector", first, open_index, _models(embedders))
        try:
            await edge.remove_orphans()
            live = await edge.index()
            if not edge.recorded:  # made before stores recorded their model: ask a vector's
                await edge.record_first(await live.stored_model() or default_model)
        except BaseException:
            await edge.close()
            raise
        return edge
    q = settings.qdrant
    api_key = q.api_key_file.read_text(encoding="utf-8").strip() if q.api_key_file else None
    client = AsyncQdrantClient(
        url=q.url,
        api_key=api_key,
        prefer_grpc=q.prefer_grpc,
        grpc_port=q.grpc_port,
        timeout=q.timeout_s,
    )
    try:
        return await QdrantGenerations.open(
            client,
            qdrant_options(settings),
            _models(embedders),
            default_model,
            refresh_s=q.generations_refresh_s,
            replace_legacy=q.replace_legacy_collection,
        )
    except BaseException:
        await client.close()
        raise


async def build_service(
    settings: Settings,
    *,
    generations: VectorGenerations | None = None,
    embedder: Embedder | None = None,
    next_embedder: Embedder | None = None,
    cache: Cache | None = None,
) -> VectorService:
    """The service from settings; tests pass fakes for the ports (``generations``: a store
    of generations, e.g. engram_testing's fake)."""
    embedders = build_embedders(settings, embedder, next_embedder)
    cache = cache or open_cache(settings.cache, max_entries=settings.query_cache_entries)
    generations = generations or await build_generations(settings, embedders)
    service = VectorService(
        generations, embedders, cache, query_cache_ttl_s=settings.query_cache_ttl_s
    )
    try:
        await service.check_live_model()
    except BaseException:
        await service.close()
        raise
    return service
