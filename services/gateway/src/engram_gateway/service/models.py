"""Pluggable query-side models, all off by default: HyDE, LLM query
decomposition and a cross-encoder reranker.

Each is optional and degrades: a model that times out, fails or answers nonsense is
skipped, the recall goes on without it, and the reply says so (``models_failed`` and
``degraded``). A model that ran is listed in ``models``. The adapters live in
adapters/openai_models.py; this module holds their ports and the pure logic around them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Protocol, TypeVar

from engram_core.entities import EntityRules
from engram_core.errors import DeadlineExceeded
from engram_core.scoring import ScoredCandidate
from engram_gateway.service import metrics
from engram_gateway.service.deadline import Budget, Deadline
from engram_gateway.service.ports import QueryDecomposer, RecallResult
from engram_platform.telemetry import tracer

log = logging.getLogger(__name__)
_tracer = tracer(__name__)
T = TypeVar("T")

HYDE = "hyde"
DECOMPOSE = "decompose"
RERANK = "rerank"


class Hyde(Protocol):
    async def hypothesise(self, query: str, timeout: float | None = None) -> str:
        """A passage that would answer ``query`` (what its memory might say)."""
        ...


class Reranker(Protocol):
    async def score(
        self, query: str, documents: Sequence[str], timeout: float | None = None
    ) -> list[float]:
        """One relevance score per document, in input order (higher = more relevant)."""
        ...


class RerankMode(Enum):
    BLEND = "blend"  # (1 - weight) · fused + weight · cross-encoder, both min-max normalised
    REPLACE = "replace"  # the cross-encoder alone orders the top N


@dataclass(frozen=True, slots=True)
class ModelsConfig:
    hyde_default: bool = False  # a request that leaves `hyde` unset
    rerank_default: bool = False
    hyde_timeout_s: float = 3.0
    rerank_timeout_s: float = 2.0
    decompose_timeout_s: float = 3.0
    rerank_top_n: int = 20  # the best N of the ranking are re-scored
    rerank_mode: RerankMode = RerankMode.BLEND
    rerank_weight: float = 0.7  # cross-encoder's share in blend mode
    rerank_max_chars: int = 2000  # of each memory's content sent to the cross-encoder
    # Of the memory stored just before each one, when it asks a question, its end put first;
    # 0 sends every memory alone.
    rerank_preceding_chars: int = 300


@dataclass(slots=True)
class ModelTrace:
    """What one recall's models did; filled as they run, read once at the end."""

    ran: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)  # failed with an error or timeout

    def applied_to(self, result: RecallResult) -> RecallResult:
        return replace(
            result,
            models=tuple(self.ran),
            models_failed=tuple(self.failed),
            degraded=(*result.degraded, *(d for d in self.degraded if d not in result.degraded)),
        )

    def succeeded(self, name: str) -> None:
        if name not in self.ran:
            self.ran.append(name)

    def missing(self, name: str) -> None:
        """Asked for, but this gateway has no such model: skipped, nothing degraded."""
        metrics.model_runs.add(1, {"model": name, "outcome": "unconfigured"})
        if name not in self.failed:
            self.failed.append(name)

    def errored(self, name: str) -> None:
        if name not in self.failed:
            self.failed.append(name)
        if name not in self.degraded:
            self.degraded.append(name)


# The decomposer is called through the QueryDecomposer port, whose signature carries no
# per-recall state; the recall in progress sets its trace here so the LLM decomposer can
# report into it.
_TRACE: ContextVar[ModelTrace | None] = ContextVar("engram_model_trace", default=None)


@contextmanager
def tracing(trace: ModelTrace) -> Iterator[ModelTrace]:
    token = _TRACE.set(trace)
    try:
        yield trace
    finally:
        _TRACE.reset(token)


def _trace() -> ModelTrace:
    # Outside a recall (a direct call in a test) the report goes nowhere.
    return _TRACE.get() or ModelTrace()


async def _guarded(name: str, timeout: float, call: Callable[[float], Awaitable[T]]) -> T | None:
    """A model call within ``timeout``: its answer, or None (logged, traced) when it failed."""
    trace = _trace()
    with _tracer.start_as_current_span(f"engram.gateway/model/{name}") as span:
        span.set_attribute("engram.budget_s", timeout)
        started = time.perf_counter()
        try:
            if timeout <= 0:
                raise TimeoutError
            async with asyncio.timeout(timeout):
                answer = await call(timeout)
        except TimeoutError:
            log.warning("%s model: no answer within %.3fs", name, timeout)
            reason = metrics.TIMEOUT
        except Exception as exc:  # a model's failure never fails the recall
            log.warning("%s model failed: %s", name, exc)
            reason = metrics.failure_reason(exc)
        else:
            trace.succeeded(name)
            _count(name, "ok", started)
            return answer
        span.set_attribute("engram.degraded", True)
        trace.errored(name)
        _count(name, reason, started)
        metrics.degraded.add(1, {"stream": name, "reason": reason})
        return None


def _count(model: str, outcome: str, started: float) -> None:
    metrics.stage_took(model, time.perf_counter() - started)
    metrics.model_runs.add(1, {"model": model, "outcome": outcome})


@dataclass(frozen=True, slots=True)
class QueryModels:
    """The models this gateway has (None: not configured) and how a recall uses them."""

    hyde: Hyde | None = None
    reranker: Reranker | None = None
    config: ModelsConfig = field(default_factory=ModelsConfig)

    def wants_hyde(self, asked: bool | None) -> bool:
        return self.config.hyde_default if asked is None else asked

    def wants_rerank(self, asked: bool | None) -> bool:
        return self.config.rerank_default if asked is None else asked

    @property
    def reads_preceding(self) -> bool:
        """Whether a rerank wants the memory stored before each one it re-scores."""
        return self.reranker is not None and self.config.rerank_preceding_chars > 0

    def rank_depth(self, rerank: bool) -> int:
        """Results the ranking must hold for the reranker to see its whole top N."""
        return self.config.rerank_top_n if rerank else 0

    async def hypothesis(self, query: str, deadline: Deadline) -> str:
        """HyDE's hypothetical answer to ``query``; "" when there is none."""
        hyde = self.hyde
        if hyde is None:
            _trace().missing(HYDE)
            return ""
        # Retrieval waits for this, so it may take at most half of what is left.
        budget = _budget(deadline, Budget(fraction=0.5, cap_s=self.config.hyde_timeout_s))
        text = await _guarded(HYDE, budget, lambda t: hyde.hypothesise(query, t))
        return text or ""

    async def rerank(
        self,
        query: str,
        ranked: Sequence[ScoredCandidate],
        deadline: Deadline,
        preceding: Mapping[str, str] | None = None,
    ) -> list[ScoredCandidate]:
        """``ranked`` with its top N re-ordered by the cross-encoder (unchanged without).

        ``preceding`` maps a memory's id to the content stored just before it (the reads
        step finds it on the timeline); a question's end is read with the memory."""
        reranker, cfg = self.reranker, self.config
        if reranker is None:
            _trace().missing(RERANK)
            return list(ranked)
        if not ranked:
            return []
        documents = rerank_documents(ranked, cfg, preceding or {})
        budget = _budget(deadline, Budget(fraction=0.8, cap_s=cfg.rerank_timeout_s))
        scores = await _guarded(RERANK, budget, lambda t: reranker.score(query, documents, t))
        if scores is None:
            return list(ranked)
        return reranked(ranked, scores, cfg.rerank_mode, cfg.rerank_weight)


def _budget(deadline: Deadline, share: Budget) -> float:
    try:
        return deadline.budget(share)
    except DeadlineExceeded:
        return 0.0


class FallbackDecomposer:
    """The LLM decomposer, falling back to the rule-based one when it fails or is slow."""

    def __init__(self, model: QueryDecomposer, fallback: QueryDecomposer, timeout_s: float) -> None:
        self._model = model
        self._fallback = fallback
        self._timeout = timeout_s

    async def decompose(self, query: str, rules: EntityRules) -> list[str]:
        model = self._model
        queries = await _guarded(DECOMPOSE, self._timeout, lambda _t: model.decompose(query, rules))
        return queries if queries is not None else await self._fallback.decompose(query, rules)


def hyde_text(dense: str, hypothesis: str) -> str:
    """What the vector stream embeds with HyDE: the query, then the hypothetical answer
    (the query stays first so a truncating embedder keeps it)."""
    return f"{dense}\n{hypothesis}" if hypothesis else dense


def rerank_documents(
    ranked: Sequence[ScoredCandidate], config: ModelsConfig, preceding: Mapping[str, str]
) -> list[str]:
    """What the cross-encoder reads of each of the top N: the memory's content, after the
    last ``rerank_preceding_chars`` of what was stored just before it when that asks a
    question — the question an answer in a conversation leaves out. A memory after any
    other is read alone: a note stored after a relevant one would borrow its relevance."""
    keep = config.rerank_preceding_chars
    docs = []
    for s in ranked[: config.rerank_top_n]:
        own = s.memory.content[: config.rerank_max_chars]
        before = preceding.get(s.memory.id, "").rstrip()
        asks = keep > 0 and before.endswith("?")
        docs.append(f"{before[-keep:]}\n{own}" if asks else own)
    return docs


def reranked(
    ranked: Sequence[ScoredCandidate],
    scores: Sequence[float],
    mode: RerankMode,
    weight: float,
) -> list[ScoredCandidate]:
    """``ranked`` with its first ``len(scores)`` items re-ordered by the cross-encoder.

    The two scales differ (fused scores near 0..1, cross-encoder logits or probabilities),
    so both are min-max normalised over the re-scored head and mixed; the mix is mapped back
    onto the head's own fused range. The head therefore stays above the tail, and
    min_score, the adaptive floor and escalation keep reading fused-scale numbers. The
    cross-encoder's raw score is added as the ``rerank`` component.
    """
    n = len(scores)
    if n == 0:
        return list(ranked)
    head, tail = ranked[:n], ranked[n:]
    w = 1.0 if mode is RerankMode.REPLACE else weight
    fused = _minmax([s.score for s in head])
    cross = _minmax(list(scores))
    lo = min(s.score for s in head)
    hi = max(s.score for s in head)
    mixed = [(1.0 - w) * f + w * c for f, c in zip(fused, cross, strict=True)]
    rescored = [
        replace(s, score=lo + (hi - lo) * m, components={**s.components, RERANK: float(r)})
        for s, m, r in zip(head, mixed, scores, strict=True)
    ]
    # Stable on ties: equal mixes keep the fused order.
    order = sorted(range(n), key=lambda i: -mixed[i])
    return [rescored[i] for i in order] + list(tail)


def _minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi <= lo:
        return [0.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]
