"""Settings of the graph service (env prefix ENGRAM_GRAPH_, nested with ``__``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from engram_platform.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_GRAPH_", env_nested_delimiter="__", extra="ignore"
    )

    backend: Literal["ladybug"] = Field(
        "ladybug", description="Graph backend: ladybug in-process (Neo4j comes with #3)."
    )
    db_path: Path | None = Field(
        None, description="The ladybug database file; default <data_dir>/graph/graph.lbug."
    )
    query_timeout_ms: int = Field(
        5_000, ge=1, description="Timeout of one read query (Related, Search, Get...)."
    )
    write_timeout_ms: int = Field(
        60_000, ge=1, description="Timeout of one write statement inside a batch."
    )
    readers: int = Field(2, ge=1, le=32, description="Read connections (and read threads).")
    buffer_pool_mb: int = Field(
        256, ge=16, description="ladybug buffer pool in MB (its own default is 80% of RAM)."
    )
    threads_per_query: int = Field(
        1, ge=0, le=64, description="Threads one query may use; 0 lets ladybug use every core."
    )
    max_batch: int = Field(
        1000, ge=1, description="Most memories, ids, relations or updates one request may carry."
    )
    default_limit: int = Field(10, ge=1, description="Hits returned when a request gives limit 0.")
    max_limit: int = Field(1000, ge=1, description="Largest limit Related or Search may ask for.")
    max_seeds: int = Field(
        64, ge=1, description="Most entity keys, and most keywords, one Search may carry."
    )

    def resolved_db_path(self) -> Path:
        return self.db_path if self.db_path is not None else self.data_dir / "graph" / "graph.lbug"
