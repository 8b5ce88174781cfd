"""The read path (DESIGN §4): Recall fans out, merges and ranks; Get, Related, Stats."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

from engram_core import scoring
from engram_core import validation as v
from engram_core.errors import DeadlineExceeded, InvalidArgument, NotFound, Unavailable
from engram_core.filters import matches
from engram_core.model import META_PATTERN, Filter, Hit, Memory, Relation, TagMatch, TagMode
from engram_core.ordering import Sort
from engram_core.relations import ORIGIN_USER
from engram_core.scoring import Candidate, ScoredCandidate
from engram_core.state import StateMode, apply_state, chain_frontier, heads_to_fetch, validity
from engram_core.timequery import resolve_window
from engram_gateway.service import metrics
from engram_gateway.service.access import AccessRecorder
from engram_gateway.service.admission import Admission, AdmissionConfig
from engram_gateway.service.context import (
    NARROWING,
    NARROWINGS,
    ContextConfig,
    Window,
    inside,
    preceding,
    seed_windows,
    window_filter,
    with_neighbours,
)
from engram_gateway.service.deadline import Budget, Deadline
from engram_gateway.service.decompose import RuleDecomposer
from engram_gateway.service.expand import (
    ExpandConfig,
    ExpandOptions,
    ExpandRequest,
    expand,
    merge_expanded,
    plan_expansion,
)
from engram_gateway.service.lookup import Lookup
from engram_gateway.service.merge import (
    STREAM_OF_BACKEND,
    merge,
    missing_memories,
    pool_size,
    vector_pool,
    with_relations,
)
from engram_gateway.service.models import ModelTrace, QueryModels, hyde_text, tracing
from engram_gateway.service.multiquery import (
    CandidateConfig,
    check_per_query_limit,
    check_queries,
    decomposed,
    merge_answers,
    sub_queries,
    with_provenance,
)
from engram_gateway.service.pagerank import GraphRerankConfig, check_alpha, graph_rerank
from engram_gateway.service.ports import (
    EventLog,
    GraphPort,
    LexicalPort,
    QueryDecomposer,
    RankerPort,
    RecallResult,
    VectorPort,
)
from engram_gateway.service.postrank import (
    PostRankOptions,
    escalated_pool,
    max_rrf_score,
    postrank,
)
from engram_gateway.service.query import dense_query, entity_keys, keywords
from engram_gateway.service.recall_cache import RecallCache
from engram_gateway.service.relation_memo import RelationMemo
from engram_gateway.service.trending import TRENDING_STREAM, check_sort, is_trending, scored
from engram_gateway.service.watermark import WatermarkCache
from engram_platform.settings import SEARCH_MANY_MAX_FILTERS
from engram_platform.telemetry import annotate, tracer

log = logging.getLogger(__name__)
_tracer = tracer(__name__)
_PLAIN_RRF_WEIGHTS = scoring.Weights(context=0.0)
_SEED_WEIGHTS = scoring.Weights(context=0.0)  # seeds are picked before anyone has neighbours
T = TypeVar("T")


class RecallMode(Enum):
    """Which retrieval streams a recall queries (issue #4's modes); scoring ranks the rest."""

    HYBRID = "hybrid"  # every stream: vector, lexical, graph
    VECTOR = "vector"
    BM25 = "bm25"
    GRAPH = "graph"
    HYBRID_GRAPH = "hybrid_graph"  # hybrid, then the PageRank rerank (service/pagerank.py)

    @property
    def backends(self) -> frozenset[str]:
        return _MODE_BACKENDS[self]


_MODE_BACKENDS: dict[RecallMode, frozenset[str]] = {
    RecallMode.HYBRID: frozenset({"vector", "lexical", "graph"}),
    RecallMode.VECTOR: frozenset({"vector"}),
    RecallMode.BM25: frozenset({"lexical"}),
    RecallMode.GRAPH: frozenset({"graph"}),
    RecallMode.HYBRID_GRAPH: frozenset({"vector", "lexical", "graph"}),
}
_HYBRID_MODES = (RecallMode.HYBRID, RecallMode.HYBRID_GRAPH)


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
    time_query: str = ""
    timezone: str = ""
    state_mode: StateMode | None = None  # None: current, or all with include_archived
    diversify_by: str = ""
    max_per_group: int = 0  # 0: the configured default
    token_budget: int = 0
    min_score: float = 0.0
    exclude_types: Sequence[str] = ()
    expand: ExpandRequest = field(default_factory=ExpandRequest)  # service/expand.py
    graph_alpha: float = 0.0  # hybrid_graph; 0: the configured default
    hyde: bool | None = None  # None: the setting's default (service/models.py)
    rerank: bool | None = None
    # Candidate generation (service/multiquery.py, decompose.py, trending.py).
    queries: Sequence[str] = ()
    per_query_limit: int = 0  # 0: the pool
    decompose: bool | None = None  # None: the setting's default
    sort: str = ""  # trending only: importance (default) | recency | relevance | access_count
    focus: scoring.Focus = field(default_factory=scoring.Focus)  # validated in _plan
    recency_bias: scoring.RecencyBias | None = None  # None: the scoring service's default
    embedding: Sequence[float] = ()  # the query's vector: the model is skipped


@dataclass(frozen=True, slots=True)
class _Plan:
    query: str
    limit: int
    flt: Filter
    fusion: scoring.Fusion | None
    min_sequence: int
    mode: RecallMode = RecallMode.HYBRID
    state_mode: StateMode = StateMode.CURRENT
    post: PostRankOptions = field(default_factory=PostRankOptions)
    escalation_floor: float = 0.0
    expand: ExpandOptions = field(default_factory=ExpandOptions)
    graph_alpha: float = 0.0
    hyde: bool = False
    rerank: bool = False
    hypothesis: str = ""  # HyDE's answer, set once the recall runs (not part of the key)
    queries: tuple[str, ...] = ()  # beside `query` ("" when only these were sent)
    per_query_limit: int = 0
    decompose: bool = False
    sort: Sort | None = None  # set: a trending recall
    decomposed: tuple[str, ...] = ()  # the decomposer's sub-queries, once run (not in the key)
    focus: scoring.Focus = field(default_factory=scoring.Focus)
    recency_bias: scoring.RecencyBias | None = None
    embedding: tuple[float, ...] = ()

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
            f.exclude_types,
            # The resolved window: a relative time_query ("last 7 days") keys on its instants.
            f.start.isoformat() if f.start else "",
            f.end.isoformat() if f.end else "",
            f.include_archived,
            self.fusion.value if self.fusion else "",
            self.mode.value,
            self.state_mode.value,
            self.post,  # every post-ranking knob, request fields and settings alike
            self.escalation_floor,
            self.expand,  # validated expansion, settings included
            self.graph_alpha,
            self.hyde,
            self.rerank,
            self.queries,
            self.per_query_limit,
            self.decompose,
            self.sort.value if self.sort else "",
            self.focus,
            self.recency_bias.value if self.recency_bias else "",
            self.embedding,
        )
        return repr(parts)


@dataclass(frozen=True, slots=True)
class ReadConfig:
    limits: v.Limits
    max_pool: int
    tag_pool_factor: int
    relation_pool: int
    vector_budget: Budget
    lexical_budget: Budget
    graph_budget: Budget
    relations_budget: Budget
    scoring_budget: Budget
    backend_timeout_s: float
    min_sequence_poll_s: float
    # Consolidation's edges (origin system) in the relation component too.
    relation_system_edges: bool = False
    # The graph stream in hybrid mode with weighted fusion (its weight is 0 by default).
    hybrid_graph_stream: bool = False
    # Timeline neighbours of the best candidates (hybrid mode; seeds=0 turns it off).
    context: ContextConfig = field(default_factory=ContextConfig)
    context_budget: Budget = field(default_factory=lambda: Budget(fraction=0.3, cap_s=0.5))
    # Leave the people a query names out of the text the vector stream embeds.
    dense_without_people: bool = True
    # Post-ranking (service/postrank.py); off by default except duplicate ids.
    post: PostRank = field(default_factory=lambda: PostRank())
    default_timezone: str = ""  # for time_query when the request names none
    supersession_max_hops: int = 4  # rounds of relation fetches extending supersession chains
    # Tier escalation: below this best score (weighted; RRF: share of the best possible), the
    # pool is doubled once and the recall re-run. 0: off.
    escalation_floor: float = 0.0
    # After ranking: expansion (service/expand.py) and the hybrid_graph rerank (pagerank.py).
    expand: ExpandConfig = field(default_factory=ExpandConfig)
    graph_rerank: GraphRerankConfig = field(default_factory=GraphRerankConfig)
    expand_budget: Budget = field(default_factory=lambda: Budget(fraction=0.3, cap_s=0.5))
    candidates: CandidateConfig = field(default_factory=CandidateConfig)  # multi-query, trending


@dataclass(frozen=True, slots=True)
class PostRank:
    """Settings of post-ranking; the request adds limit, min_score, diversify_by, …."""

    near_duplicates: bool = True  # drop near-identical content (off: ids only)
    near_duplicate_threshold: float = 0.0  # 0: the same words only
    shingle_size: int = 3
    floor_ratio: float = 0.0  # 0: off
    max_gap: float = 0.0  # 0: off
    min_keep: int = 1
    default_max_per_group: int = 2
    chars_per_token: float = 4.0
    # Ask scoring for this many × limit results when a knob may cut some (never > max_pool).
    overfetch: int = 3


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


@contextmanager
def _embedding_named(vector: Sequence[float]) -> Iterator[None]:
    """A client's own embedding is refused by its size, which only the vector service
    knows: name the request's field. Any other refusal stays as it is."""
    try:
        yield
    except InvalidArgument as exc:
        if vector:
            raise InvalidArgument("embedding", exc.reason) from exc
        raise


def _hyde_subject(plan: _Plan) -> str:
    """What HyDE writes its answer to: ``query``, else the first of ``queries`` (a passage
    answering all of them at once would match none); "" = nothing to ask about."""
    return plan.query or next(iter(plan.queries), "")


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

    def _plan(self, req: RecallRequest) -> _Plan:
        cfg = self._config
        limits = cfg.limits
        start, end = v.check_time_range(req.start, req.end)
        window = resolve_window(
            req.time_query,
            start,
            end,
            now=self._clock(),
            timezone=req.timezone or cfg.default_timezone,
        )
        types = v.check_types(req.types, "types", limits)
        excluded = v.check_types(req.exclude_types, "exclude_types", limits)
        if META_PATTERN not in types and META_PATTERN not in excluded:
            # Consolidation's internal summaries stay out of recall unless asked for.
            excluded = (*excluded, META_PATTERN)
        flt = Filter(
            tags=v.check_tags(req.tags, "tags", limits),
            tag_mode=req.tag_mode,
            tag_match=req.tag_match,
            exclude_tags=v.check_tags(req.exclude_tags, "exclude_tags", limits),
            types=types,
            exclude_types=excluded,
            start=window.start,
            end=window.end,
            include_archived=req.include_archived,
        )
        limit = v.check_limit(req.limit, "limit", limits.default_limit, limits.max_limit)
        p = cfg.post
        post = PostRankOptions(
            limit=limit,
            min_score=req.min_score,
            diversify_by=req.diversify_by,
            max_per_group=req.max_per_group or p.default_max_per_group,
            token_budget=req.token_budget,
            near_duplicate_threshold=p.near_duplicate_threshold,
            shingle_size=p.shingle_size,
            floor_ratio=p.floor_ratio,
            max_gap=p.max_gap,
            min_keep=p.min_keep,
            chars_per_token=p.chars_per_token,
            near_duplicates=p.near_duplicates,
        )
        state_mode = req.state_mode
        if state_mode is None:
            state_mode = StateMode.ALL if req.include_archived else StateMode.CURRENT
        candidates = cfg.candidates
        queries = check_queries(req.queries, limits, candidates.max_queries)
        sort = check_sort(req.sort, is_trending(req.query, queries))
        # "" / "*" beside `queries` (or alone: trending) is no text to search for.
        bare = req.query.strip() in ("", "*")
        decompose = candidates.decompose if req.decompose is None else req.decompose
        return _Plan(
            query="" if bare else v.check_query(req.query, "query", limits),
            queries=queries,
            per_query_limit=check_per_query_limit(req.per_query_limit, cfg.max_pool),
            decompose=decompose and not bare,
            sort=sort,
            limit=limit,
            flt=flt,
            fusion=req.fusion,
            min_sequence=req.min_sequence,
            mode=req.mode,
            state_mode=state_mode,
            post=post,
            escalation_floor=cfg.escalation_floor,
            expand=plan_expansion(req.expand, cfg.expand, limits.max_limit),
            graph_alpha=check_alpha(req.graph_alpha, cfg.graph_rerank.alpha),
            # Trending has no text for a model to work on; a sent embedding is the vector.
            hyde=self._models.wants_hyde(req.hyde) and sort is None and not req.embedding,
            rerank=self._models.wants_rerank(req.rerank) and sort is None,
            focus=v.check_focus(req.focus, "focus", limits),
            recency_bias=req.recency_bias,
            embedding=v.check_embedding(req.embedding, "embedding", has_query=not bare),
        )

    def _rank_limit(self, plan: _Plan) -> int:
        """How many results to ask scoring for: more than ``limit`` when post-ranking or
        state_mode may cut some, so the answer still fills ``limit``."""
        o, cfg = plan.post, self._config
        if plan.mode is RecallMode.HYBRID_GRAPH:
            # The rerank lifts results from below the limit, so it needs them ranked.
            pool = min(cfg.graph_rerank.pool, cfg.max_pool, cfg.limits.max_limit)
            return max(pool, self._rank_limit(replace(plan, mode=RecallMode.HYBRID)))
        # The cross-encoder may lift a result from below `limit`, so it sees its whole top N.
        least = max(plan.limit, min(self._models.rank_depth(plan.rerank), cfg.limits.max_limit))
        cuts = (
            o.min_score > 0
            or o.group_by is not None
            or o.near_duplicates
            or o.floor_ratio > 0
            or o.max_gap > 0
            or plan.state_mode is StateMode.CURRENT
        )
        if not cuts:
            return least
        # The scoring service refuses a limit above max_limit (it would degrade to local RRF).
        wider = min(cfg.post.overfetch * plan.limit, cfg.max_pool, cfg.limits.max_limit)
        return max(least, wider)

    async def recall(self, tenant: str, req: RecallRequest, deadline: Deadline) -> RecallResult:
        started = time.perf_counter()
        plan = self._plan(req)
        key = self._recall_cache.key(tenant, plan.fingerprint())
        if plan.min_sequence:  # before the cache, whose hits must not tell the log's position
            await self._watermark.check_issued(tenant, plan.min_sequence, deadline)
        # Not an answer from before this gateway's own writes were applied (recall_cache).
        written = await self._recall_cache.written(tenant)
        result = await self._recall_cache.get(key, max(plan.min_sequence, written))
        if result is None:
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
                if plan.sort is not None:
                    result = await self._trending(tenant, plan, deadline)
                else:
                    result = await self._modelled(tenant, plan, deadline)
            if not result.degraded:
                await self._recall_cache.put(tenant, key, epoch, watermark, result, written)
        result = replace(result, query_ms=(time.perf_counter() - started) * 1000.0)
        metrics.answers.add(1, {"outcome": "degraded" if result.degraded else "complete"})
        self._access.record(tenant, [s.memory.id for s in result.results])
        return result

    async def _modelled(self, tenant: str, plan: _Plan, deadline: Deadline) -> RecallResult:
        """The recall with its query-side models (service/models.py), saying what they did."""
        trace = ModelTrace()
        with tracing(trace):
            subject = _hyde_subject(plan)
            if plan.hyde and subject:  # once, before any round: escalation reuses it
                plan = replace(plan, hypothesis=await self._models.hypothesis(subject, deadline))
            result = await self._escalating(tenant, plan, deadline)
        return trace.applied_to(result)

    async def _escalating(self, tenant: str, plan: _Plan, deadline: Deadline) -> RecallResult:
        """The recall, re-run once with a doubled pool when its best score is weak."""
        if plan.decompose:  # once, before any round
            parts = await decomposed(self._decomposer, plan.query)
            plan = replace(plan, decomposed=tuple(parts))
        pool = pool_size(plan.limit, self._config.max_pool)
        result, saturated = await self._search(tenant, plan, deadline, pool)
        if plan.escalation_floor <= 0:
            return result
        scale = 1.0  # weighted fusion (the scoring service's default) scores near 0..1
        if plan.fusion is scoring.Fusion.RRF:
            weights = scoring.Weights()
            streams = [STREAM_OF_BACKEND[b] for b in result.streams]
            scale = max_rrf_score(
                [weights.get(scoring.RRF_WEIGHTS[s]) for s in streams], scoring.DEFAULT_RRF_K
            )
        wider = escalated_pool(
            result.results[0].score if result.results else None,
            floor=plan.escalation_floor,
            pool=pool,
            max_pool=self._config.max_pool,
            saturated=saturated,
            score_scale=scale,
        )
        if wider is None:
            return result
        try:
            second, _ = await self._search(tenant, plan, deadline, wider)
        except (Unavailable, DeadlineExceeded) as exc:
            log.warning("escalated recall failed, keeping the first answer: %s", exc)
            metrics.escalations.add(1, {"outcome": "failed"})
            return result
        metrics.escalations.add(1, {"outcome": "ok"})
        return replace(second, escalated=True)

    def _stream_calls(
        self,
        tenant: str,
        plan: _Plan,
        text: str,
        dense: str,
        pool: int,
        vector: Sequence[float] = (),
    ) -> dict[str, tuple[Budget, Callable[[float], Awaitable[list[Hit]]]]]:
        """One (sub-)query's retrieval calls by backend: ``dense`` is what the vector embeds,
        unless the client sent the ``vector`` itself."""
        cfg, flt, wanted = self._config, plan.flt, plan.mode.backends
        calls: dict[str, tuple[Budget, Callable[[float], Awaitable[list[Hit]]]]] = {}
        if "vector" in wanted:
            calls["vector"] = (
                cfg.vector_budget,
                lambda t: self._vector_search(
                    tenant,
                    flt,
                    vector_pool(pool, flt, cfg.tag_pool_factor, cfg.max_pool),
                    dense,
                    vector,
                    t,
                ),
            )
        if "lexical" in wanted:
            calls["lexical"] = (
                cfg.lexical_budget,
                lambda t: self._lexical.search(tenant, text, flt, pool, timeout=t),
            )
        if "graph" in wanted and self._searches_graph(plan):
            ents, words = entity_keys(text), keywords(text)
            if ents or words:
                calls["graph"] = (
                    cfg.graph_budget,
                    lambda t: self._graph.search(tenant, ents, words, flt, pool, timeout=t),
                )
        return calls

    def _searches_graph(self, plan: _Plan) -> bool:
        """Whether the graph stream is searched. Default hybrid (weighted fusion) leaves it
        out: its weight there is 0, so it would cost a search and change no ranking. The
        graph service still answers relations and supersession for the candidates."""
        return (
            plan.mode is not RecallMode.HYBRID
            or plan.fusion is scoring.Fusion.RRF
            or self._config.hybrid_graph_stream
        )

    async def _trending(self, tenant: str, plan: _Plan, deadline: Deadline) -> RecallResult:
        """No text: the memories passing the filters, best first by ``plan.sort`` (the
        lexical service's listing), then the state filter and post-ranking."""
        sort, limit = plan.sort or Sort.IMPORTANCE, self._rank_limit(plan)
        listed = await _bounded(
            "lexical",
            deadline.cap(self._config.backend_timeout_s),
            lambda t: self._lexical.top(tenant, plan.flt, sort, limit, timeout=t),
        )
        ranked = scored(listed, sort)
        degraded: list[str] = []
        if plan.state_mode is StateMode.CURRENT and ranked:
            memo = RelationMemo(self._graph, tenant, ORIGIN_USER)  # the state step's edges
            ranked = await self._current_or_valid(memo, ranked, True, deadline, degraded)
        post = postrank(ranked, plan.post)
        return RecallResult(
            results=tuple(post.results),
            streams=(TRENDING_STREAM,),
            degraded=tuple(degraded),
            context=post.context,
            context_tokens=post.tokens,
            cut=post.cut_counts(),
        )

    async def _search(
        self, tenant: str, plan: _Plan, deadline: Deadline, pool: int
    ) -> tuple[RecallResult, bool]:
        """The recall over a ``pool`` per stream, and whether some stream filled it."""
        cfg = self._config
        # Scoring and the context step read one text: `query`, else the `queries` together.
        flt, text = plan.flt, plan.query or " ".join(plan.queries)
        rank_limit = self._rank_limit(plan)
        wanted = plan.mode.backends
        dense = dense_query(text) if cfg.dense_without_people else text
        dense = hyde_text(dense, plan.hypothesis)  # the lexical and graph streams keep `text`
        subs = sub_queries(
            [*([plan.query] if plan.query else []), *plan.queries, *plan.decomposed],
            pool,
            plan.per_query_limit,
            cfg.candidates.max_queries,
        )
        calls: dict[tuple[int, str], tuple[Budget, Callable[[float], Awaitable[list[Hit]]]]] = {}
        subject = _hyde_subject(plan)
        for i, sub in enumerate(subs):
            own = dense
            if sub.text != text:
                own = dense_query(sub.text) if cfg.dense_without_people else sub.text
                if sub.text == subject:  # `queries` alone: HyDE answered the first of them
                    own = hyde_text(own, plan.hypothesis)
            # An explicit embedding stands for `query` only; other sub-queries embed their text.
            vector = plan.embedding if sub.text == plan.query else ()
            streams = self._stream_calls(tenant, plan, sub.text, own, sub.pool, vector)
            for name, call in streams.items():
                calls[(i, name)] = call
        if not calls:  # graph alone, and the query names nothing it could look up
            return RecallResult(results=(), streams=(), degraded=()), False
        budgets = {key: deadline.budget(b) for key, (b, _) in calls.items()}
        outcomes = await asyncio.gather(
            *(self._try(key[1], budgets[key], call) for key, (_, call) in calls.items())
        )
        per_query: list[dict[str, list[Hit]]] = [{} for _ in subs]
        for (i, name), hits in zip(calls, outcomes, strict=True):
            if hits is not None:
                per_query[i][name] = hits
        # A stream that failed for any sub-query degrades the answer (and keeps it uncached).
        degraded = list(dict.fromkeys(n for i, n in calls if n not in per_query[i]))
        if not any(per_query):
            raise Unavailable(f"no retrieval stream answered ({', '.join(degraded)})")
        saturated = any(
            len(hits) >= subs[i].pool for i, got in enumerate(per_query) for hits in got.values()
        )
        answers, found_by = merge_answers(per_query)

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
        metrics.candidates.record(len(candidates))
        if plan.focus.pinned and plan.focus.ids:
            candidates = await self._with_pinned(tenant, plan, candidates, deadline)
        # Each memory's edges asked once; only agents' edges unless a step reads the others.
        every_edge = plan.mode is RecallMode.HYBRID_GRAPH or cfg.relation_system_edges
        memo = RelationMemo(self._graph, tenant, "" if every_edge else ORIGIN_USER)
        if not candidates:
            empty = RecallResult(results=(), streams=tuple(answers), degraded=tuple(degraded))
            return empty, saturated

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
                lambda t: memo.relations(top, t),
            )
            if relations is None:
                degraded.append("relations")
            else:
                candidates = with_relations(candidates, relations, cfg.relation_system_edges)

        # Neighbours come from the vector store, so a baseline mode without it goes without.
        if cfg.context.seeds and plan.mode in _HYBRID_MODES and "vector" in answers:
            widened = await self._try(
                "context",
                self._budget_or_zero(deadline, cfg.context_budget),
                lambda t: self._with_context(
                    tenant, flt, text, dense, plan.embedding, candidates, t
                ),
            )
            if widened is None:
                degraded.append("context")
            else:
                candidates = widened

        ranked = await self._try(
            "scoring",
            self._budget_or_zero(deadline, cfg.scoring_budget),
            lambda t: self._ranker.rank(
                text,
                candidates,
                plan.fusion,
                rank_limit,
                flt.tags,
                timeout=t,
                focus=plan.focus,
                recency_bias=plan.recency_bias,
            ),
        )
        if ranked is None:
            degraded.append("scoring")
            # Plain local RRF of the streams: the answer stays ranked while scoring is down.
            ranked = scoring.rank(
                candidates,
                scoring.Query(now=self._clock(), text=text, tags=flt.tags, focus=plan.focus),
                scoring.Params(
                    fusion=scoring.Fusion.RRF, limit=rank_limit, weights=_PLAIN_RRF_WEIGHTS
                ),
            )
        if plan.mode is RecallMode.HYBRID_GRAPH and len(ranked) > 1:
            fused = ranked
            reranked = await self._try(
                "graph_rerank",
                self._budget_or_zero(deadline, cfg.expand_budget),
                lambda t: self._graph_rerank(memo, fused, plan.graph_alpha, t),
            )
            if reranked is None:
                degraded.append("graph_rerank")
            else:
                ranked = reranked
        if plan.state_mode is StateMode.CURRENT:
            # Supersession needs the graph's edges; a mode without the graph (a single-stream
            # baseline) checks only the memories' own fields.
            graph_ok = "graph" in wanted and "graph" not in degraded
            ranked = await self._current_or_valid(memo, ranked, graph_ok, deadline, degraded)
        if plan.rerank:
            before: dict[str, str] | None = None
            # The turn before a memory is read from the vector store's timeline, so a
            # baseline mode without it goes without.
            if self._models.reads_preceding and "vector" in answers and ranked:
                head = ranked
                before = await self._try(
                    "context",
                    self._budget_or_zero(deadline, cfg.context_budget),
                    lambda t: self._preceding(tenant, flt, dense, plan.embedding, head, t),
                )
                if before is None and "context" not in degraded:
                    degraded.append("context")
            ranked = await self._models.rerank(text, ranked, deadline, before)
        if plan.expand.on and ranked:
            seeds = ranked
            grown = await self._try(
                "expand",
                self._budget_or_zero(deadline, cfg.expand_budget),
                lambda t: self._expanded(tenant, seeds, plan, t),
            )
            if grown is None:
                degraded.append("expand")
            else:
                ranked = grown
        ranked = with_provenance(scoring.pinned_first(ranked, plan.focus), found_by)
        post = postrank(ranked, plan.post)
        result = RecallResult(
            results=tuple(post.results),
            streams=tuple(answers),
            degraded=tuple(degraded),
            context=post.context,
            context_tokens=post.tokens,
            cut=post.cut_counts(),
        )
        return result, saturated

    async def _vector_search(
        self,
        tenant: str,
        flt: Filter,
        limit: int,
        dense: str,
        vector: Sequence[float],
        timeout: float,
    ) -> list[Hit]:
        with _embedding_named(vector):
            return await self._vector.search(
                tenant, flt, limit, **self._query_of(dense, vector), timeout=timeout
            )

    @staticmethod
    def _query_of(dense: str, vector: Sequence[float]) -> dict[str, Any]:
        """The client's own embedding when it gave one, else the text to embed."""
        return {"vector": vector} if vector else {"query": dense}

    async def _with_pinned(
        self, tenant: str, plan: _Plan, candidates: list[Candidate], deadline: Deadline
    ) -> list[Candidate]:
        """A pinned focus's ids join the candidates when no stream found them, if they
        pass the request's filters (the state step still applies after ranking)."""
        have = {c.memory.id for c in candidates}
        missing = [i for i in plan.focus.ids if i not in have]
        if not missing:
            return candidates
        try:
            found = await self._lookup.many(
                tenant, missing, deadline.cap(self._config.backend_timeout_s)
            )
        except (Unavailable, DeadlineExceeded) as exc:
            log.warning("pinned memories not fetched: %s", exc)
            return candidates
        extra = [Candidate(found[i]) for i in missing if i in found and matches(found[i], plan.flt)]
        return [*candidates, *extra]

    async def _graph_rerank(
        self, memo: RelationMemo, ranked: list[ScoredCandidate], alpha: float, timeout: float
    ) -> list[ScoredCandidate]:
        relations = await memo.relations([s.memory.id for s in ranked], timeout)
        return graph_rerank(ranked, relations, replace(self._config.graph_rerank, alpha=alpha))

    async def _expanded(
        self, tenant: str, ranked: list[ScoredCandidate], plan: _Plan, timeout: float
    ) -> list[ScoredCandidate]:
        """``ranked`` with the expanded memories merged in by score; those not current are
        dropped (or replaced by their heads) like the ranked ones were."""
        found: list[ScoredCandidate] = list(
            await expand(
                self._graph,
                self._lookup,
                tenant,
                ranked,
                plan.flt,
                plan.expand,
                plan.limit,
                timeout,
            )
        )
        if found and plan.state_mode is StateMode.CURRENT:
            memo = RelationMemo(self._graph, tenant, ORIGIN_USER)
            found = await self._current(memo, found, True, timeout)
        return merge_expanded(ranked, found)

    async def _current_or_valid(
        self,
        memo: RelationMemo,
        ranked: Sequence[ScoredCandidate],
        graph: bool,
        deadline: Deadline,
        degraded: list[str],
    ) -> list[ScoredCandidate]:
        """The state step (``_current``) within its budget; when it fails, "state" joins
        ``degraded`` and only the memories' own fields say what is current."""
        current = await self._try(
            "state",
            self._budget_or_zero(deadline, self._config.relations_budget),
            lambda t: self._current(memo, ranked, graph, t),
        )
        if current is not None:
            return current
        degraded.append("state")
        now = self._clock()
        return [s for s in ranked if validity(s.memory, now) is None]

    async def _current(
        self, memo: RelationMemo, ranked: Sequence[ScoredCandidate], graph: bool, timeout: float
    ) -> list[ScoredCandidate]:
        """``ranked`` with what is not current left out; a superseded memory gives its
        place to the head(s) of its INVALIDATED_BY/EVOLVED_INTO chain."""
        now = self._clock()
        ids = [s.memory.id for s in ranked]
        relations: list[Relation] = []
        if graph and ids:
            asked: set[str] = set(ids)
            relations = await memo.relations(ids, timeout)
            for _ in range(self._config.supersession_max_hops):
                frontier = chain_frontier(ids, relations, asked)
                if not frontier:
                    break
                asked.update(frontier)
                relations += await memo.relations(frontier, timeout)
        have = {s.memory.id: s.memory for s in ranked}
        missing = heads_to_fetch(ids, relations, have)
        fetched = await self._lookup.many(memo.tenant, missing, timeout) if missing else {}
        out = apply_state(
            ranked,
            relations,
            mode=StateMode.CURRENT,
            now=now,
            memory_of=lambda s: s.memory,
            memories=fetched,
            substitute=lambda s, head: replace(s, memory=head),
        )
        return out.items

    async def _with_context(
        self,
        tenant: str,
        flt: Filter,
        text: str,
        dense: str,
        vector: Sequence[float],
        candidates: list[Candidate],
        timeout: float,
    ) -> list[Candidate]:
        """Candidates with their timeline neighbours: one vector search per seed window."""
        cfg = self._config.context
        # Seeds by the core formula's defaults: the label and time components move turns
        # that no stream ranks high to the top, and those need their neighbours too.
        seeds = scoring.rank(
            candidates,
            scoring.Query(now=self._clock(), text=text, tags=flt.tags),
            scoring.Params(limit=cfg.seeds, weights=_SEED_WEIGHTS),
        )
        around = [s.memory for s in seeds]
        windows = await self._windows(tenant, flt, dense, vector, around, timeout)
        if not windows:
            return candidates
        return with_neighbours(candidates, windows, cfg.distance, cfg.thread)

    async def _preceding(
        self,
        tenant: str,
        flt: Filter,
        dense: str,
        vector: Sequence[float],
        ranked: Sequence[ScoredCandidate],
        timeout: float,
    ) -> dict[str, str]:
        """The content stored just before each memory the reranker will read."""
        head = [s.memory for s in ranked[: self._models.config.rerank_top_n]]
        windows = await self._windows(tenant, flt, dense, vector, head, timeout)
        thread = self._config.context.thread
        return {i: m.content for i, m in preceding(head, windows, thread).items()}

    async def _windows(
        self,
        tenant: str,
        flt: Filter,
        dense: str,
        vector: Sequence[float],
        around: Sequence[Memory],
        timeout: float,
    ) -> list[list[Memory]]:
        """The memories of the timeline windows around ``around``; none when the request's
        filter leaves no window.

        A window that comes back full may leave memories out between the ones it holds, so
        its seeds' windows are read again narrower (context.NARROWING), and a window still
        full after context.NARROWINGS is dropped: no neighbours rather than made-up ones."""
        cfg = self._config.context
        ends = time.monotonic() + timeout
        width, out = cfg.window_s, []
        for _ in range(NARROWINGS + 1):
            windows = [
                (w, f)
                for w in seed_windows(around, width)
                if (f := window_filter(flt, w)) is not None
            ]
            left = max(ends - time.monotonic(), 0.001)
            found = await self._read_windows(tenant, [f for _, f in windows], dense, vector, left)
            full: list[Window] = []
            for (w, _), hits in zip(windows, found, strict=True):
                if len(hits) >= cfg.limit:
                    full.append(w)
                else:
                    out.append([h.memory for h in hits if h.memory is not None])
            around = inside(around, full)
            if not around or width == 0:
                break
            width /= NARROWING
        if around:  # on the step's span: raise CONTEXT_LIMIT or set CONTEXT_THREAD_BY
            annotate("engram.context.windows_left_out", len(full))
        return out

    async def _read_windows(
        self,
        tenant: str,
        filters: Sequence[Filter],
        dense: str,
        vector: Sequence[float],
        timeout: float,
    ) -> list[list[Hit]]:
        """One vector search per window filter, as many at once as a call takes."""
        step = SEARCH_MANY_MAX_FILTERS
        query = self._query_of(dense, vector)
        limit = self._config.context.limit
        with _embedding_named(vector):
            found = await asyncio.gather(
                *(
                    self._vector.search_many(
                        tenant, filters[i : i + step], limit, **query, timeout=timeout
                    )
                    for i in range(0, len(filters), step)
                )
            )
        return [hits for part in found for hits in part]

    @staticmethod
    def _budget_or_zero(deadline: Deadline, share: Budget) -> float:
        try:
            return deadline.budget(share)
        except DeadlineExceeded:
            return 0.0

    @staticmethod
    async def _try(name: str, budget: float, call: Callable[[float], Awaitable[T]]) -> T | None:
        """A degradable step: its answer, or None (logged, counted) when it failed or ran
        out of time."""
        with _tracer.start_as_current_span(f"engram.gateway/{name}") as span:
            span.set_attribute("engram.budget_s", budget)
            failure: BaseException | None = None  # None when the step never started
            if budget <= 0:
                log.warning("%s skipped: no time left", name)
            else:
                started = time.perf_counter()
                try:
                    async with asyncio.timeout(budget):
                        return await call(budget)
                except TimeoutError as exc:
                    failure = exc
                    log.warning("%s timed out after %.3fs", name, budget)
                except Exception as exc:  # one backend's failure degrades, never fails, recall
                    if isinstance(exc, InvalidArgument) and exc.field == "embedding":
                        raise  # except the client's own vector, found wrong by the vector service
                    failure = exc
                    log.warning("%s failed: %s", name, exc)
                finally:
                    metrics.stage_took(name, time.perf_counter() - started)
            span.set_attribute("engram.degraded", True)
            metrics.degraded.add(1, {"stream": name, "reason": metrics.failure_reason(failure)})
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
