"""Settings of the graph service (env prefix ENGRAM_GRAPH_, nested with ``__``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import SettingsConfigDict

from engram_platform.settings import STORE_MAX_ITEMS, MetricsSettings, ServiceSettings, metrics_on


class Neo4jSettings(BaseModel):
    """Where the Neo4j server is (``backend = "neo4j"``); env ``ENGRAM_GRAPH_NEO4J__<NAME>``.

    The per-transaction timeouts are the service's ``query_timeout_ms`` (reads) and
    ``write_timeout_ms`` (writes), shared with the embedded backend.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str = Field(
        "bolt://127.0.0.1:7687",
        description="bolt:// (one server) or neo4j:// (routing, a cluster); +s for TLS.",
    )
    user: str = Field("neo4j", description="User name, when password_file is set.")
    password_file: Path | None = Field(
        None, description="File holding the password (trailing newline ignored); none = no auth."
    )
    database: str = Field("neo4j", description="Database name (Community has one: neo4j).")
    connect_timeout_s: float = Field(5.0, gt=0, description="Timeout of opening one connection.")
    acquire_timeout_s: float = Field(
        5.0, gt=0, description="Longest wait for a pooled connection (connecting included)."
    )
    max_retry_time_s: float = Field(
        5.0,
        ge=0,
        description="How long a transaction is retried on transient errors (deadlock, leader "
        "switch, lost connection) before the call fails UNAVAILABLE.",
    )
    pool_size: int = Field(32, ge=1, le=1000, description="Most connections to the server.")
    schema_wait_s: float = Field(
        60.0, gt=0, description="How long the first call waits for new indexes to come online."
    )


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_GRAPH_", env_nested_delimiter="__", extra="ignore"
    )
    metrics: MetricsSettings = metrics_on(9467)

    backend: Literal["ladybug", "neo4j"] = Field(
        "ladybug", description="Graph backend: ladybug in-process, or a Neo4j 5 server."
    )
    neo4j: Neo4jSettings = Field(
        default_factory=Neo4jSettings, description="The Neo4j server, when backend is neo4j."
    )
    db_path: Path | None = Field(
        None, description="The ladybug database file; default <data_dir>/graph/graph.lbug."
    )
    query_timeout_ms: int = Field(
        5_000,
        ge=1,
        description="Timeout of one read (Related, Search, Get...): a query on ladybug, a "
        "transaction on Neo4j.",
    )
    write_timeout_ms: int = Field(
        60_000,
        ge=1,
        description="Timeout of one write: a statement inside a batch on ladybug, the whole "
        "batch's transaction on Neo4j.",
    )
    readers: int = Field(2, ge=1, le=32, description="Read connections (and read threads).")
    buffer_pool_mb: int = Field(
        256, ge=16, description="ladybug buffer pool in MB (its own default is 80% of RAM)."
    )
    threads_per_query: int = Field(
        1, ge=0, le=64, description="Threads one query may use; 0 lets ladybug use every core."
    )
    edge_cache_keys: int = Field(
        50_000,
        ge=0,
        description="Memories whose relations ladybug's store keeps in memory between "
        "lookups (invalidated by its own writes: one process owns the file); 0 = off.",
    )
    max_batch: int = Field(
        STORE_MAX_ITEMS,
        ge=1,
        description="Most memories, ids, relations or updates one request may carry.",
    )
    default_limit: int = Field(10, ge=1, description="Hits returned when a request gives limit 0.")
    max_limit: int = Field(1000, ge=1, description="Largest limit Related or Search may ask for.")
    max_seeds: int = Field(
        64, ge=1, description="Most entity keys, and most keywords, one Search may carry."
    )

    def resolved_db_path(self) -> Path:
        return self.db_path if self.db_path is not None else self.data_dir / "graph" / "graph.lbug"
