"""Builds the gateway from settings: the only module that knows adapters and config.

``build_gateway`` wires ports into the service (unit tests hand it fakes);
``open_gateway`` opens the real channels, the log and the cache around it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

import httpx

from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.scoring import ScoringClient
from engram_clients.vector import VectorClient
from engram_core.ids import new_id
from engram_core.model import utcnow
from engram_core.ports import Cache, RateLimiter
from engram_embed.cross import OnnxCrossEncoder
from engram_gateway.adapters.consolidation import NatsConsolidation
from engram_gateway.adapters.dead_letters import JetStreamDeadLetters
from engram_gateway.adapters.feed import JetStreamFeed
from engram_gateway.adapters.log import JetStreamLog
from engram_gateway.adapters.openai_models import (
    ChatDecomposer,
    ChatHyde,
    ChatModel,
    HttpReranker,
    JsonEndpoint,
)
from engram_gateway.adapters.ranker import ScoringRanker
from engram_gateway.adapters.recall_codec import ProtoRecallCodec
from engram_gateway.adapters.tenant_purge import NatsTenantPurge
from engram_gateway.auth import Authenticator
from engram_gateway.config import ChatModelSettings, Settings
from engram_gateway.recall_config import read_config
from engram_gateway.service import (
    FeedConfig,
    Gateway,
    Lister,
    RateLimitConfig,
    Reader,
    Subscriptions,
    TenantRateLimit,
    WriteConfig,
    Writer,
)
from engram_gateway.service.access import AccessRecorder
from engram_gateway.service.admin import Admin, AdminConfig, ConsolidationControl
from engram_gateway.service.admission import Admission, AdmissionConfig
from engram_gateway.service.dead_letters import DeadLetters
from engram_gateway.service.decompose import RuleDecomposer
from engram_gateway.service.lookup import Lookup
from engram_gateway.service.models import (
    FallbackDecomposer,
    ModelsConfig,
    QueryModels,
    RerankMode,
)
from engram_gateway.service.ports import (
    EventLog,
    GraphPort,
    LexicalPort,
    QueryDecomposer,
    RankerPort,
    RecallCodec,
    VectorPort,
)
from engram_gateway.service.rate_limit import WRITE_KEY_PREFIX
from engram_gateway.service.recall_cache import RecallCache
from engram_gateway.service.stats import StatsView, TenantLog
from engram_gateway.service.tenants import TenantEraser, TenantPurge
from engram_gateway.service.vector_size import LiveDimension
from engram_gateway.service.watermark import WatermarkCache
from engram_platform import jetstream
from engram_platform.coordination import MemoryRateLimiter, open_coordination
from engram_platform.grpc_client import Channels

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backends:
    vector: VectorPort
    lexical: LexicalPort
    graph: GraphPort
    ranker: RankerPort


@dataclass(frozen=True, slots=True)
class Models:
    """The query-side models the settings configure (service/models.py)."""

    query: QueryModels = field(default_factory=QueryModels)
    decomposer: ChatDecomposer | None = None  # the LLM decomposer, if selected
    closers: tuple[Callable[[], Awaitable[None]], ...] = ()

    def decomposer_over(self, rules: QueryDecomposer, timeout_s: float) -> QueryDecomposer:
        """The decomposer a recall uses: the model's, falling back to ``rules``."""
        if self.decomposer is None:
            return rules
        return FallbackDecomposer(self.decomposer, rules, timeout_s)

    async def close(self) -> None:
        for close in self.closers:
            await close()


def _chat(what: str, s: ChatModelSettings, transport: httpx.AsyncBaseTransport | None) -> ChatModel:
    endpoint = JsonEndpoint(
        what,
        s.base_url,
        "/chat/completions",
        api_key_file=s.api_key_file,
        timeout_s=s.timeout_s,
        transport=transport,
    )
    return ChatModel(endpoint, s.model, s.max_tokens)


def build_models(settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> Models:
    """HTTP clients for the models that have a base_url; none otherwise."""
    h, d, r = settings.hyde, settings.decompose_model, settings.reranker
    hyde = ChatHyde(_chat("hyde", h, transport), h.max_chars) if h.base_url else None
    decomposer = None
    if d.enabled:
        decomposer = ChatDecomposer(_chat("decomposer", d, transport), d.max_queries, d.timeout_s)
    reranker: HttpReranker | OnnxCrossEncoder | None = None
    if r.backend == "local":
        reranker = OnnxCrossEncoder(r.model_dir, threads=r.threads)
    elif r.base_url:
        endpoint = JsonEndpoint(
            "reranker",
            r.base_url,
            "/rerank",
            api_key_file=r.api_key_file,
            timeout_s=r.timeout_s,
            transport=transport,
        )
        reranker = HttpReranker(endpoint, r.model, r.documents_field)
    config = ModelsConfig(
        hyde_default=h.enabled,
        rerank_default=r.enabled,
        hyde_timeout_s=h.timeout_s,
        rerank_timeout_s=r.timeout_s,
        decompose_timeout_s=d.timeout_s,
        rerank_top_n=r.top_n,
        rerank_mode=RerankMode(r.mode),
        rerank_weight=r.weight,
        rerank_max_chars=r.max_chars,
        rerank_preceding_chars=r.preceding_chars,
    )
    closers = tuple(m.close for m in (hyde, decomposer, reranker) if m is not None)
    return Models(QueryModels(hyde, reranker, config), decomposer, closers)


def build_authenticator(settings: Settings) -> Authenticator:
    auth = Authenticator.from_sources(
        settings.tokens.get_secret_value(), settings.tokens_file, settings.tokens_reload_s
    )
    if not auth.configured:
        log.warning("no tokens configured: every call will be refused as UNAUTHENTICATED")
    return auth


@dataclass(frozen=True, slots=True)
class _Shared:
    """What the writer, the reader and the tenant eraser share."""

    lookup: Lookup
    recall_cache: RecallCache
    access: AccessRecorder
    clock: Callable[[], datetime]
    ids: Callable[[], str]


def _writer(
    settings: Settings, event_log: EventLog, cache: Cache, shared: _Shared, vector: VectorPort
) -> Writer:
    config = WriteConfig(
        limits=settings.limits(),
        idempotency_ttl_s=settings.idempotency_ttl_s,
        publish_concurrency=settings.publish_concurrency,
        backend_timeout_s=settings.backend_timeout_s,
        publish_timeout_s=settings.publish_timeout_s,
    )
    return Writer(
        event_log,
        cache,
        shared.lookup,
        shared.recall_cache,
        config,
        shared.clock,
        shared.ids,
        LiveDimension(vector),
    )


def _reader(
    settings: Settings, backends: Backends, event_log: EventLog, shared: _Shared, models: Models
) -> Reader:
    watermarks = WatermarkCache(
        event_log.watermark,
        settings.watermark_cache_ms / 1000.0,
        decided=event_log.tenant_decided_through,
        tenant_last=event_log.tenant_last_sequence,
    )
    admission = AdmissionConfig(
        settings.recall_concurrency,
        settings.recall_queue,
        settings.recall_tenant_queue,
        tenant_label=settings.metrics_tenant_label,
        tenant_share=settings.recall_tenant_share,
    )
    return Reader(
        backends.vector,
        backends.lexical,
        backends.graph,
        backends.ranker,
        event_log,
        shared.lookup,
        shared.recall_cache,
        watermarks,
        shared.access,
        read_config(settings, settings.limits()),
        shared.clock,
        models=models.query,
        admission=Admission(admission),
        decomposer=models.decomposer_over(
            RuleDecomposer(settings.candidates.decompose_max_parts),
            settings.decompose_model.timeout_s,
        ),
    )


def _tenants(
    settings: Settings,
    backends: Backends,
    event_log: EventLog,
    cache: Cache,
    shared: _Shared,
    tenant_log: TenantLog | None,
    purge: TenantPurge | None,
) -> TenantEraser:
    return TenantEraser(
        event_log,
        (backends.vector, backends.lexical, backends.graph),
        cache,
        shared.recall_cache,
        shared.clock,
        shared.ids,
        settings.backend_timeout_s,
        # Outlives both the log's duplicate window and the keys remembered after it.
        max(settings.nats.duplicate_window_s, settings.idempotency_ttl_s),
        tenant_log,
        purge,
    )


def build_gateway(
    settings: Settings,
    backends: Backends,
    event_log: EventLog,
    cache: Cache,
    codec: RecallCodec | None = None,
    clock: Callable[[], datetime] = utcnow,
    ids: Callable[[], str] = new_id,
    limiter: RateLimiter | None = None,
    models: Models | None = None,
    tenant_log: TenantLog | None = None,
    purge: TenantPurge | None = None,
) -> Gateway:
    """The gateway over the given ports; without a `limiter` the rate limit (if set) counts
    in-process. Without `models` the settings' query-side models are built here (none unless
    configured), their clients living as long as the process. Without `tenant_log` Stats
    shows a tenant no log positions and no dead-letter count."""
    models = models if models is not None else build_models(settings)
    recall_cache = RecallCache(cache, codec or ProtoRecallCodec(), settings.recall_cache_ttl_s)
    lookup = Lookup(backends.vector, backends.lexical)
    shared = _Shared(lookup, recall_cache, AccessRecorder(event_log, clock, ids), clock, ids)
    reader = _reader(settings, backends, event_log, shared, models)
    rate_limit, write_rate = _rate_limits(settings, limiter or MemoryRateLimiter())
    stats = StatsView(reader, tenant_log, settings.backend_timeout_s)
    lister = Lister(backends.vector, backends.graph, settings.backend_timeout_s)
    tenants = _tenants(settings, backends, event_log, cache, shared, tenant_log, purge)
    return Gateway(
        writer=_writer(settings, event_log, cache, shared, backends.vector),
        reader=reader,
        access=shared.access,
        rate_limit=rate_limit,
        write_rate=write_rate,
        stats=stats,
        lister=lister,
        tenants=tenants,
    )


def _rate_limits(
    settings: Settings, limiter: RateLimiter
) -> tuple[TenantRateLimit, TenantRateLimit]:
    """Per tenant: requests of every RPC, and memories written."""
    requests = RateLimitConfig(
        settings.rate_limit_rps,
        settings.rate_limit_window_s,
        tenant_label=settings.metrics_tenant_label,
    )
    writes = RateLimitConfig(
        settings.write_rate_limit,
        settings.rate_limit_window_s,
        tenant_label=settings.metrics_tenant_label,
        key_prefix=WRITE_KEY_PREFIX,
        counted="memories",
    )
    return TenantRateLimit(limiter, requests), TenantRateLimit(limiter, writes)


def build_admin(
    settings: Settings,
    control: ConsolidationControl,
    clock: Callable[[], datetime] = utcnow,
    ids: Callable[[], str] = new_id,
) -> Admin:
    config = AdminConfig(settings.dry_run_poll_ms / 1000.0, settings.backend_timeout_s)
    return Admin(control, config, clock, ids)


async def open_gateway(settings: Settings) -> tuple[Gateway, Callable[[], Awaitable[None]]]:
    """The gateway on real clients, JetStream (streams ensured) and the cache backend.

    Returns it with the function that closes everything it opened.
    """
    # First: it opens no connection yet, but fails fast on a missing password file.
    coordination = open_coordination(settings.cache, max_entries=settings.cache_max_entries)
    channels = Channels(settings.max_message_bytes, settings.client_tls)
    nc, js = await jetstream.connect(settings.nats, "gateway")
    try:
        await jetstream.ensure_streams(js, settings.nats)
    except Exception:
        await nc.close()
        raise
    backends = Backends(
        vector=VectorClient(channels.open(settings.vector_addr)),
        lexical=LexicalClient(channels.open(settings.lexical_addr)),
        graph=GraphClient(channels.open(settings.graph_addr)),
        ranker=ScoringRanker(ScoringClient(channels.open(settings.scoring_addr))),
    )
    models = build_models(settings)
    letters = JetStreamDeadLetters(js, settings.publish_timeout_s)
    gateway = build_gateway(
        settings,
        backends,
        JetStreamLog(js, settings.publish_timeout_s),
        coordination.cache,
        limiter=coordination.limiter,
        models=models,
        tenant_log=letters,
        purge=NatsTenantPurge(js),
    )
    admin = build_admin(settings, NatsConsolidation(js, settings.publish_timeout_s))
    dead_letters = DeadLetters(letters, settings.backend_timeout_s)
    feed = Subscriptions(
        JetStreamFeed(js),
        FeedConfig(
            per_tenant=settings.subscribe_per_tenant,
            total=settings.subscribe_total,
            tenant_label=settings.metrics_tenant_label,
        ),
    )
    gateway = replace(gateway, admin=admin, dead_letters=dead_letters, feed=feed)

    closed = False

    async def close() -> None:
        nonlocal closed
        if closed:
            return
        closed = True
        await gateway.access.drain()
        await nc.drain()
        await channels.close()
        await coordination.close()
        await models.close()

    return gateway, close
