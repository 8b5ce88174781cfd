"""Builds the graph service from settings: the only module that picks an adapter."""

from __future__ import annotations

from engram_core.ports import GraphStore
from engram_graph.adapters.ladybug_store import LadybugGraphStore
from engram_graph.config import Settings
from engram_graph.service import GraphService, Limits


def build_store(settings: Settings) -> GraphStore:
    # `backend` has one value until Neo4j arrives; the Literal type rejects any other.
    return LadybugGraphStore(
        settings.resolved_db_path(),
        query_timeout_ms=settings.query_timeout_ms,
        write_timeout_ms=settings.write_timeout_ms,
        readers=settings.readers,
        buffer_pool_bytes=settings.buffer_pool_mb * 1024 * 1024,
        threads_per_query=settings.threads_per_query,
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
