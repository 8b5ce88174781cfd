"""Builds the worker from settings: the three store clients, the access tracker, and the
passes with their runner and scheduler.

Tests pass their own stores, log, checkpoints and lease; whatever is not passed is built
from settings. ``open_consolidate`` builds the NATS adapters (request stream, KV bucket)
around a connection.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from nats.js import JetStreamContext

from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.vector import VectorClient
from engram_consolidate.adapters.checkpoints import KvCheckpoints, open_bucket
from engram_consolidate.adapters.log import (
    LogEvents,
    LogMarks,
    LogTenants,
    ensure_request_stream,
)
from engram_consolidate.adapters.state import (
    KvKeeperCheckpoints,
    NatsKeeperSource,
    NatsStateLog,
    NatsStateSink,
    ensure_state_stream,
)
from engram_consolidate.config import Settings
from engram_consolidate.service import (
    AccessTracker,
    Checkpoints,
    EventSink,
    GraphStore,
    PassName,
    PassRunner,
    PassSettings,
    RelevanceWriter,
    RunnerConfig,
    Schedule,
    Scheduler,
    Stores,
    TenantSource,
    VectorStore,
    pass_factory,
)
from engram_consolidate.service.ports import AccessStore, AccessWriter, ChangeMarks
from engram_consolidate.service.rebuild import (
    Generational,
    Maintenance,
    RebuildConfig,
    maintenance_factory,
)
from engram_consolidate.service.state import KeeperConfig, StateKeeper
from engram_consolidate.service.state_apply import (
    GraphTarget,
    LexicalTarget,
    StateLog,
    VectorTarget,
)
from engram_core.errors import InvalidArgument
from engram_core.ids import new_id
from engram_core.model import utcnow
from engram_core.ports import Embedder, Generations, Lease
from engram_embed.factory import EmbedSettings, make_embedder, similar_cosine
from engram_platform.coordination import open_coordination
from engram_platform.grpc_client import Channels


class VectorAll(VectorStore, AccessStore, Protocol):
    """Everything the worker does with vector: access tracking and the passes."""


class LexicalStore(RelevanceWriter, AccessWriter, Protocol):
    """Everything the worker does with lexical."""


class GraphWrites(GraphStore, AccessWriter, Protocol):
    """Everything the worker does with graph."""


@dataclass
class Consolidate:
    tracker: AccessTracker
    scheduler: Scheduler
    channels: Channels
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    keeper: StateKeeper | None = None  # the latest-state log's keeper (with NATS only)
    lease: Lease | None = None

    async def close(self) -> None:
        await self.channels.close()
        for close in self.closers:
            await close()


def holder_name() -> str:
    """This replica, as a lease holder: host, pid and a random part (a restarted process
    on the same host and pid is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def pass_settings(settings: Settings) -> PassSettings:
    """The passes' rules; the cosine of "near" is the embedding model's unless set."""
    near = similar_cosine(settings.embed)
    return PassSettings(
        decay=settings.decay.core(),
        forget=settings.forget.core(),
        associate=settings.associate.core(near),
        cluster=settings.cluster.core(near),
        cluster_neighbours=settings.cluster.neighbours,
        associate_incremental_max=settings.associate.incremental_max,
    )


def schedule_of(settings: Settings) -> Schedule:
    s = settings.schedule
    return Schedule(
        tick_s=s.tick_s,
        intervals={
            PassName.DECAY: s.decay_interval_s,
            PassName.ASSOCIATE: s.associate_interval_s,
            PassName.CLUSTER: s.cluster_interval_s,
            PassName.FORGET: s.forget_interval_s,
        },
        failure_retry_s=s.failure_retry_s,
        max_concurrent=s.max_concurrent,
    )


def runner_config(settings: Settings) -> RunnerConfig:
    return RunnerConfig(
        lease_ttl_s=settings.lease_ttl_s,
        step_pause_s=settings.page_pause_s,
        duty=settings.pass_duty,
        step_retries=settings.page_retries,
        retry_base_s=settings.page_retry_base_s,
        samples=settings.samples,
        full_every_s=settings.schedule.associate_full_interval_s,
    )


def build(
    settings: Settings,
    *,
    events: EventSink,
    checkpoints: Checkpoints,
    tenants: TenantSource,
    vector: VectorAll | None = None,
    lexical: LexicalStore | None = None,
    graph: GraphWrites | None = None,
    lease: Lease | None = None,
    clock: Callable[[], datetime] = utcnow,
    ids: Callable[[], str] = new_id,
    maintenance: Callable[[Stores], Maintenance] | None = None,
    marks: ChangeMarks | None = None,
) -> Consolidate:
    channels = Channels(settings.max_message_bytes, settings.client_tls)
    closers: list[Callable[[], Awaitable[None]]] = []
    v = vector if vector is not None else VectorClient(channels.open(settings.vector_addr))
    lx = lexical if lexical is not None else LexicalClient(channels.open(settings.lexical_addr))
    g = graph if graph is not None else GraphClient(channels.open(settings.graph_addr))
    if lease is None:
        coordination = open_coordination(settings.cache, max_entries=1)
        lease = coordination.lease
        closers.append(coordination.close)
    tracker = AccessTracker(
        v,
        lx,
        g,
        write_timeout_s=settings.write_timeout_s,
        read_chunk=settings.read_chunk,
        write_chunk=settings.write_chunk,
    )
    stores = Stores(
        v,
        lx,
        g,
        events,
        settings.write_timeout_s,
        settings.page_size,
        settings.publish_concurrency,
        settings.read_chunk,
        marks,
    )
    runner = PassRunner(
        checkpoints, lease, holder_name(), runner_config(settings), clock, marks=marks
    )
    extra = maintenance_factory(stores, maintenance(stores)) if maintenance else None
    scheduler = Scheduler(
        runner,
        pass_factory(stores, pass_settings(settings), extra),
        checkpoints,
        tenants,
        schedule_of(settings),
        clock,
        ids,
    )
    return Consolidate(
        tracker=tracker, scheduler=scheduler, channels=channels, closers=closers, lease=lease
    )


def _missing(what: str) -> Lease:
    raise RuntimeError(f"no {what} built")


class Embedders:
    """The embedders Sync and Rebuild may use, by model name, each built on first use: the
    one of ``embed`` (ingest's) and the optional ``next_embed`` (a model being rolled in)."""

    def __init__(self, configured: list[EmbedSettings]) -> None:
        self._configured = configured
        self._built: list[Embedder | None] = [None] * len(configured)

    def _get(self, i: int) -> Embedder:
        built = self._built[i]
        if built is None:
            built = self._built[i] = make_embedder(self._configured[i])
        return built

    def get(self, model: str) -> Embedder:
        """The embedder of ``model`` ("" = the default one)."""
        if not model:
            return self._get(0)
        for i in range(len(self._configured)):
            if self._get(i).model_name == model:
                return self._get(i)
        raise InvalidArgument("embedding_model", f"this worker has no embedder for {model!r}")


async def _live_model(generations: Generations) -> str:
    listed = await generations.list_generations()
    return next((g.embedding_model for g in listed if g.live), "")


def open_maintenance(
    settings: Settings,
    stores: Stores,
    state: StateLog,
    tenants: TenantSource,
    vector: VectorClient,
    lexical: LexicalClient,
    graph: GraphClient,
) -> Maintenance:
    """Sync and Rebuild over the real clients: vector repairs embed with the live
    generation's model, a vector rebuild with its new generation's."""
    configured = [settings.embed, *([settings.next_embed] if settings.next_embed else [])]
    write_s, embed_s = settings.write_timeout_s, settings.rebuild.embed_timeout_s
    embedders = Embedders(configured)
    rules = settings.entities.rules()

    async def live_embedder() -> Embedder:
        return embedders.get(await _live_model(vector))

    def vector_target(generation: str, model: str) -> VectorTarget:
        async def embedder() -> Embedder:
            return embedders.get(model)

        bound = vector.in_generation(generation)
        return VectorTarget(
            bound, embedder, write_timeout_s=write_s, embed_timeout_s=embed_s, rules=rules
        )

    def lexical_target(generation: str, model: str) -> LexicalTarget:
        return LexicalTarget(
            lexical.in_generation(generation), apply_timeout_s=settings.write_timeout_s, rules=rules
        )

    live_vector = VectorTarget(
        vector, live_embedder, write_timeout_s=write_s, embed_timeout_s=embed_s, rules=rules
    )
    live_lexical = LexicalTarget(lexical, apply_timeout_s=settings.write_timeout_s, rules=rules)
    return Maintenance(
        state=state,
        targets={
            "vector": live_vector,
            "lexical": live_lexical,
            "graph": GraphTarget(graph, apply_timeout_s=settings.write_timeout_s, rules=rules),
        },
        graph=graph,
        generational={
            "vector": Generational(vector, live_vector, vector_target),
            "lexical": Generational(lexical, live_lexical, lexical_target),
        },
        tenants=tenants,
        config=RebuildConfig(final_wait_s=settings.rebuild.final_wait_s),
    )


async def open_consolidate(settings: Settings, js: JetStreamContext) -> Consolidate:
    """The worker on real clients, the log (request and state streams ensured), the KV
    bucket, and the state keeper."""
    await ensure_request_stream(js, settings.nats)
    await ensure_state_stream(js, settings.nats)
    kv = await open_bucket(js, settings.nats.stream_replicas)
    tenants = LogTenants(js)
    state = NatsStateLog(js, kv)
    channels = Channels(settings.max_message_bytes, settings.client_tls)
    vector = VectorClient(channels.open(settings.vector_addr))
    lexical = LexicalClient(channels.open(settings.lexical_addr))
    graph = GraphClient(channels.open(settings.graph_addr))
    built = build(
        settings,
        events=LogEvents(js, settings.write_timeout_s),
        checkpoints=KvCheckpoints(kv),
        tenants=tenants,
        vector=vector,
        lexical=lexical,
        graph=graph,
        maintenance=lambda stores: open_maintenance(
            settings, stores, state, tenants, vector, lexical, graph
        ),
        marks=LogMarks(js),
    )
    built.closers.append(channels.close)
    if settings.state.enabled:
        keeper = settings.state
        built.keeper = StateKeeper(
            NatsKeeperSource(js, settings.ack_wait_s, 2 * keeper.batch_size),
            NatsStateSink(js, settings.write_timeout_s, keeper.publish_concurrency),
            KvKeeperCheckpoints(kv),
            built.lease or _missing("lease"),
            holder_name(),
            KeeperConfig(
                batch_size=keeper.batch_size,
                fetch_wait_s=keeper.fetch_wait_s,
                lease_ttl_s=settings.lease_ttl_s,
            ),
            utcnow,
        )
    return built
