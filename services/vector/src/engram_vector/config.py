"""Settings of the vector service (env prefix ENGRAM_VECTOR_, nested with ``__``).

E.g. ``ENGRAM_VECTOR_BACKEND=qdrant``, ``ENGRAM_VECTOR_QDRANT__URL=http://qdrant:6333``,
``ENGRAM_VECTOR_EDGE__OPTIMIZE_AFTER_WRITES=50000``, ``ENGRAM_VECTOR_EMBED__PROVIDER=hashing``,
``ENGRAM_VECTOR_CACHE__BACKEND=redis``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import SettingsConfigDict

from engram_embed.factory import EmbedSettings
from engram_platform.settings import CacheSettings, MetricsSettings, ServiceSettings, metrics_on


class HnswSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    m: int = Field(16, ge=4, le=128, description="HNSW edges per node.")
    ef_construct: int = Field(
        100, ge=4, description="HNSW candidates while building (higher: better graph, slower)."
    )
    ef: int | None = Field(
        None, ge=1, description="HNSW candidates while searching; none = Qdrant's default."
    )


class EdgeSettings(BaseModel):
    """The embedded backend: a Qdrant Edge shard under ``data_dir/vector``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hnsw: HnswSettings = Field(default_factory=HnswSettings, description="HNSW parameters.")
    full_scan_threshold_kb: int = Field(
        10_000,
        ge=1,
        description="Below this many KB of vectors matching a filter, search scans them exactly.",
    )
    indexing_threshold_kb: int | None = Field(
        None, ge=1, description="Segments above this many KB get HNSW; none = Qdrant's default."
    )
    indexing_threads: int = Field(
        1,
        ge=0,
        description="Threads building HNSW in the optimizer process; 0 = all cores. One "
        "leaves the other core to serving on a small machine.",
    )
    optimize: bool = Field(
        True, description="Rebuild HNSW in the background (a child process) as data grows."
    )
    optimize_after_writes: int = Field(
        20_000, ge=1, description="Rebuild once this many points were written since the last."
    )
    optimize_min_writes: int = Field(
        1_000, ge=1, description="Rebuild when idle only if at least this many were written."
    )
    optimize_idle_s: float = Field(
        30.0, gt=0, description="Seconds without writes after which a rebuild may start."
    )


class QdrantSettings(BaseModel):
    """The production backend: a Qdrant server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field("http://127.0.0.1:6333", description="Qdrant REST URL.")
    api_key_file: Path | None = Field(
        None, description="File holding the Qdrant API key; none sends no key."
    )
    prefer_grpc: bool = Field(True, description="Talk to Qdrant over gRPC instead of REST.")
    grpc_port: int = Field(6334, ge=1, le=65535, description="Qdrant gRPC port.")
    timeout_s: int = Field(10, ge=1, description="Timeout of one Qdrant request, seconds.")
    collection: str = Field("engram_memories", description="Collection holding every tenant.")
    hnsw: HnswSettings = Field(default_factory=HnswSettings, description="HNSW parameters.")
    per_tenant_hnsw: bool = Field(
        True,
        description="Build one HNSW graph per tenant (m=0, payload_m=hnsw.m), as every "
        "query filters on one tenant.",
    )
    quantization: Literal["none", "scalar"] = Field(
        "none", description="scalar: int8 vectors in RAM (4x smaller), rescored from originals."
    )
    on_disk: bool = Field(False, description="Keep original vectors on disk (mmap).")
    shard_number: int | None = Field(None, ge=1, description="Shards of a new collection.")
    replication_factor: int | None = Field(
        None, ge=1, description="Replicas of each shard of a new collection."
    )
    replace_legacy_collection: bool = Field(
        False,
        description="A collection named `collection` itself (made before generations) is "
        "generation v1; swapping away from it must delete it first (not atomic, not kept). "
        "Off: such a swap is refused.",
    )
    generations_refresh_s: float = Field(
        5.0,
        gt=0,
        description="Seconds a replica trusts its copy of the generation list (live model "
        "and dimension) before reading it again from Qdrant.",
    )


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_VECTOR_", env_nested_delimiter="__", extra="ignore"
    )
    metrics: MetricsSettings = metrics_on(9465)

    backend: Literal["edge", "qdrant"] = Field(
        "edge", description="edge: in-process Qdrant Edge shard; qdrant: a Qdrant server."
    )
    dimension: int = Field(
        384,
        ge=2,
        le=65_536,
        description="Vector size of generation v1 when no generation was recorded yet "
        "(later ones take their model's); must match the embedding model.",
    )
    edge: EdgeSettings = Field(default_factory=EdgeSettings, description="Edge backend.")
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings, description="Server backend.")
    embed: EmbedSettings = Field(
        default_factory=EmbedSettings,
        description="Embedder for query texts; its model is generation v1's until a "
        "generation list is recorded.",
    )
    next_embed: EmbedSettings | None = Field(
        None,
        description="A second embedder, for a rebuild onto another model: CreateGeneration "
        "accepts its model, and Search embeds with it once that generation is live.",
    )
    query_cache_entries: int = Field(
        10_000, ge=1, description="Query embeddings kept by the in-process cache."
    )
    cache: CacheSettings = Field(
        default_factory=CacheSettings,
        description="Where query embeddings are cached (memory: this replica's own; redis: "
        "shared).",
    )
    query_cache_ttl_s: float = Field(
        3600.0, gt=0, description="Seconds a cached query embedding lives."
    )
