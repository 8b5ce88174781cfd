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
from engram_consolidate.adapters.log import LogEvents, LogTenants, ensure_request_stream
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
from engram_consolidate.service.ports import AccessStore, AccessWriter
from engram_core.ids import new_id
from engram_core.model import utcnow
from engram_core.ports import Lease
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

    async def close(self) -> None:
        await self.channels.close()
        for close in self.closers:
            await close()


def holder_name() -> str:
    """This replica, as a lease holder: host, pid and a random part (a restarted process
    on the same host and pid is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
) -> Consolidate:
    channels = Channels(settings.max_message_bytes)
    closers: list[Callable[[], Awaitable[None]]] = []
    v: VectorAll = (
        vector if vector is not None else VectorClient(channels.open(settings.vector_addr))
    )
    lx: LexicalStore = (
        lexical if lexical is not None else LexicalClient(channels.open(settings.lexical_addr))
    )
    g: GraphWrites = graph if graph is not None else GraphClient(channels.open(settings.graph_addr))
    if lease is None:
        coordination = open_coordination(settings.cache, max_entries=1)
        lease = coordination.lease
        closers.append(coordination.close)

    tracker = AccessTracker(
        v, lx, g, write_timeout_s=settings.write_timeout_s, read_chunk=settings.read_chunk
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
    )
    passes = PassSettings(
        decay=settings.decay.core(),
        forget=settings.forget.core(),
        associate=settings.associate.core(),
        cluster=settings.cluster.core(),
        cluster_neighbours=settings.cluster.neighbours,
    )
    runner = PassRunner(
        checkpoints,
        lease,
        holder_name(),
        RunnerConfig(
            lease_ttl_s=settings.lease_ttl_s,
            step_pause_s=settings.page_pause_s,
            step_retries=settings.page_retries,
            retry_base_s=settings.page_retry_base_s,
            samples=settings.samples,
        ),
        clock,
    )
    scheduler = Scheduler(
        runner,
        pass_factory(stores, passes),
        checkpoints,
        tenants,
        schedule_of(settings),
        clock,
        ids,
    )
    return Consolidate(tracker=tracker, scheduler=scheduler, channels=channels, closers=closers)


async def open_consolidate(settings: Settings, js: JetStreamContext) -> Consolidate:
    """The worker on real clients, the log (request stream ensured) and the KV bucket."""
    await ensure_request_stream(js, settings.nats)
    kv = await open_bucket(js, settings.nats.stream_replicas)
    return build(
        settings,
        events=LogEvents(js, settings.write_timeout_s),
        checkpoints=KvCheckpoints(kv),
        tenants=LogTenants(js),
    )
