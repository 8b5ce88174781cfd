"""Settings of the lexical service (env prefix ENGRAM_LEXICAL_, nested with ``__``).

E.g. ``ENGRAM_LEXICAL_BACKEND=opensearch``,
``ENGRAM_LEXICAL_OPENSEARCH__URL=https://search-0:9200,https://search-1:9200``,
``ENGRAM_LEXICAL_OPENSEARCH__PASSWORD_FILE=/run/secrets/opensearch``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic_settings import SettingsConfigDict

from engram_core.search_text import METADATA_FIELDS
from engram_platform.settings import STORE_MAX_ITEMS, MetricsSettings, ServiceSettings, metrics_on


class OpenSearchSettings(BaseModel):
    """The production backend: an OpenSearch cluster (``ENGRAM_LEXICAL_OPENSEARCH__*``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(
        "http://127.0.0.1:9200",
        description="OpenSearch node URL(s), comma-separated; https:// turns TLS on.",
    )
    username: str | None = Field(None, description="HTTP basic user; none sends no credentials.")
    password_file: Path | None = Field(
        None, description="File holding the password of `username` (never the secret itself)."
    )
    verify_certs: bool = Field(True, description="Check the server's TLS certificate.")
    ca_file: Path | None = Field(
        None, description="CA bundle to check the certificate with; none uses the system's."
    )
    timeout_s: float = Field(
        10.0, gt=0, description="Deadline of one request (each retry gets its own)."
    )
    max_retries: int = Field(
        3,
        ge=0,
        le=10,
        description="Retries of a request that failed transiently (connection, timeout, 429, "
        "502-504), with jittered exponential backoff; then UNAVAILABLE.",
    )
    retry_backoff_s: float = Field(
        0.2, gt=0, description="Backoff ceiling of the first retry; doubles with each retry."
    )
    pool_size: int = Field(10, ge=1, le=1000, description="HTTP connections kept per node.")
    index_prefix: str = Field(
        "engram",
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,100}$",
        description="Names: alias <prefix>-memories over the live generation's index "
        "<prefix>-memories-vN (v1 first), template <prefix>-memories.",
    )
    number_of_shards: int = Field(
        1, ge=1, le=1024, description="Primary shards of a new index (tenants are routed)."
    )
    number_of_replicas: int = Field(1, ge=0, le=16, description="Replicas of each shard.")
    refresh_interval_s: float = Field(
        0.2,
        gt=0,
        description="How often the index refreshes. A write that waits for its refresh "
        "(refresh=wait_for) returns after the next one: this bounds the write latency.",
    )
    generations_refresh_s: float = Field(
        5.0,
        gt=0,
        description="Seconds a replica trusts its copy of the generation list before "
        "reading it again (an unknown generation name re-reads it at once).",
    )
    refresh: Literal["wait_for", "true", "false"] = Field(
        "wait_for",
        description="Refresh policy of upserts and deletes: wait_for returns once searchable "
        "(read-your-writes); true forces a refresh per request; false breaks read-your-writes.",
    )


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_LEXICAL_", env_nested_delimiter="__", extra="ignore"
    )
    metrics: MetricsSettings = metrics_on(9466)

    backend: Literal["tantivy", "opensearch"] = Field(
        "tantivy",
        description="Text index backend: tantivy in-process, or an OpenSearch cluster.",
    )
    opensearch: OpenSearchSettings = Field(
        default_factory=OpenSearchSettings, description="The OpenSearch backend."
    )
    index_dir: Path | None = Field(
        None,
        description="Directory of the tantivy index (generation v1; vN lives in <dir>-vN, "
        "the pointer file in <dir>-generations.json); default <data_dir>/lexical.",
    )
    writer_heap_mb: int = Field(
        64, ge=16, le=4096, description="tantivy writer memory budget in MB (split over threads)."
    )
    writer_threads: int = Field(
        1,
        ge=0,
        le=8,
        description="tantivy indexing threads; 0 lets tantivy pick from the cores. One: each "
        "thread flushes its own segment per commit (10k memories in batches of 100: 4.2 s of "
        "CPU with one, 5.8 with two; a small commit 40 ms against 80).",
    )
    access_commit_interval_s: float = Field(
        0.5,
        ge=0,
        description="Least time between a commit and the next one holding only access "
        "statistics (tantivy; a commit costs ~35 ms of CPU whatever its size); other writes "
        "never wait. 0 = commit every access update at once.",
    )
    metadata_fields: list[Annotated[str, StringConstraints(min_length=1, max_length=256)]] = Field(
        default_factory=lambda: list(METADATA_FIELDS),
        max_length=64,
        description="Metadata fields whose values (strings, numbers, lists of them) are "
        "indexed with the content, so a query naming a memory's topic finds it. A change "
        "applies to memories written after it; `engram rebuild lexical` reindexes the rest. "
        "JSON list in env; [] = none.",
    )
    max_batch: int = Field(
        STORE_MAX_ITEMS,
        ge=1,
        description="Most memories, ids or access updates one request may carry.",
    )
    default_limit: int = Field(10, ge=1, description="Hits returned when a search gives limit 0.")
    max_limit: int = Field(1000, ge=1, description="Largest limit a search may ask for.")
    max_query_chars: int = Field(4096, ge=1, description="Longest search query accepted.")

    def resolved_index_dir(self) -> Path:
        return self.index_dir if self.index_dir is not None else self.data_dir / "lexical"
