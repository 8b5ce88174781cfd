"""Settings of the consolidate worker (env prefix ENGRAM_CONSOLIDATE_, nested with ``__``).

E.g. ``ENGRAM_CONSOLIDATE_NATS__URL=nats://10.0.0.5:4222``.
"""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from engram_platform.settings import NatsSettings, ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_CONSOLIDATE_", env_nested_delimiter="__", extra="ignore"
    )

    nats: NatsSettings = Field(
        default_factory=NatsSettings, description="Where the log (NATS JetStream) is."
    )
    vector_addr: str = Field("127.0.0.1:50052", description="host:port of the vector service.")
    lexical_addr: str = Field("127.0.0.1:50053", description="host:port of the lexical service.")
    graph_addr: str = Field("127.0.0.1:50054", description="host:port of the graph service.")
    batch_size: int = Field(
        256,
        ge=1,
        le=4096,
        description="Most access events folded into one round of writes (one per memory).",
    )
    fetch_timeout_s: float = Field(
        1.0,
        gt=0,
        description="How long an idle fetch waits for the first event; also bounds how long "
        "a stop request waits for an idle worker.",
    )
    batch_wait_s: float = Field(
        0.1,
        gt=0,
        description="After the first event, how long to wait for more to fold into the batch.",
    )
    ack_wait_s: float = Field(
        60.0,
        gt=0,
        description="Seconds the log waits for an ack before redelivering; must exceed "
        "three write_timeout_s (read, then two rounds of writes).",
    )
    max_ack_pending: int = Field(
        5000, ge=1, description="Events delivered but not yet acked, over all replicas."
    )
    retry_base_s: float = Field(
        0.5, gt=0, description="Backoff of the first retry; doubles with every redelivery."
    )
    retry_max_s: float = Field(30.0, gt=0, description="Cap of the retry backoff.")
    write_timeout_s: float = Field(10.0, gt=0, description="Deadline of one store RPC.")
    read_chunk: int = Field(
        100, ge=1, le=1000, description="Ids per vector get when reading current counts."
    )
    progress_interval_s: float = Field(
        30.0, gt=0, description="How often counts of updated memories are logged."
    )

    @model_validator(mode="after")
    def _ack_wait_covers_a_batch(self) -> Settings:
        if self.ack_wait_s <= 3 * self.write_timeout_s:
            raise ValueError("ack_wait_s must exceed 3 * write_timeout_s")
        return self
