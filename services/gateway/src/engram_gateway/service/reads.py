"""The read path (DESIGN §4): Recall fans out, merges and ranks; Get, Related, Stats."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import TypeVar

from engram_core import scoring
from engram_core import validation as v
from engram_core.errors import DeadlineExceeded, InvalidArgument, NotFound, Unavailable
from engram_core.model import Filter, Hit, Memory, TagMatch, TagMode
from engram_gateway.service.access import AccessRecorder
from engram_gateway.service.deadline import Budget, Deadline
from engram_gateway.service.lookup import Lookup
from engram_gateway.service.merge import merge, missing_memories, pool_size, with_relations
from engram_gateway.service.ports import (
    EventLog,
    GraphPort,
    LexicalPort,
    RankerPort,
    RecallResult,
    VectorPort,
)
from engram_gateway.service.query import entity_keys, keywords
from engram_gateway.service.recall_cache import RecallCache
from engram_gateway.service.watermark import WatermarkCache
from engram_platform.telemetry import tracer

log = logging.getLogger(__name__)
_tracer = tracer(__name__)
T = TypeVar("T")


class RecallMode(Enum):
    """Which retrieval streams a recall queries (issue #4's modes); scoring ranks the rest."""

    HYBRID = "hybrid"  # every stream: vector, lexical, graph
    VECTOR = "vector"
    BM25 = "bm25"
    GRAPH = "graph"

    @property
    def backends(self) -> frozenset[str]:
        return _MODE_BACKENDS[self]


_MODE_BACKENDS: dict[RecallMode, frozenset[str]] = {
    RecallMode.HYBRID: frozenset({"vector", "lexical", "graph"}),
    RecallMode.VECTOR: frozenset({"vector"}),
    RecallMode.BM25: frozenset({"lexical"}),
    RecallMode.GRAPH: frozenset({"graph"}),
}


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """A recall as the client sent it (unvalidated)."""

    query: str
    limit: int = 0
    tags: Sequence[str] = ()
    tag_mode: TagMode = TagMode.ANY
    tag_match: TagMatch = TagMatch.EXACT
    exclude_tags: Sequence[str] = ()
    types: Sequence[str] = ()
    start: str = ""
    end: str = ""
    min_sequence: int = 0
    fusion: scoring.Fusion | None = None
    include_archived: bool = False
    mode: RecallMode = RecallMode.HYBRID


@dataclass(frozen=True, slots=True)
class _Plan:
    query: str
    limit: int
    flt: Filter
    fusion: scoring.Fusion | None
    min_sequence: int
    mode: RecallMode = RecallMode.HYBRID

    def fingerprint(self) -> str:
        """Identifies the answer (min_sequence aside: the cache entry's watermark covers it)."""
        f = self.flt
        parts = (
            self.query,
            self.limit,
            f.tags,
            f.tag_mode.value,
            f.tag_match.value,
            f.exclude_tags,
            f.types,
            f.start.isoformat() if f.start else "",
            f.end.isoformat() if f.end else "",
            f.include_archived,
            self.fusion.value if self.fusion else "",
            self.mode.value,
        )
        return repr(parts)


@dataclass(frozen=True, slots=True)
class ReadConfig:
    limits: v.Limits
    max_pool: int
    relation_pool: int
    vector_budget: Budget
    lexical_budget: Budget
    graph_budget: Budget
    relations_budget: Budget
    scoring_budget: Budget
    backend_timeout_s: float
    min_sequence_poll_s: float


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


async def _bounded(name: str, timeout: float, call: Callable[[float], Awaitable[T]]) -> T:
    """One backend call within ``timeout`` (also its RPC deadline); a hang is Unavailable."""
    try:
        async with asyncio.timeout(timeout):
            return await call(timeout)
    except TimeoutError as exc:
        raise Unavailable(f"{name} did not answer within {timeout:.2f}s") from exc


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

    # --- Recall ---------------------------------------------------------------------

    def _plan(self, req: RecallRequest) -> _Plan:
        limits = self._config.limits
        start, end = v.check_time_range(req.start, req.end)
        flt = Filter(
            tags=v.check_tags(req.tags, "tags", limits),
            tag_mode=req.tag_mode,
            tag_match=req.tag_match,
            exclude_tags=v.check_tags(req.exclude_tags, "exclude_tags", limits),
            types=v.check_types(req.types, "types", limits),
            start=start,
            end=end,
            include_archived=req.include_archived,
        )
        return _Plan(
            query=v.check_query(req.query, "query", limits),
            limit=v.check_limit(req.limit, "limit", limits.default_limit, limits.max_limit),
            flt=flt,
            fusion=req.fusion,
            min_sequence=req.min_sequence,
            mode=req.mode,
        )

    async def recall(self, tenant: str, req: RecallRequest, deadline: Deadline) -> RecallResult:
        started = time.perf_counter()
        plan = self._plan(req)
        key = self._recall_cache.key(tenant, plan.fingerprint())
        result = await self._recall_cache.get(key, plan.min_sequence)
        if result is None:
            epoch = self._recall_cache.epoch(tenant)
            watermark = await self._wait(plan.min_sequence, deadline) if plan.min_sequence else 0
            result = await self._search(tenant, plan, deadline)
            if not result.degraded:
                await self._recall_cache.put(tenant, key, epoch, watermark, result)
        result = replace(result, query_ms=(time.perf_counter() - started) * 1000.0)
        self._access.record(tenant, [s.memory.id for s in result.results])
        return result

    async def _wait(self, min_sequence: int, deadline: Deadline) -> int:
        seen = 0
        try:
            seen = await self._watermark.get()
        except Unavailable as exc:
            log.warning("watermark read failed: %s", exc)
        if seen >= min_sequence:
            return seen
        # A sequence the log never issued would only burn the caller's whole deadline.
        try:
            last = await self._log.last_sequence()
        except Unavailable as exc:
            log.warning("last_sequence read failed: %s", exc)
        else:
            if min_sequence > last:
                raise InvalidArgument(
                    "min_sequence", f"{min_sequence} is beyond the log's last sequence {last}"
                )
        return await self._watermark.wait_for(
            min_sequence, deadline, self._config.min_sequence_poll_s
        )

    async def _search(self, tenant: str, plan: _Plan, deadline: Deadline) -> RecallResult:
        cfg = self._config
        flt, text = plan.flt, plan.query
        pool = pool_size(plan.limit, cfg.max_pool)
        wanted = plan.mode.backends
        calls: dict[str, tuple[Budget, Callable[[float], Awaitable[list[Hit]]]]] = {}
        if "vector" in wanted:
            calls["vector"] = (
                cfg.vector_budget,
                lambda t: self._vector.search(tenant, flt, pool, query=text, timeout=t),
            )
        if "lexical" in wanted:
            calls["lexical"] = (
                cfg.lexical_budget,
                lambda t: self._lexical.search(tenant, text, flt, pool, timeout=t),
            )
        ents, words = entity_keys(text), keywords(text)
        if "graph" in wanted and (ents or words):
            calls["graph"] = (
                cfg.graph_budget,
                lambda t: self._graph.search(tenant, ents, words, flt, pool, timeout=t),
            )
        if not calls:  # graph alone, and the query names nothing it could look up
            return RecallResult(results=(), streams=(), degraded=())
        budgets = {name: deadline.budget(b) for name, (b, _) in calls.items()}
        outcomes = await asyncio.gather(
            *(self._try(name, budgets[name], call) for name, (_, call) in calls.items())
        )
        answers = {n: hits for n, hits in zip(calls, outcomes, strict=True) if hits is not None}
        degraded = [name for name in calls if name not in answers]
        if not answers:
            raise Unavailable(f"no retrieval stream answered ({', '.join(degraded)})")

        fetched: dict[str, Memory] = {}
        missing = missing_memories(answers)
        if missing:
            try:
                fetched = await self._lookup.many(
                    tenant, missing, deadline.cap(cfg.backend_timeout_s)
                )
            except (Unavailable, DeadlineExceeded) as exc:
                log.warning("%d hits without a memory dropped: %s", len(missing), exc)
        candidates = merge(answers, fetched)
        if not candidates:
            return RecallResult(results=(), streams=tuple(answers), degraded=tuple(degraded))

        # The relation component is a graph signal: a mode that leaves the graph out (a
        # single-stream baseline) leaves it out too.
        if (
            cfg.relation_pool
            and len(candidates) > 1
            and "graph" in wanted
            and "graph" not in degraded
        ):
            top = [c.memory.id for c in candidates[: cfg.relation_pool]]
            relations = await self._try(
                "relations",
                self._budget_or_zero(deadline, cfg.relations_budget),
                lambda t: self._graph.relations(tenant, top, timeout=t),
            )
            if relations is None:
                degraded.append("relations")
            else:
                candidates = with_relations(candidates, relations)

        ranked = await self._try(
            "scoring",
            self._budget_or_zero(deadline, cfg.scoring_budget),
            lambda t: self._ranker.rank(
                text, candidates, plan.fusion, plan.limit, flt.tags, timeout=t
            ),
        )
        if ranked is None:
            degraded.append("scoring")
            # Local RRF of the streams: the answer stays ranked while scoring is down.
            ranked = scoring.rank(
                candidates,
                scoring.Query(now=self._clock(), text=text, tags=flt.tags),
                scoring.Params(fusion=scoring.Fusion.RRF, limit=plan.limit),
            )
        return RecallResult(results=tuple(ranked), streams=tuple(answers), degraded=tuple(degraded))

    @staticmethod
    def _budget_or_zero(deadline: Deadline, share: Budget) -> float:
        try:
            return deadline.budget(share)
        except DeadlineExceeded:
            return 0.0

    @staticmethod
    async def _try(name: str, budget: float, call: Callable[[float], Awaitable[T]]) -> T | None:
        """A degradable step: its answer, or None (logged) when it failed or ran out of time."""
        with _tracer.start_as_current_span(f"engram.gateway/{name}") as span:
            span.set_attribute("engram.budget_s", budget)
            if budget <= 0:
                log.warning("%s skipped: no time left", name)
            else:
                try:
                    async with asyncio.timeout(budget):
                        return await call(budget)
                except TimeoutError:
                    log.warning("%s timed out after %.3fs", name, budget)
                except Exception as exc:  # one backend's failure degrades, never fails, recall
                    log.warning("%s failed: %s", name, exc)
            span.set_attribute("engram.degraded", True)
            return None

    # --- Get, Related, Stats ------------------------------------------------------------

    async def get(self, tenant: str, id: str, deadline: Deadline) -> Memory:
        mid = v.check_id(id, "id")
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
    ) -> list[RelatedItem]:
        limits = self._config.limits
        mid = v.check_id(id, "id")
        hops = v.check_depth(depth, "depth", limits)
        kinds = v.check_relation_types(types, "types")
        count = v.check_limit(limit, "limit", limits.default_related_limit, limits.max_limit)
        cap = self._config.backend_timeout_s
        hits = await _bounded(
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
                return await _bounded(name, cap, call)
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
            _bounded("log", cap, lambda _t: self._log.watermark()),
            _bounded("log", cap, lambda _t: self._log.last_sequence()),
        )
        return Stats(tenant, dict(zip(stores, counts, strict=True)), watermark, last)
