"""Settings of the gateway (env prefix ENGRAM_GATEWAY_, nested with ``__``).

e.g. ``ENGRAM_GATEWAY_NATS__URL=nats://127.0.0.1:4222``,
``ENGRAM_GATEWAY_TOKENS=dev-token=default:read+write+admin``,
``ENGRAM_GATEWAY_STREAMS__VECTOR_BUDGET__CAP_S=1.5``, ``ENGRAM_GATEWAY_CONTEXT__SEEDS=0``,
``ENGRAM_GATEWAY_CACHE__BACKEND=redis``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from engram_core import profiles
from engram_core.limits import MAX_CONTENT_BYTES, MAX_METADATA_BYTES
from engram_core.validation import Limits
from engram_gateway.recall_settings import (
    CandidatesSettings,
    ContextSettings,
    ExpandSettings,
    FeedbackSettings,
    GraphRerankSettings,
    PostRankSettings,
    RelationsSettings,
    ScoringStepSettings,
    StreamsSettings,
)
from engram_platform.settings import (
    CacheSettings,
    ClientTlsSettings,
    NatsSettings,
    ProfileName,
    ServiceSettings,
    workers_field,
)


class ModelEndpoint(BaseModel):
    """A query-side model behind an HTTP endpoint (service/models.py); '' base_url = none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(
        "", description="Base URL of the endpoint, e.g. http://127.0.0.1:8000/v1; '' = none."
    )
    model: str = Field("", description="Model name sent with each request.")
    api_key_file: Path | None = Field(
        None, description="File holding the API key (sent as a bearer token); none = no auth."
    )
    timeout_s: float = Field(
        3.0, gt=0, description="Longest wait for one answer (the call's deadline may cut it)."
    )
    enabled: bool = Field(
        False,
        description="hyde/reranker: run for requests that leave the flag unset; "
        "decompose_model: decompose with this model instead of the rules.",
    )

    @model_validator(mode="after")
    def _enabled_needs_an_endpoint(self) -> ModelEndpoint:
        if self.enabled and not self.base_url:
            raise ValueError("enabled needs a base_url")
        return self


class ChatModelSettings(ModelEndpoint):
    """An OpenAI-compatible /chat/completions model."""

    max_tokens: int = Field(256, ge=1, description="Most tokens the model may write.")


class HydeSettings(ChatModelSettings):
    max_chars: int = Field(
        1000, ge=1, description="Characters of the hypothetical answer the vector stream embeds."
    )


class DecomposeModelSettings(ChatModelSettings):
    max_queries: int = Field(4, ge=1, le=16, description="Most sub-queries taken from the model.")


class RerankerSettings(ModelEndpoint):
    """A cross-encoder: the local model ``make models`` builds, or one behind
    POST {base_url}/rerank."""

    backend: Literal["http", "local"] = Field(
        "http",
        description="local: ms-marco-MiniLM-L-12-v2 run in the gateway (model_dir); "
        "http: the endpoint at base_url.",
    )
    model_dir: Path | None = Field(
        None,
        description="local backend: folder of the cross-encoder; none = "
        "$ENGRAM_HOME/models/ms-marco-MiniLM-L-12-v2.",
    )
    threads: int = Field(
        2,
        ge=1,
        le=64,
        description="local backend: pairs scored at once, each on one core, shared by all recalls.",
    )
    timeout_s: float = Field(
        2.0, gt=0, description="Longest wait for one answer (the call's deadline may cut it)."
    )
    top_n: int = Field(20, ge=1, le=100, description="Best results of the ranking re-scored.")
    mode: Literal["blend", "replace"] = Field(
        "blend",
        description="blend: mix the cross-encoder with the fused score (weight); replace: "
        "the cross-encoder alone orders the top_n.",
    )
    weight: float = Field(0.7, ge=0, le=1, description="Cross-encoder's share in blend mode.")
    max_chars: int = Field(
        2000, ge=1, description="Characters of each memory's content sent to be scored."
    )
    preceding_chars: int = Field(
        300,
        ge=0,
        description="Characters (the end) of the memory stored just before each one, sent "
        "in front of it when that memory ends with a question mark (the question a "
        "conversation's turn answers); 0 sends each alone.",
    )
    documents_field: Literal["documents", "texts"] = Field(
        "documents",
        description="Request field of the documents: documents (Cohere, Jina, vLLM, "
        "llama.cpp) or texts (TEI's native /rerank).",
    )

    @model_validator(mode="after")
    def _enabled_needs_an_endpoint(self) -> RerankerSettings:
        if self.enabled and self.backend == "http" and not self.base_url:
            raise ValueError("enabled needs a base_url, or backend local")
        return self


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_GATEWAY_", env_nested_delimiter="__", extra="ignore"
    )

    port: int = Field(50051, ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    workers: int = workers_field()
    nats: NatsSettings = Field(
        default_factory=NatsSettings, description="The log (JetStream) the gateway publishes to."
    )
    vector_addr: str = Field("127.0.0.1:50061", description="host:port of the vector service.")
    lexical_addr: str = Field("127.0.0.1:50062", description="host:port of the lexical service.")
    graph_addr: str = Field("127.0.0.1:50063", description="host:port of the graph service.")
    scoring_addr: str = Field("127.0.0.1:50064", description="host:port of the scoring service.")
    client_tls: ClientTlsSettings = Field(
        default_factory=ClientTlsSettings,
        description="TLS of the channels to vector, lexical, graph and scoring; off.",
    )

    # Auth
    tokens: SecretStr = Field(
        SecretStr(""),
        description='Dev tokens "<token>=<tenant>:<scope>+<scope>;..." (prefer tokens_file).',
    )
    tokens_file: Path | None = Field(
        None,
        description="JSON list of {sha256, tenant, scopes}: tokens hashed at rest; read again "
        "when it changes, so tokens are added and revoked without a restart.",
    )
    tokens_reload_s: float = Field(
        5.0,
        ge=0,
        description="Most seconds between two looks at tokens_file (on the request path); "
        "a revoked token works at most this long; 0: every call.",
    )

    # Limits. Capped by engram_core.limits: every store must take what the gateway accepts.
    max_content_bytes: int = Field(
        16 * 1024,
        gt=0,
        le=MAX_CONTENT_BYTES,
        description="Largest content (UTF-8 bytes); at most what every store takes.",
    )
    max_metadata_bytes: int = Field(
        16 * 1024,
        gt=0,
        le=MAX_METADATA_BYTES,
        description="Largest metadata, serialised as JSON (bytes); at most what every store takes.",
    )
    max_batch: int = Field(1000, ge=1, description="Most memories in one StoreBatch.")
    max_stream: int = Field(
        10_000, ge=1, description="Most memories in one StoreStream (buffered, all or nothing)."
    )
    subscribe_per_tenant: int = Field(
        16, ge=0, description="Most Subscribe streams one tenant may hold open on this gateway."
    )
    subscribe_total: int = Field(
        1024, ge=0, description="Most Subscribe streams this gateway holds open in all."
    )
    max_query_bytes: int = Field(4096, gt=0, description="Longest recall query (UTF-8 bytes).")
    default_limit: int = Field(10, ge=1, le=100, description="Recall results when limit is 0.")
    default_timezone: str = Field(
        "", description="IANA zone (or ±hh:mm) for a time_query whose request names none; '' = UTC."
    )

    profile: ProfileName = Field(
        profiles.DEFAULT,
        description="Recall profile when neither the request nor tenant_profiles names one: "
        "default, or conversation for chat turns (engram_core.profiles).",
    )
    tenant_profiles: dict[str, ProfileName] = Field(
        default_factory=dict,
        description='Recall profile per tenant, a JSON object {"tenant": "profile"}; '
        "a request's profile wins over it.",
    )

    # The recall's steps, one nested model each (recall_settings.py).
    streams: StreamsSettings = Field(
        default_factory=StreamsSettings,
        description="The retrieval streams (vector, lexical, graph): pools and deadlines.",
    )
    relations: RelationsSettings = Field(
        default_factory=RelationsSettings,
        description="Relations among the top candidates (relation component, supersession).",
    )
    context: ContextSettings = Field(
        default_factory=ContextSettings,
        description="Timeline neighbours of the best candidates (hybrid mode).",
    )
    candidates: CandidatesSettings = Field(
        default_factory=CandidatesSettings,
        description="Multi-query and decomposition: candidates beyond the one query.",
    )
    feedback: FeedbackSettings = Field(
        default_factory=FeedbackSettings,
        description="Pseudo-relevance feedback: a second search from the first's best.",
    )
    scoring: ScoringStepSettings = Field(
        default_factory=ScoringStepSettings,
        description="The scoring call that fuses and ranks; tier escalation.",
    )
    postrank: PostRankSettings = Field(
        default_factory=PostRankSettings,
        description="Filters after ranking: duplicates, score floor, diversity, token budget.",
    )
    expand: ExpandSettings = Field(
        default_factory=ExpandSettings,
        description="Expansion after ranking: related and entity-sharing memories.",
    )
    graph_rerank: GraphRerankSettings = Field(
        default_factory=GraphRerankSettings,
        description="The hybrid_graph mode's personalised-PageRank rerank.",
    )
    # Query-side models (service/models.py): none configured, none run.
    hyde: HydeSettings = Field(
        default_factory=HydeSettings,
        description="HyDE: a chat model writes a hypothetical answer the vector stream embeds.",
    )
    decompose_model: DecomposeModelSettings = Field(
        default_factory=DecomposeModelSettings,
        description="A chat model that splits a question into sub-queries (decompose).",
    )
    reranker: RerankerSettings = Field(
        default_factory=RerankerSettings,
        description="A cross-encoder that re-scores the top of the ranking.",
    )

    # Deadlines
    default_deadline_s: float = Field(
        10.0, gt=0, description="Budget of a call that carries no deadline."
    )
    backend_timeout_s: float = Field(
        2.0,
        gt=0,
        description="Cap of other backend calls (get, related, count, a trending listing).",
    )
    recall_concurrency: int = Field(
        8,
        ge=0,
        description="Recalls this gateway process works on at once; the others wait their "
        "turn (0 = no limit). Past what the backends serve, recalls run out of step budgets "
        "and answer degraded.",
    )
    recall_queue: int = Field(
        256,
        ge=0,
        description="Recalls that may wait for a turn, over all tenants; one more is refused "
        "with RESOURCE_EXHAUSTED at once.",
    )
    recall_tenant_queue: int = Field(
        32,
        ge=0,
        description="Recalls one tenant may have waiting for a turn; one more of that tenant "
        "is refused with RESOURCE_EXHAUSTED at once (retry-after-ms), the others still wait.",
    )
    recall_tenant_share: bool = Field(
        True,
        description="While several tenants have recalls in progress or waiting, each holds "
        "at most ceil(recall_concurrency / tenants) of the turns, so a flooding tenant's "
        "recalls leave the backends to the others' (a turn may stay unused); one tenant alone "
        "gets them all.",
    )
    publish_timeout_s: float = Field(
        5.0,
        gt=0,
        description="Longest wait for the log's publish ack; a call's shorter deadline cuts it.",
    )
    publish_concurrency: int = Field(
        256, ge=1, description="Publishes in flight for one batch (pipelined)."
    )

    # Read-your-writes and caches
    watermark_cache_ms: float = Field(
        20.0, ge=0, description="How long one watermark read serves concurrent requests."
    )
    min_sequence_poll_ms: float = Field(
        20.0, gt=0, description="Interval between watermark reads while waiting."
    )
    dry_run_poll_ms: float = Field(
        200.0,
        gt=0,
        description="Interval between status reads while AdminService.Consolidate waits "
        "for a dry run's reports.",
    )
    recall_cache_ttl_s: float = Field(
        10.0, ge=0, description="Recall cache lifetime; 0 turns the cache off."
    )
    idempotency_ttl_s: float = Field(
        86_400.0, gt=0, description="How long an idempotency key maps to its id (>= dup window)."
    )
    cache_max_entries: int = Field(
        100_000, ge=1, description="Entries of the in-process cache (recall + idempotency)."
    )
    cache: CacheSettings = Field(
        default_factory=CacheSettings,
        description="Where the recall cache, idempotency keys and rate-limit counters live "
        "(memory: this replica's own; redis: shared).",
    )

    # Rate limit
    rate_limit_rps: float = Field(
        0.0, ge=0, description="Requests per second per tenant, over every RPC; 0 = no limit."
    )
    rate_limit_window_s: float = Field(
        1.0,
        gt=0,
        description="Requests are counted in fixed windows this long (a burst may use a "
        "whole window's share at once).",
    )

    write_rate_limit: float = Field(
        0.0,
        ge=0,
        description="Memories per second one tenant may store (Store, StoreBatch, "
        "StoreStream count each memory), counted in the same windows; 0 = no limit. Bounds "
        "the embedding and store work one tenant's writes cost the others.",
    )

    # Metrics
    metrics_tenant_label: bool = Field(
        False,
        description="Label admission refusals (rate limit, full recall queue) with the "
        "tenant: one series per tenant, so only for a bounded number of tenants.",
    )

    @model_validator(mode="after")
    def _rate_limit_admits_one_per_window(self) -> Settings:
        for name, rate in (
            ("rate_limit_rps", self.rate_limit_rps),
            ("write_rate_limit", self.write_rate_limit),
        ):
            if 0 < rate * self.rate_limit_window_s < 1:
                raise ValueError(
                    f"{name} × rate_limit_window_s must be >= 1 per window "
                    f"(got {rate} × {self.rate_limit_window_s})"
                )
        return self

    @model_validator(mode="after")
    def _idempotency_outlives_the_duplicate_window(self) -> Settings:
        if self.idempotency_ttl_s < self.nats.duplicate_window_s:
            raise ValueError(
                f"idempotency_ttl_s ({self.idempotency_ttl_s}) must be >= the log's "
                f"duplicate window ({self.nats.duplicate_window_s})"
            )
        return self

    def limits(self) -> Limits:
        return Limits(
            max_content_bytes=self.max_content_bytes,
            max_metadata_bytes=self.max_metadata_bytes,
            max_batch=self.max_batch,
            max_query_bytes=self.max_query_bytes,
            default_limit=self.default_limit,
        )
