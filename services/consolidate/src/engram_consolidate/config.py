"""Settings of the consolidate worker (env prefix ENGRAM_CONSOLIDATE_, nested with ``__``).

E.g. ``ENGRAM_CONSOLIDATE_NATS__URL=nats://10.0.0.5:4222``.
"""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from engram_platform.settings import WorkerSettings


class Settings(WorkerSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_CONSOLIDATE_", env_nested_delimiter="__", extra="ignore"
    )

    batch_size: int = Field(
        256,
        ge=1,
        le=4096,
        description="Most access events folded into one round of writes (one per memory).",
    )
    batch_wait_s: float = Field(
        0.1,
        gt=0,
        description="After the first event, how long to wait for more to fold into the batch.",
    )
    max_ack_pending: int = Field(
        5000, ge=1, description="Events delivered but not yet acked, over all replicas."
    )
    read_chunk: int = Field(
        100, ge=1, le=1000, description="Ids per vector get when reading current counts."
    )

    @model_validator(mode="after")
    def _ack_wait_covers_a_batch(self) -> Settings:
        if self.ack_wait_s <= 3 * self.write_timeout_s:
            raise ValueError("ack_wait_s must exceed 3 * write_timeout_s")
        return self
