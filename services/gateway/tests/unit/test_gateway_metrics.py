"""The gateway's own instruments move when recall, admission and access events do.

Values are cumulative over the session (one global MeterProvider), so each test compares
a value before and after what it does.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from engram_core.errors import DeadlineExceeded, ResourceExhausted, Unavailable
from engram_gateway.config import Settings
from engram_gateway.service import Deadline, RateLimitConfig, TenantRateLimit
from engram_gateway.service.access import AccessRecorder
from engram_gateway.service.admission import Admission, AdmissionConfig
from engram_gateway.service.models import ModelTrace, QueryModels, tracing
from engram_platform.coordination import MemoryRateLimiter
from engram_testing.metrics import ServiceMetrics

A = "0190f3a4-7b1c-7d2e-8f00-00000000001a"
B = "0190f3a4-7b1c-7d2e-8f00-00000000001b"
STAGE = "engram.recall.stage.duration"
DEGRADED = "engram.recall.degraded"
ANSWERS = "engram.recall.answers"
CACHE = "engram.recall.cache.requests"
MODELS = "engram.recall.model.runs"
REJECTED = "engram.admission.rejections"


def _tea(h: Any) -> None:
    h.world.put(h.memory(A, "sarah drinks green tea"), h.memory(B, "tea house in lisbon"))


async def test_a_recall_times_each_stage_and_sizes_its_pool(
    harness: Any, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    _tea(harness)
    before = {s: m.value(STAGE, stage=s) for s in ("vector", "lexical", "scoring")}
    pools = m.value("engram.recall.candidates")
    complete = m.value(ANSWERS, outcome="complete")
    await harness.recall("green tea")
    assert m.value(ANSWERS, outcome="complete") == complete + 1
    assert {s: m.value(STAGE, stage=s) - n for s, n in before.items()} == {
        "vector": 1,
        "lexical": 1,
        "scoring": 1,
    }
    assert m.value("engram.recall.candidates") == pools + 1


async def test_a_failing_stream_counts_as_degraded_by_reason(
    harness: Any, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    _tea(harness)
    harness.lexical.fail = Unavailable("lexical down")
    down = m.value(DEGRADED, stream="lexical", reason="unavailable")
    broken = m.value(DEGRADED, stream="scoring", reason="error")
    answers = m.value(ANSWERS, outcome="degraded")
    result = await harness.recall("green tea")
    assert "lexical" in result.degraded
    assert m.value(DEGRADED, stream="lexical", reason="unavailable") == down + 1
    assert m.value(ANSWERS, outcome="degraded") == answers + 1
    harness.lexical.fail = None
    harness.ranker.fail = RuntimeError("bug")
    await harness.recall("green tea lisbon")
    assert m.value(DEGRADED, stream="scoring", reason="error") == broken + 1


async def test_a_slow_stream_counts_as_a_timeout(
    new_harness: Any, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    h = new_harness(streams={"lexical_budget": {"fraction": 0.5, "cap_s": 0.05}})
    _tea(h)
    h.lexical.delay = 1.0
    slow = m.value(DEGRADED, stream="lexical", reason="timeout")
    await h.recall("green tea")
    assert m.value(DEGRADED, stream="lexical", reason="timeout") == slow + 1


async def test_the_recall_cache_counts_misses_then_hits(
    harness: Any, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    _tea(harness)
    hits, misses = m.value(CACHE, result="hit"), m.value(CACHE, result="miss")
    await harness.recall("lisbon tea house")
    await harness.recall("lisbon tea house")
    assert (m.value(CACHE, result="hit"), m.value(CACHE, result="miss")) == (hits + 1, misses + 1)


async def test_an_escalated_recall_is_counted(
    new_harness: Any, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    h = new_harness(scoring={"escalation_floor": 0.99}, streams={"max_pool": 400})
    _tea(h)
    # More tea than the first pool holds, so widening it can find something new.
    h.world.put(*(h.memory(f"0190f3a4-7b1c-7d2e-8f00-0000000002{i:02x}", "tea") for i in range(9)))
    before = m.value("engram.recall.escalations", outcome="ok")
    result = await h.recall("sarah tea", limit=1)
    assert result.escalated
    assert m.value("engram.recall.escalations", outcome="ok") == before + 1


class _BrokenHyde:
    async def hypothesise(self, query: str, timeout: float | None = None) -> str:
        raise RuntimeError("model server answered 500")


async def test_models_count_runs_failures_and_missing_ones(
    service_metrics: ServiceMetrics,
) -> None:
    m = service_metrics
    failed = m.value(MODELS, model="hyde", outcome="error")
    degraded = m.value(DEGRADED, stream="hyde", reason="error")
    missing = m.value(MODELS, model="rerank", outcome="unconfigured")
    with tracing(ModelTrace()):
        assert await QueryModels(hyde=_BrokenHyde()).hypothesis("tea?", Deadline.within(1)) == ""
        assert await QueryModels().rerank("tea?", [], Deadline.within(1)) == []
    assert m.value(MODELS, model="hyde", outcome="error") == failed + 1
    assert m.value(DEGRADED, stream="hyde", reason="error") == degraded + 1
    assert m.value(MODELS, model="rerank", outcome="unconfigured") == missing + 1


async def test_admission_refusals_are_counted_by_reason_without_the_tenant(
    service_metrics: ServiceMetrics,
) -> None:
    m = service_metrics
    admission = Admission(AdmissionConfig(limit=1, queue=0, tenant_queue=5))
    full = m.value(REJECTED, reason="queue")
    async with admission.turn("acme", Deadline.within(5.0)):
        with pytest.raises(ResourceExhausted):
            async with admission.turn("acme", Deadline.within(5.0)):
                pass
    assert m.value(REJECTED, reason="queue") == full + 1
    assert all("tenant" not in (p.attributes or {}) for p in m.points(REJECTED))


async def test_the_tenant_labels_refusals_only_when_the_setting_allows(
    service_metrics: ServiceMetrics,
) -> None:
    m = service_metrics
    admission = Admission(AdmissionConfig(limit=1, queue=5, tenant_queue=5, tenant_label=True))
    late = m.value(REJECTED, reason="deadline", tenant="globex")
    async with admission.turn("globex", Deadline.within(5.0)):
        with pytest.raises(DeadlineExceeded):
            async with admission.turn("globex", Deadline.within(0.01)):
                pass
    assert m.value(REJECTED, reason="deadline", tenant="globex") == late + 1

    limited = m.value(REJECTED, reason="rate_limit", tenant="initech")
    limit = TenantRateLimit(MemoryRateLimiter(), RateLimitConfig(1.0, 1.0, tenant_label=True))
    await limit.admit("initech")
    with pytest.raises(ResourceExhausted):
        await limit.admit("initech")
    assert m.value(REJECTED, reason="rate_limit", tenant="initech") == limited + 1
    assert Settings().metrics_tenant_label is False


async def test_access_events_dropped_for_a_backlog_are_counted(
    harness: Any, service_metrics: ServiceMetrics
) -> None:
    m = service_metrics
    never = asyncio.Event()
    harness.log.hung = never  # every publish waits: the backlog fills
    recorder = AccessRecorder(
        harness.log, lambda: datetime(2025, 6, 1, tzinfo=UTC), lambda: "ev", max_pending=1
    )
    dropped = m.value("engram.access.dropped", reason="backlog")
    recorder.record("acme", [A])
    recorder.record("acme", [B])
    assert m.value("engram.access.dropped", reason="backlog") == dropped + 1
    never.set()
    await recorder.drain()
