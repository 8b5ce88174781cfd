"""Recall as a list of stages, and the one runner that owns their bookkeeping.

A stage says when it runs (``applies``), which share of the deadline it may spend
(``share``; None for a stage that bounds its own calls) and what the answer does without
it (``fallback``). The runner gives a stage its budget, a span, a duration sample and,
when it fails or runs out of time, a ``degraded`` entry: a stage's failure degrades the
answer, it never fails the recall. The stage lists are in stages/__init__.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar

from opentelemetry.trace import Tracer

from engram_core.entities import EntityRules
from engram_core.errors import DeadlineExceeded, InvalidArgument
from engram_core.model import Hit
from engram_core.profiles import PROFILES, Profile
from engram_core.scoring import Candidate, ScoredCandidate, StreamScore
from engram_gateway.service import metrics
from engram_gateway.service.deadline import Budget, Deadline
from engram_gateway.service.lookup import Lookup
from engram_gateway.service.models import QueryModels, hyde_text
from engram_gateway.service.ports import (
    GraphPort,
    LexicalPort,
    QueryDecomposer,
    RankerPort,
    RecallResult,
    VectorPort,
)
from engram_gateway.service.query import dense_query, rules_of
from engram_gateway.service.recall.config import ReadConfig
from engram_gateway.service.recall.plan import Plan
from engram_gateway.service.recall.planner import rank_limit
from engram_gateway.service.relation_memo import RelationMemo

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Deps:
    """What the stages call: the reader's ports, models and settings."""

    vector: VectorPort
    lexical: LexicalPort
    graph: GraphPort
    ranker: RankerPort
    lookup: Lookup
    config: ReadConfig
    clock: Callable[[], datetime]
    models: QueryModels
    decomposer: QueryDecomposer


@dataclass(slots=True)
class RecallContext:
    """One recall round: its plan, and what the stages found so far."""

    deps: Deps
    tenant: str
    plan: Plan
    deadline: Deadline
    tracer: Tracer  # the stages' spans are its
    memo: RelationMemo  # each memory's edges asked once per round
    backends: frozenset[str]  # those the round may read
    pool: int = 0  # hits asked of each stream
    # Set once per recall, before the first round (stages/prepare.py); rounds keep them.
    hypothesis: str = ""  # HyDE's answer
    decomposed: tuple[str, ...] = ()  # the decomposer's sub-queries
    answers: dict[str, list[Hit]] = field(default_factory=dict)  # by backend that answered
    found_by: dict[str, dict[int, StreamScore]] = field(default_factory=dict)  # sub-queries
    saturated: bool = False  # some stream filled its pool
    streams: tuple[str, ...] = ()  # what the answer says it read
    candidates: list[Candidate] = field(default_factory=list)
    ranked: list[ScoredCandidate] = field(default_factory=list)
    before: dict[str, str] | None = None  # for the reranker: what was stored before each
    degraded: list[str] = field(default_factory=list)
    result: RecallResult | None = None  # set: the round is over
    # `dense` as worked out for a hypothesis: the entity extractor runs once per round.
    _dense: tuple[str, str] | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return self.plan.text

    @property
    def profile(self) -> Profile:
        return PROFILES[self.plan.profile]  # the planner checked the name

    @property
    def rules(self) -> EntityRules:
        """What the query's entities are read with: the profile's extraction rules."""
        return rules_of(self.plan.profile)

    @property
    def dense(self) -> str:
        """What the vector stream embeds for ``text``; the lexical and graph streams keep
        ``text``."""
        if self._dense is None or self._dense[0] != self.hypothesis:
            dense = hyde_text(self.dense_of(self.text), self.hypothesis)
            self._dense = (self.hypothesis, dense)
        return self._dense[1]

    def dense_of(self, text: str) -> str:
        drop = self.deps.config.dense_without_people and self.profile.drop_names_from_dense_query
        return dense_query(text, self.rules) if drop else text

    @property
    def rank_limit(self) -> int:
        return rank_limit(self.plan, self.deps.config, self.deps.models)

    def degrade(self, name: str) -> None:
        if name not in self.degraded:
            self.degraded.append(name)

    def next_round(self, pool: int, memo: RelationMemo) -> RecallContext:
        """A fresh round over ``pool`` with what was prepared once kept."""
        return RecallContext(
            deps=self.deps,
            tenant=self.tenant,
            plan=self.plan,
            deadline=self.deadline,
            tracer=self.tracer,
            memo=memo,
            backends=self.backends,
            pool=pool,
            hypothesis=self.hypothesis,
            decomposed=self.decomposed,
        )

    def finish(self, result: RecallResult | None = None) -> None:
        """End the round; without ``result``, with no results and what was read so far."""
        if result is None:
            result = RecallResult(results=(), streams=self.streams, degraded=tuple(self.degraded))
        self.result = result


class Stage(Protocol):
    name: str  # of its span, its duration sample and its `degraded` entry

    def applies(self, ctx: RecallContext) -> bool:
        """Whether it runs for this plan, given what the stages before it found."""
        ...

    def share(self, config: ReadConfig) -> Budget | None:
        """Its share of the deadline; None: it bounds its own calls and never degrades."""
        ...

    async def run(self, ctx: RecallContext, timeout: float) -> None:
        """Its work on ``ctx``, written back only once its last call has answered."""
        ...

    def fallback(self, ctx: RecallContext) -> None:
        """The answer without it, after it failed."""
        ...


async def run(stages: Sequence[Stage], ctx: RecallContext) -> RecallContext:
    """``stages`` in order over ``ctx`` until one finishes the round."""
    for stage in stages:
        if ctx.result is not None:
            break
        if not stage.applies(ctx):
            continue
        share = stage.share(ctx.deps.config)
        if share is None:
            await stage.run(ctx, ctx.deadline.remaining())
            continue
        step = _step(stage, ctx)
        if await attempt(ctx.tracer, stage.name, budget_or_zero(ctx.deadline, share), step) is None:
            ctx.degrade(stage.name)
            stage.fallback(ctx)
    return ctx


def _step(stage: Stage, ctx: RecallContext) -> Callable[[float], Awaitable[bool]]:
    async def call(timeout: float) -> bool:
        await stage.run(ctx, timeout)
        return True

    return call


def budget_or_zero(deadline: Deadline, share: Budget) -> float:
    try:
        return deadline.budget(share)
    except DeadlineExceeded:
        return 0.0


async def attempt(
    tracer: Tracer, name: str, budget: float, call: Callable[[float], Awaitable[T]]
) -> T | None:
    """A degradable step: its answer, or None (logged, counted) when it failed or ran
    out of time."""
    with tracer.start_as_current_span(f"engram.gateway/{name}") as span:
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


class StageDefaults:
    """What most stages leave as it is: they always apply, bound their own calls (no share
    of the deadline from the runner) and have nothing to fall back on."""

    def applies(self, ctx: RecallContext) -> bool:
        return True

    def share(self, config: ReadConfig) -> Budget | None:
        return None

    def fallback(self, ctx: RecallContext) -> None:
        return None
