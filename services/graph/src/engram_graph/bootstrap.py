"""Builds the graph service from settings: the only module that picks an adapter."""

from __future__ import annotations

from engram_core.ports import GraphStore
from engram_graph.adapters.ladybug_store import LadybugGraphStore
from engram_graph.adapters.neo4j_store import Neo4jGraphStore
from engram_graph.config import Neo4jSettings, Settings
from engram_graph.service import GraphService, Limits


def neo4j_auth(cfg: Neo4jSettings) -> tuple[str, str] | None:
    """(user, password) with the password read from its file, or None (no auth)."""
    if cfg.password_file is None:
        return None
    return cfg.user, cfg.password_file.read_text(encoding="utf-8").rstrip("\r\n")


def build_store(settings: Settings) -> GraphStore:
    if settings.backend == "neo4j":
        cfg = settings.neo4j
        # Builds the driver only: it connects, and creates the schema, on the first call.
        return Neo4jGraphStore(
            cfg.uri,
            auth=neo4j_auth(cfg),
            database=cfg.database,
            query_timeout_ms=settings.query_timeout_ms,
            write_timeout_ms=settings.write_timeout_ms,
            connect_timeout_s=cfg.connect_timeout_s,
            acquire_timeout_s=cfg.acquire_timeout_s,
            max_retry_time_s=cfg.max_retry_time_s,
            pool_size=cfg.pool_size,
            schema_wait_s=cfg.schema_wait_s,
        )
    return LadybugGraphStore(
        settings.resolved_db_path(),
        query_timeout_ms=settings.query_timeout_ms,
        write_timeout_ms=settings.write_timeout_ms,
        readers=settings.readers,
        buffer_pool_bytes=settings.buffer_pool_mb * 1024 * 1024,
        threads_per_query=settings.threads_per_query,
        edge_cache_keys=settings.edge_cache_keys,
    )


def build_service(settings: Settings, store: GraphStore | None = None) -> GraphService:
    """The service over ``store``, or over the backend the settings name."""
    limits = Limits(
        max_batch=settings.max_batch,
        default_limit=settings.default_limit,
        max_limit=settings.max_limit,
        max_seeds=settings.max_seeds,
    )
    return GraphService(store if store is not None else build_store(settings), limits)
