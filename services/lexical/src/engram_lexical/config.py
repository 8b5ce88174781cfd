"""Settings of the lexical service (env prefix ENGRAM_LEXICAL_, nested with ``__``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from engram_platform.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_LEXICAL_", env_nested_delimiter="__", extra="ignore"
    )

    backend: Literal["tantivy"] = Field(
        "tantivy", description="Text index backend: tantivy in-process (OpenSearch comes with #3)."
    )
    index_dir: Path | None = Field(
        None, description="Directory of the tantivy index; default <data_dir>/lexical."
    )
    writer_heap_mb: int = Field(
        64, ge=16, le=4096, description="tantivy writer memory budget in MB (split over threads)."
    )
    writer_threads: int = Field(
        0, ge=0, le=8, description="tantivy indexing threads; 0 lets tantivy pick from the cores."
    )
    max_batch: int = Field(
        1000, ge=1, description="Most memories, ids or access updates one request may carry."
    )
    default_limit: int = Field(10, ge=1, description="Hits returned when a search gives limit 0.")
    max_limit: int = Field(1000, ge=1, description="Largest limit a search may ask for.")
    max_query_chars: int = Field(4096, ge=1, description="Longest search query accepted.")

    def resolved_index_dir(self) -> Path:
        return self.index_dir if self.index_dir is not None else self.data_dir / "lexical"
