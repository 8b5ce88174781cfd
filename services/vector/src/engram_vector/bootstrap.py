"""Builds the vector service from settings: the only module that knows the adapters."""

from __future__ import annotations

from qdrant_client import AsyncQdrantClient

from engram_core.ports import Cache, Embedder, VectorIndex
from engram_embed.factory import make_embedder
from engram_platform.coordination import open_cache
from engram_vector.adapters.edge import EdgeOptions, EdgeVectorIndex
from engram_vector.adapters.qdrant_server import QdrantOptions, QdrantVectorIndex
from engram_vector.config import Settings
from engram_vector.service import VectorService


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


async def build_index(settings: Settings) -> VectorIndex:
    if settings.backend == "edge":
        return await EdgeVectorIndex.open(settings.data_dir / "vector", edge_options(settings))
    q = settings.qdrant
    api_key = q.api_key_file.read_text(encoding="utf-8").strip() if q.api_key_file else None
    client = AsyncQdrantClient(
        url=q.url,
        api_key=api_key,
        prefer_grpc=q.prefer_grpc,
        grpc_port=q.grpc_port,
        timeout=q.timeout_s,
    )
    return await QdrantVectorIndex.open(client, qdrant_options(settings))


async def build_service(
    settings: Settings,
    *,
    index: VectorIndex | None = None,
    embedder: Embedder | None = None,
    cache: Cache | None = None,
) -> VectorService:
    """The service from settings; tests pass fakes for any of the three ports."""
    embedder = embedder or make_embedder(settings.embed)
    cache = cache or open_cache(settings.cache, max_entries=settings.query_cache_entries)
    index = index or await build_index(settings)
    try:
        return VectorService(index, embedder, cache, query_cache_ttl_s=settings.query_cache_ttl_s)
    except BaseException:
        await index.close()
        raise
