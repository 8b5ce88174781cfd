"""Settings of the ingest worker (env prefix ENGRAM_INGEST_, nested with ``__``).

E.g. ``ENGRAM_INGEST_NATS__URL=nats://10.0.0.5:4222``, ``ENGRAM_INGEST_EMBED__PROVIDER=openai``,
``ENGRAM_INGEST_NEXT_EMBED__PROVIDER=hashing``, ``ENGRAM_INGEST_ENTITIES__PROFILE=default``.
"""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from engram_embed.factory import EmbedSettings
from engram_platform.lexicons import EntitySettings
from engram_platform.settings import STORE_MAX_ITEMS, MetricsSettings, WorkerSettings, metrics_on


class Settings(WorkerSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_INGEST_", env_nested_delimiter="__", extra="ignore"
    )
    metrics: MetricsSettings = metrics_on(9469)

    embed: EmbedSettings = Field(
        default_factory=EmbedSettings, description="Embedding provider for memory contents."
    )
    next_embed: EmbedSettings | None = Field(
        None,
        description="A second embedder, for a rebuild of vector onto another model: when "
        "vector refuses a batch for its embedding_model, ingest switches to the other "
        "embedder, re-embeds and retries at once, and keeps it (built at start).",
    )
    entities: EntitySettings = Field(
        default_factory=EntitySettings,
        description="Entity extraction: profile and lexicon files (consolidate needs the same).",
    )
    embed_timeout_s: float = Field(30.0, gt=0, description="Deadline of one embedder call.")
    ack_wait_s: float = Field(
        3.0,
        ge=1.0,
        description="Seconds the log waits for a sign of life before redelivering an event "
        "to another replica. The batch in hand is marked in progress every third of it, so "
        "a slow batch is kept however long it takes, and a dead replica's batch (and with "
        "it the watermark) is held only this long.",
    )
    lanes: int = Field(
        4,
        ge=1,
        le=64,
        description="Batches applied at once by one replica. A tenant's events go one "
        "batch after another, in log order, and tenants with events waiting take turns "
        "for a lane, so one tenant's backlog holds one lane while another's write takes "
        "the next free one.",
    )
    read_ahead: int = Field(
        10_000,
        ge=1,
        description="Most events one replica holds (waiting for a lane or being applied). "
        "The log delivers in order, so another tenant's write is taken up beside a "
        "backlog only once fewer than this many events are logged ahead of it; all held "
        "are kept in progress, so none is redelivered while the replica lives.",
    )
    max_ack_pending: int = Field(
        20_000,
        ge=1,
        description="Events delivered but not yet acked (retries included), over all "
        "replicas; the log stops delivering beyond it. At least read_ahead.",
    )
    embed_ahead: int = Field(
        256,
        ge=0,
        description="Contents embedded ahead of their batch, while earlier batches are "
        "written to the stores and acked, so the model keeps running through a backlog "
        "(at least batch_size when on); 0 embeds each batch in its own turn.",
    )
    initial_relevance: bool = Field(
        True,
        description="Give a newly stored memory (MemoryStored) whose relevance_score is 0 the "
        "score engram_core.relevance computes at age 0 with no access and no relations (its "
        "own importance and confidence, the formula's default constants), instead of 0 until "
        "the first decay pass.",
    )
    endpoint_deliveries: int = Field(
        20,
        ge=1,
        description="How often a relation whose endpoint the graph does not hold yet (while "
        "vector or lexical does) is delivered before it is dead-lettered as 'endpoint <id> "
        "not applied'; with the retry backoff, 20 deliveries wait about 8 minutes.",
    )

    @model_validator(mode="after")
    def _a_batch_fits_one_store_write(self) -> Settings:
        # A batch's memories of one tenant go to each store in one write, and the stores
        # take at most 1000: a bigger batch would be refused and retried without end.
        if self.batch_size > STORE_MAX_ITEMS:
            raise ValueError(f"batch_size must be at most {STORE_MAX_ITEMS} (a store write)")
        return self

    @model_validator(mode="after")
    def _read_ahead_is_deliverable(self) -> Settings:
        # The log stops delivering at max_ack_pending: a larger read-ahead is never filled.
        if self.read_ahead > self.max_ack_pending:
            raise ValueError("read_ahead must be at most max_ack_pending")
        return self
