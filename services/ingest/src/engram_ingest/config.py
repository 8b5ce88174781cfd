"""Settings of the ingest worker (env prefix ENGRAM_INGEST_, nested with ``__``).

E.g. ``ENGRAM_INGEST_NATS__URL=nats://10.0.0.5:4222``, ``ENGRAM_INGEST_EMBED__PROVIDER=openai``.
"""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from engram_embed.factory import EmbedSettings
from engram_platform.settings import NatsSettings, ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_INGEST_", env_nested_delimiter="__", extra="ignore"
    )

    nats: NatsSettings = Field(
        default_factory=NatsSettings, description="Where the log (NATS JetStream) is."
    )
    vector_addr: str = Field("127.0.0.1:50052", description="host:port of the vector service.")
    lexical_addr: str = Field("127.0.0.1:50053", description="host:port of the lexical service.")
    graph_addr: str = Field("127.0.0.1:50054", description="host:port of the graph service.")
    embed: EmbedSettings = Field(
        default_factory=EmbedSettings, description="Embedding provider for memory contents."
    )
    batch_size: int = Field(
        64, ge=1, le=4096, description="Most events fetched, embedded and written at once."
    )
    fetch_timeout_s: float = Field(
        1.0,
        gt=0,
        description="How long an idle fetch waits for the first event; also bounds how long "
        "a stop request waits for an idle worker.",
    )
    batch_wait_s: float = Field(
        0.02,
        gt=0,
        description="After the first event, how long to wait for more to fill the batch.",
    )
    ack_wait_s: float = Field(
        60.0,
        gt=0,
        description="Seconds the log waits for an ack before redelivering an event; must "
        "exceed embed_timeout_s plus a few write_timeout_s.",
    )
    max_ack_pending: int = Field(
        1000,
        ge=1,
        description="Events delivered but not yet acked (retries included), over all replicas; "
        "the log stops delivering beyond it.",
    )
    retry_base_s: float = Field(
        0.5, gt=0, description="Backoff of the first retry; doubles with every redelivery."
    )
    retry_max_s: float = Field(30.0, gt=0, description="Cap of the retry backoff.")
    embed_timeout_s: float = Field(30.0, gt=0, description="Deadline of one embedder call.")
    write_timeout_s: float = Field(10.0, gt=0, description="Deadline of one store write RPC.")
    progress_interval_s: float = Field(
        30.0, gt=0, description="How often applied counts and the watermark are logged."
    )

    @model_validator(mode="after")
    def _ack_wait_covers_a_batch(self) -> Settings:
        # An event redelivered while its first delivery is still being written is
        # harmless (writes are idempotent) but wasted work.
        if self.ack_wait_s <= self.embed_timeout_s + self.write_timeout_s:
            raise ValueError("ack_wait_s must exceed embed_timeout_s + write_timeout_s")
        return self
