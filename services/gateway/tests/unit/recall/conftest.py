"""Stages run one at a time over a context made the way a recall makes it, against the
fakes of the parent conftest (through its ``harness`` fixture)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engram_core.relations import ORIGIN_USER
from engram_core.scoring import ScoredCandidate
from engram_gateway.service import Deadline, RecallRequest
from engram_gateway.service.recall import RecallContext, Stage, plan_recall, run
from engram_gateway.service.relation_memo import RelationMemo


@dataclass
class Stages:
    harness: Any
    exporter: InMemorySpanExporter
    provider: TracerProvider

    def ctx(
        self, query: str = "what did Caroline paint", *, pool: int = 20, **kw: Any
    ) -> RecallContext:
        """A round's context for ``RecallRequest(query, **kw)``, nothing found yet."""
        reader = self.harness.gateway.reader
        deps = reader._deps()
        request = RecallRequest(query=query, **kw)
        plan = plan_recall(request, deps.config, deps.models, deps.clock(), self.harness.tenant)
        memo = RelationMemo(deps.graph, self.harness.tenant, ORIGIN_USER)
        tracer = self.provider.get_tracer("stages")
        return RecallContext(
            deps,
            self.harness.tenant,
            plan,
            Deadline.within(5.0),
            tracer,
            memo,
            plan.mode.backends,
            pool=pool,
        )

    def scored(self, id: str, score: float, content: str = "", **kw: Any) -> ScoredCandidate:
        """A ranked result of a memory the harness makes (not stored)."""
        memory = self.harness.memory(id, content or id, **kw)
        return ScoredCandidate(memory, score, components={}, streams={})

    async def run(self, ctx: RecallContext, *stages: Stage) -> RecallContext:
        return await run(stages, ctx)

    def spans(self, name: str) -> Sequence[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == f"engram.gateway/{name}"]


@pytest.fixture
def stages(harness: Any) -> Stages:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Stages(harness, exporter, provider)
