"""The read path (DESIGN §4): Recall plans, then runs its stages (service/recall/);
Get, Related and Stats."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from engram_core import validation as v
from engram_core.errors import NotFound
from engram_core.model import Memory
from engram_gateway.service import metrics
from engram_gateway.service.access import AccessRecorder
from engram_gateway.service.admission import Admission, AdmissionConfig
from engram_gateway.service.deadline import Deadline, answered_within
from engram_gateway.service.decompose import RuleDecomposer
from engram_gateway.service.lookup import Lookup
from engram_gateway.service.models import QueryModels
from engram_gateway.service.ports import (
    EventLog,
    GraphPort,
    LexicalPort,
    QueryDecomposer,
    RankerPort,
    RecallResult,
    VectorPort,
)
from engram_gateway.service.recall import (
    Deps,
    Plan,
    PostRank,
    ReadConfig,
    RecallMode,
    RecallRequest,
    answer,
    plan_recall,
)
from engram_gateway.service.recall_cache import RecallCache
from engram_gateway.service.watermark import WatermarkCache
from engram_platform.telemetry import annotate, tracer

log = logging.getLogger(__name__)
_tracer = tracer(__name__)  # the recall stages' spans are this module's

__all__ = [
    "PostRank",
    "ReadConfig",
    "Reader",
    "RecallMode",
    "RecallRequest",
    "RelatedItem",
    "Stats",
]


@dataclass(frozen=True, slots=True)
class RelatedItem:
    memory: Memory
    type: str
    strength: float
    depth: int


@dataclass(frozen=True, slots=True)
class Stats:
    tenant: str
    counts: dict[str, int]  # per store; -1 when the store did not answer
    watermark: int
    last_sequence: int


class Reader:
    def __init__(
        self,
        vector: VectorPort,
        lexical: LexicalPort,
        graph: GraphPort,
        ranker: RankerPort,
        log_: EventLog,
        lookup: Lookup,
        recall_cache: RecallCache,
        watermark: WatermarkCache,
        access: AccessRecorder,
        config: ReadConfig,
        clock: Callable[[], datetime],
        models: QueryModels | None = None,
        decomposer: QueryDecomposer | None = None,
        admission: Admission | None = None,
    ) -> None:
        self._vector = vector
        self._lexical = lexical
        self._graph = graph
        self._ranker = ranker
        self._log = log_
        self._lookup = lookup
        self._recall_cache = recall_cache
        self._watermark = watermark
        self._access = access
        self._config = config
        self._clock = clock
        self._models = models or QueryModels()
        self._decomposer = decomposer or RuleDecomposer()
        self._admission = admission or Admission(AdmissionConfig(limit=0))

    # --- Recall ---------------------------------------------------------------------

    def _deps(self) -> Deps:
        return Deps(
            vector=self._vector,
            lexical=self._lexical,
            graph=self._graph,
            ranker=self._ranker,
            lookup=self._lookup,
            config=self._config,
            clock=self._clock,
            models=self._models,
            decomposer=self._decomposer,
        )

    async def recall(self, tenant: str, req: RecallRequest, deadline: Deadline) -> RecallResult:
        started = time.perf_counter()
        plan = plan_recall(req, self._config, self._models, self._clock(), tenant)
        key = self._recall_cache.key(tenant, plan.fingerprint())
        if plan.min_sequence:  # before the cache, whose hits must not tell the log's position
            await self._watermark.check_issued(tenant, plan.min_sequence, deadline)
        # Not an answer from before this gateway's own writes were applied (recall_cache).
        written = await self._recall_cache.written(tenant)
        result = await self._recall_cache.get(key, max(plan.min_sequence, written))
        if result is None:
            result = await self._answer(tenant, plan, deadline, key, written)
        result = replace(result, query_ms=(time.perf_counter() - started) * 1000.0)
        metrics.answers.add(1, {"outcome": "degraded" if result.degraded else "complete"})
        self._access.record(tenant, [s.memory.id for s in result.results])
        return result

    async def _answer(
        self, tenant: str, plan: Plan, deadline: Deadline, key: str, written: int
    ) -> RecallResult:
        """The recall computed (in its admission turn) and cached unless degraded."""
        epoch = self._recall_cache.epoch(tenant)
        if plan.min_sequence:
            watermark = await self._watermark.wait_for(
                plan.min_sequence, deadline, self._config.min_sequence_poll_s, tenant
            )
        else:
            # Only labels the answer for the cache: never a wait on the log.
            watermark = self._watermark.known() if written else 0
        async with self._admission.turn(tenant, deadline) as waited:
            annotate("engram.recall.queue_wait_s", waited)
            metrics.stage_took("queue", waited)
            result = await answer(self._deps(), tenant, plan, deadline, _tracer)
        if not result.degraded:
            await self._recall_cache.put(tenant, key, epoch, watermark, result, written)
        return result

    # --- Get, Related, Stats ------------------------------------------------------------

    async def _applied(self, tenant: str, min_sequence: int, deadline: Deadline) -> None:
        """Wait, as recall does, until the tenant's write at ``min_sequence`` is applied."""
        if min_sequence:
            await self._watermark.check_issued(tenant, min_sequence, deadline)
            await self._watermark.wait_for(
                min_sequence, deadline, self._config.min_sequence_poll_s, tenant
            )

    async def get(self, tenant: str, id: str, deadline: Deadline, min_sequence: int = 0) -> Memory:
        mid = v.check_id(id, "id")
        await self._applied(tenant, min_sequence, deadline)
        memory = await self._lookup.one(tenant, mid, deadline.cap(self._config.backend_timeout_s))
        self._access.record(tenant, [mid])
        return memory

    async def related(
        self,
        tenant: str,
        id: str,
        depth: int,
        types: Sequence[str],
        limit: int,
        deadline: Deadline,
        min_sequence: int = 0,
    ) -> list[RelatedItem]:
        limits = self._config.limits
        mid = v.check_id(id, "id")
        hops = v.check_depth(depth, "depth", limits)
        kinds = v.check_relation_types(types, "types")
        count = v.check_limit(limit, "limit", limits.default_related_limit, limits.max_limit)
        await self._applied(tenant, min_sequence, deadline)
        cap = self._config.backend_timeout_s
        hits = await answered_within(
            "graph",
            deadline.cap(cap),
            lambda t: self._graph.related(tenant, mid, hops, kinds, count, timeout=t),
        )
        # One read checks the seed exists and fetches every neighbour.
        found = await self._lookup.many(
            tenant, list(dict.fromkeys([mid, *(h.id for h in hits)])), deadline.cap(cap)
        )
        if mid not in found:
            raise NotFound(f"memory {mid} not found")
        return [
            RelatedItem(found[h.id], h.type, h.strength, h.depth) for h in hits if h.id in found
        ]

    async def stats(self, tenant: str, deadline: Deadline) -> Stats:
        cap = deadline.cap(self._config.backend_timeout_s)

        async def count(name: str, call: Callable[[float], Awaitable[int]]) -> int:
            try:
                return await answered_within(name, cap, call)
            except Exception as exc:
                log.warning("count from %s failed: %s", name, exc)
                return -1

        stores: dict[str, Callable[[float], Awaitable[int]]] = {
            "vector": lambda t: self._vector.count(tenant, timeout=t),
            "lexical": lambda t: self._lexical.count(tenant, timeout=t),
            "graph": lambda t: self._graph.count(tenant, timeout=t),
        }
        counts, watermark, last = await asyncio.gather(
            asyncio.gather(*(count(n, c) for n, c in stores.items())),
            answered_within("log", cap, lambda _t: self._log.watermark()),
            answered_within("log", cap, lambda _t: self._log.last_sequence()),
        )
        return Stats(tenant, dict(zip(stores, counts, strict=True)), watermark, last)
