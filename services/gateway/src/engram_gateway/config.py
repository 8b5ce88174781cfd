"""Settings of the gateway (env prefix ENGRAM_GATEWAY_, nested with ``__``).

e.g. ``ENGRAM_GATEWAY_NATS__URL=nats://127.0.0.1:4222``,
``ENGRAM_GATEWAY_TOKENS=dev-token=default:read+write+admin``,
``ENGRAM_GATEWAY_VECTOR_BUDGET__CAP_S=1.5``, ``ENGRAM_GATEWAY_CACHE__BACKEND=redis``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from engram_core.errors import InvalidArgument
from engram_core.limits import MAX_CONTENT_BYTES, MAX_METADATA_BYTES
from engram_core.validation import Limits
from engram_gateway.service.postrank import parse_group_by
from engram_platform.settings import (
    SEARCH_MANY_MAX_FILTERS,
    SEARCH_MANY_MAX_HITS,
    CacheSettings,
    ClientTlsSettings,
    NatsSettings,
    ServiceSettings,
)


class Budget(BaseModel):
    """A backend call's share of the caller's remaining time: min(cap_s, fraction × remaining)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fraction: float = Field(0.5, gt=0, le=1, description="Share of the remaining deadline.")
    cap_s: float = Field(2.0, gt=0, description="Upper bound in seconds, whatever the deadline.")


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
    max_pool: int = Field(200, ge=1, description="Most candidates fetched per stream.")
    tag_pool_factor: int = Field(
        2,
        ge=1,
        description="The vector stream's pool × this when the request's tags scope the search "
        "(a filtered approximate search finds fewer good neighbours); at most max_pool.",
    )
    relation_pool: int = Field(
        50, ge=0, description="Top candidates whose relations feed the relation component."
    )
    relation_system_edges: bool = Field(
        False,
        description="Let edges consolidation drew (origin system: SIMILAR_TO, PRECEDED_BY…) "
        "feed the relation component too; off, only edges agents made count.",
    )
    hybrid_graph_stream: bool = Field(
        False,
        description="Search the graph service for memories mentioning the query's entities "
        "in the default hybrid mode with weighted fusion too. Off: the scoring service's "
        "graph weight is 0 by default, so that stream changes no ranking, and at 100k it "
        "cost a third of each recall's CPU. Turn it on with ENGRAM_SCORING_WEIGHTS__GRAPH > "
        "0. The graph and hybrid_graph modes and fusion=rrf always search it.",
    )
    context_seeds: int = Field(
        5,
        ge=0,
        le=SEARCH_MANY_MAX_FILTERS,
        description="Best candidates whose timeline neighbours are read (hybrid); 0 = off.",
    )
    context_distance: int = Field(
        2, ge=1, description="Neighbours up to this many steps away on the timeline."
    )
    context_window_s: float = Field(
        3600.0, ge=0, description="Neighbours are read this far either side of a seed."
    )
    context_limit: int = Field(
        64,
        ge=1,
        le=SEARCH_MANY_MAX_HITS // SEARCH_MANY_MAX_FILTERS,
        description="Most memories read per seed window (all windows are one vector call).",
    )
    context_thread_by: str = Field(
        "",
        description="One timeline per thread, keyed as diversify_by is (tag:<prefix>, "
        "metadata:<key>): memories are neighbours only within one. '' = the tenant's one.",
    )
    dense_without_people: bool = Field(
        True, description="Leave the people a query names out of the text the vector embeds."
    )

    # Recall filters and post-ranking (service/postrank.py); off by default except duplicate
    # ids and duplicate content, so a plain recall ranks as before.
    default_timezone: str = Field(
        "", description="IANA zone (or ±hh:mm) for a time_query whose request names none; '' = UTC."
    )
    supersession_max_hops: int = Field(
        4, ge=0, description="Rounds of relation fetches that extend supersession chains."
    )
    near_duplicates: bool = Field(
        True, description="Drop results whose content nearly duplicates a better one."
    )
    near_duplicate_threshold: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Shingle Jaccard at which two results count as one; 0 = the same words.",
    )
    shingle_size: int = Field(3, ge=1, description="Words per shingle (near duplicates).")
    floor_ratio: float = Field(
        0.0, ge=0, le=1, description="Cut results under this share of the top score; 0 = off."
    )
    floor_max_gap: float = Field(
        0.0, ge=0, le=1, description="Cut the tail after a drop > this share of the top; 0 = off."
    )
    floor_min_keep: int = Field(1, ge=1, description="Results the floor never cuts.")
    default_max_per_group: int = Field(
        2, ge=1, description="max_per_group when a request sets diversify_by but not it."
    )
    chars_per_token: float = Field(
        4.0, gt=0, description="ASCII characters per token in the token-budget estimate."
    )
    recall_overfetch: int = Field(
        3, ge=1, description="Results asked of scoring per limit when post-ranking may cut."
    )
    escalation_floor: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Best score (weighted; RRF: share of the best possible) under which the "
        "pool is doubled once and the recall re-run; 0 = off.",
    )

    # Candidate generation: multi-query, decomposition, trending.
    max_queries: int = Field(
        8, ge=1, le=32, description="Most sub-queries per recall (query, queries, decomposed)."
    )
    decompose: bool = Field(
        False,
        description="Split questions into entity/topic sub-queries when a request leaves "
        "decompose unset.",
    )
    decompose_max_parts: int = Field(
        4, ge=1, le=16, description="Most sub-queries the rule-based decomposer adds."
    )

    # After ranking: expansion (service/expand.py) and the hybrid_graph rerank (pagerank.py).
    expand_seeds: int = Field(
        5, ge=1, le=100, description="Best results (at most limit) whose links are expanded."
    )
    expand_per_seed: int = Field(
        3, ge=1, le=100, description="Neighbours per seed when a request's expand_per_seed is 0."
    )
    expand_limit: int = Field(
        10, ge=1, le=100, description="Expanded results in all when a request's expand_limit is 0."
    )
    expand_entity_factor: float = Field(
        0.5,
        ge=0,
        le=1,
        description="An entity-expanded memory scores this × the score of the best seed "
        "sharing an entity with it (a flat share).",
    )
    graph_alpha: float = Field(
        0.1,
        ge=0,
        le=1,
        description="hybrid_graph: PageRank's weight in the blend when a request's "
        "graph_rerank.alpha is 0.",
    )
    graph_seeds: int = Field(
        10, ge=1, description="hybrid_graph: best results the PageRank walk restarts from."
    )
    graph_pool: int = Field(
        50, ge=2, le=100, description="hybrid_graph: results asked of scoring and reranked."
    )
    graph_damping: float = Field(
        0.85, gt=0, lt=1, description="hybrid_graph: chance the walk follows an edge."
    )
    graph_entity_weight: float = Field(
        0.5,
        ge=0,
        description="hybrid_graph: weight of a memory–entity edge for the rarest shared "
        "entity (rarer in the pool = heavier; one every result mentions = 0).",
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
    vector_budget: Budget = Field(
        default_factory=Budget, description="Vector search share of the deadline."
    )
    lexical_budget: Budget = Field(
        default_factory=Budget, description="Lexical search share of the deadline."
    )
    graph_budget: Budget = Field(
        default_factory=Budget, description="Graph search share of the deadline."
    )
    relations_budget: Budget = Field(
        default_factory=lambda: Budget(fraction=0.3, cap_s=0.5),
        description="Relations among the top candidates.",
    )
    context_budget: Budget = Field(
        default_factory=lambda: Budget(fraction=0.3, cap_s=0.5),
        description="Reading the timeline neighbours of the best candidates.",
    )
    expand_budget: Budget = Field(
        default_factory=lambda: Budget(fraction=0.3, cap_s=0.5),
        description="Graph reads after ranking: expansion, the hybrid_graph rerank.",
    )
    scoring_budget: Budget = Field(
        default_factory=lambda: Budget(fraction=0.5, cap_s=1.0),
        description="Scoring's share of what is left after retrieval.",
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

    # Metrics
    metrics_tenant_label: bool = Field(
        False,
        description="Label admission refusals (rate limit, full recall queue) with the "
        "tenant: one series per tenant, so only for a bounded number of tenants.",
    )

    @model_validator(mode="after")
    def _context_thread_by_parses(self) -> Settings:
        try:
            parse_group_by(self.context_thread_by, "CONTEXT_THREAD_BY")
        except InvalidArgument as e:
            raise ValueError(str(e)) from e
        return self

    @model_validator(mode="after")
    def _rate_limit_admits_one_per_window(self) -> Settings:
        if 0 < self.rate_limit_rps * self.rate_limit_window_s < 1:
            raise ValueError(
                f"rate_limit_rps × rate_limit_window_s must be >= 1 request per window "
                f"(got {self.rate_limit_rps} × {self.rate_limit_window_s})"
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
