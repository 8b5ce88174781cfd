"""Query-side models in the read path with fake models (service/models.py): the rerank
blend, defaults and flags, budgets, the cache key, escalation, settings."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from engram_core.model import Memory
from engram_core.scoring import Focus, ScoredCandidate
from engram_gateway.bootstrap import Backends, Models, build_gateway, build_models
from engram_gateway.config import Settings
from engram_gateway.service import Deadline
from engram_gateway.service.models import (
    ModelsConfig,
    ModelTrace,
    QueryModels,
    RerankMode,
    hyde_text,
    reranked,
    tracing,
)
from engram_gateway.service.ports import RecallResult
from engram_gateway.service.reads import RecallMode
from engram_platform.settings import SEARCH_MANY_MAX_FILTERS

A = "0190f3a4-7b1c-7d2e-8f00-00000000000a"
B = "0190f3a4-7b1c-7d2e-8f00-00000000000b"
C = "0190f3a4-7b1c-7d2e-8f00-00000000000c"
D = "0190f3a4-7b1c-7d2e-8f00-00000000000d"


def _scored(id: str, score: float) -> ScoredCandidate:
    m = Memory(
        id=id, tenant="t", content=f"memory {id[-1]}", timestamp=datetime(2025, 1, 1, tzinfo=UTC)
    )
    return ScoredCandidate(memory=m, score=score, components={"vector": score}, streams={})


# --- the blend -------------------------------------------------------------------------------


def test_blend_mixes_normalised_scores_onto_the_heads_range() -> None:
    ranked = [_scored(A, 1.0), _scored(B, 0.75), _scored(C, 0.5), _scored(D, 0.25)]
    # Cross-encoder logits for the head of three: C best, A worst.
    out = reranked(ranked, [-3.0, 1.0, 5.0], RerankMode.BLEND, 0.5)
    # fused (min-max over the head): A 1, B 0.5, C 0; cross: A 0, B 0.5, C 1 → all 0.5;
    # ties keep the fused order.
    assert [s.memory.id for s in out] == [A, B, C, D]
    assert [s.score for s in out[:3]] == pytest.approx([0.75, 0.75, 0.75])
    assert out[3] is ranked[3]  # the tail is untouched
    assert [s.components["rerank"] for s in out[:3]] == [-3.0, 1.0, 5.0]
    assert out[0].components["vector"] == 1.0  # the other components stay


def test_blend_weight_moves_the_cross_encoders_pick_up() -> None:
    ranked = [_scored(A, 1.0), _scored(B, 0.75), _scored(C, 0.5), _scored(D, 0.25)]
    out = reranked(ranked, [-3.0, 1.0, 5.0], RerankMode.BLEND, 0.75)
    assert [s.memory.id for s in out] == [C, B, A, D]
    # C: 0.25·0 + 0.75·1 = 0.75 → 0.5 + 0.5·0.75; B: 0.5 → 0.75; A: 0.25 → 0.625.
    assert [s.score for s in out[:3]] == pytest.approx([0.875, 0.75, 0.625])
    assert min(s.score for s in out[:3]) >= out[3].score  # the head stays above the tail


def test_replace_orders_by_the_cross_encoder_alone() -> None:
    ranked = [_scored(A, 1.0), _scored(B, 0.75), _scored(C, 0.5)]
    out = reranked(ranked, [0.2, 0.9, 0.1], RerankMode.REPLACE, 0.0)  # weight ignored
    assert [s.memory.id for s in out] == [B, A, C]
    assert [s.score for s in out] == pytest.approx([1.0, 0.5 + 0.5 * 0.125, 0.5])


def test_equal_fused_scores_are_ordered_by_the_cross_encoder() -> None:
    ranked = [_scored(A, 0.4), _scored(B, 0.4), _scored(C, 0.4)]
    out = reranked(ranked, [0.1, 0.3, 0.2], RerankMode.BLEND, 0.5)
    assert [s.memory.id for s in out] == [B, C, A]
    assert all(s.score == 0.4 for s in out)  # nothing to spread them over


def test_equal_cross_scores_keep_the_fused_order() -> None:
    ranked = [_scored(A, 0.9), _scored(B, 0.7)]
    out = reranked(ranked, [0.5, 0.5], RerankMode.REPLACE, 0.0)
    assert [s.memory.id for s in out] == [A, B]


def test_no_scores_changes_nothing() -> None:
    ranked = [_scored(A, 0.9)]
    assert reranked(ranked, [], RerankMode.BLEND, 0.5) == ranked


def test_hyde_text_keeps_the_query_first() -> None:
    assert hyde_text("sarah tea", "Sarah drank tea.") == "sarah tea\nSarah drank tea."
    assert hyde_text("sarah tea", "") == "sarah tea"


def test_trace_adds_its_failures_to_degraded_once() -> None:
    trace = ModelTrace()
    trace.succeeded("hyde")
    trace.succeeded("hyde")
    trace.errored("rerank")
    trace.missing("decompose")
    out = trace.applied_to(RecallResult(results=(), streams=("vector",), degraded=("rerank",)))
    assert out.models == ("hyde",)
    assert out.models_failed == ("rerank", "decompose")
    assert out.degraded == ("rerank",)  # not configured is not degraded; no duplicate


# --- fakes through the gateway ---------------------------------------------------------------


class FakeHyde:
    def __init__(self, answer: str = "Sarah had tea in Lisbon") -> None:
        self.answer = answer
        self.calls: list[tuple[str, float | None]] = []
        self.fail: Exception | None = None
        self.delay = 0.0

    async def hypothesise(self, query: str, timeout: float | None = None) -> str:
        self.calls.append((query, timeout))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise self.fail
        return self.answer


class FakeReranker:
    """Scores a document by its length: the longest is the most relevant."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], float | None]] = []
        self.fail: Exception | None = None

    async def score(
        self, query: str, documents: Sequence[str], timeout: float | None = None
    ) -> list[float]:
        self.calls.append((query, list(documents), timeout))
        if self.fail:
            raise self.fail
        return [float(len(d)) for d in documents]


def _wire(h: Any, config: ModelsConfig | None = None, **settings: Any) -> tuple[Any, Any]:
    hyde, reranker = FakeHyde(), FakeReranker()
    if settings:
        h.settings = h.settings_with(**settings)
    models = Models(QueryModels(hyde, reranker, config or ModelsConfig()))
    h.gateway = build_gateway(
        h.settings, Backends(h.vector, h.lexical, h.graph, h.ranker), h.log, h.cache, models=models
    )
    h.world.put(
        h.memory(A, "sarah tea"),
        h.memory(B, "sarah likes tea with a long story about the tea house in lisbon"),
        h.memory(C, "tea"),
    )
    return hyde, reranker


async def _recall(h: Any, query: str = "sarah tea", **kw: Any) -> RecallResult:
    return await h.recall(query, **kw)


ASKED, ANSWERED = "sarah, which tea do you like?", "sarah: green tea"


def _question_then_answer(h: Any) -> None:
    """A world of a question and, stored after it, its answer (one timestamp: id order)."""
    h.world.memories.clear()
    h.world.put(h.memory(A, ASKED), h.memory(B, ANSWERED))


async def test_settings_defaults_apply_when_the_request_is_silent(harness: Any) -> None:
    h = harness
    hyde, reranker = _wire(h, ModelsConfig(hyde_default=True, rerank_default=True))
    result = await _recall(h)
    assert result.models == ("hyde", "rerank")
    assert len(hyde.calls) == len(reranker.calls) == 1
    off = await _recall(h, hyde=False, rerank=False)
    assert off.models == ()
    assert len(hyde.calls) == len(reranker.calls) == 1


async def test_models_are_off_by_default(harness: Any) -> None:
    h = harness
    hyde, reranker = _wire(h)
    assert (await _recall(h)).models == ()
    assert hyde.calls == []
    assert reranker.calls == []
    assert Settings().hyde.enabled is False
    assert Settings().reranker.enabled is False
    assert Settings().decompose_model.enabled is False


async def test_rerank_scores_the_top_n_memory_contents(harness: Any) -> None:
    h = harness
    config = ModelsConfig(rerank_top_n=2, rerank_max_chars=10, rerank_preceding_chars=0)
    _, reranker = _wire(h, config)
    result = await _recall(h, rerank=True)
    ((query, documents, timeout),) = reranker.calls
    assert query == "sarah tea"
    assert len(documents) == 2
    assert all(len(d) <= 10 for d in documents)
    assert timeout is not None
    assert 0 < timeout <= ModelsConfig().rerank_timeout_s
    assert result.models == ("rerank",)


async def test_rerank_reads_a_memory_after_the_end_of_a_question_stored_before_it(
    harness: Any,
) -> None:
    h = harness
    _, reranker = _wire(h, ModelsConfig(rerank_preceding_chars=6), profile="conversation")
    h.world.memories.clear()
    # One timestamp, so the timeline is the order of the ids: A, B, C, D.
    h.world.put(
        h.memory(A, "sarah, which tea do you like? "),
        h.memory(B, "sarah: green tea"),
        h.memory(C, "tea at noon"),
        h.memory(D, "sarah asked? no, tea"),
    )
    result = await _recall(h, rerank=True)
    ((_, documents, _),) = reranker.calls
    # A is first: alone. B follows a question: read after its last 6 characters (trailing
    # space dropped). C follows an answer: alone, or B's tea would lift it. D follows C.
    assert sorted(documents) == sorted(
        [
            "sarah, which tea do you like? ",
            " like?\nsarah: green tea",
            "tea at noon",
            "sarah asked? no, tea",
        ]
    )
    assert result.models == ("rerank",)
    assert "context" not in result.degraded


async def test_rerank_reads_no_question_a_full_window_puts_before_a_memory(
    new_harness: Any,
) -> None:
    # Only the rerank reads windows.
    h = new_harness(context={"seeds": 0, "limit": 2}, profile="conversation")
    _, reranker = _wire(h, ModelsConfig())
    h.vector.whole_windows = True  # a window read gives the first `limit` stored in it
    h.world.memories.clear()
    t0, minute = datetime(2025, 1, 1, tzinfo=UTC), timedelta(minutes=1)
    # The question, its answer two minutes on, and between them (stored last) a note: every
    # read of two around them holds the question and the answer side by side, down to ±14 s,
    # where each is alone.
    h.world.put(
        h.memory(A, ASKED, timestamp=t0),
        h.memory(B, ANSWERED, timestamp=t0 + 2 * minute),
        h.memory(C, "the doorbell rang", timestamp=t0 + minute),
    )
    await _recall(h, rerank=True)
    ((_, documents, _),) = reranker.calls
    assert sorted(documents) == sorted([ASKED, ANSWERED])


async def test_rerank_reads_the_question_before_a_memory_in_its_own_thread(
    new_harness: Any,
) -> None:
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    documents: dict[str, list[str]] = {}
    for thread_by in ("", "tag:conv"):
        h = new_harness(context={"seeds": 0, "thread": thread_by}, profile="conversation")
        _, reranker = _wire(h, ModelsConfig())
        h.vector.whole_windows = True
        h.world.memories.clear()
        # Two agents' chats in one tenant: another's remark lands between question and answer.
        s = timedelta(seconds=1)
        h.world.put(
            h.memory(A, ASKED, timestamp=t0, tags=["conv:x"]),
            h.memory(B, "Hold on, brb", timestamp=t0 + 5 * s, tags=["conv:y"]),
            h.memory(C, ANSWERED, timestamp=t0 + 30 * s, tags=["conv:x"]),
        )
        await _recall(h, rerank=True)
        ((_, documents[thread_by], _),) = reranker.calls
    assert ANSWERED in documents[""]  # after the other agent's remark: read alone
    assert f"{ASKED}\n{ANSWERED}" in documents["tag:conv"]


def test_a_thread_key_is_checked_when_the_settings_load() -> None:
    with pytest.raises(ValidationError, match="thread"):
        Settings(context={"thread": "tag:"})
    assert Settings(context={"thread": "tag:session"}).context.thread == "tag:session"


async def test_rerank_without_preceding_chars_reads_no_timeline(new_harness: Any) -> None:
    def windows_read(h: Any) -> int:
        return [op for op, _ in h.vector.calls].count("search_many")

    with_before, alone = new_harness(profile="conversation"), new_harness(profile="conversation")
    _, reads_before = _wire(with_before, ModelsConfig())
    _, reranker = _wire(alone, ModelsConfig(rerank_preceding_chars=0))
    _question_then_answer(with_before)
    _question_then_answer(alone)
    await _recall(with_before, rerank=True)
    await _recall(alone, rerank=True)
    assert windows_read(with_before) == windows_read(alone) + 1
    assert f"{ASKED}\n{ANSWERED}" in reads_before.calls[0][1]
    ((_, documents, _),) = reranker.calls
    assert sorted(documents) == sorted([ASKED, ANSWERED])


async def test_rerank_in_a_mode_without_vectors_reads_each_memory_alone(harness: Any) -> None:
    h = harness
    _, reranker = _wire(h)
    _question_then_answer(h)
    await _recall(h, rerank=True, mode=RecallMode.BM25)
    assert not any(op == "search_many" for op, _ in h.vector.calls)
    ((_, documents, _),) = reranker.calls
    assert sorted(documents) == sorted([ASKED, ANSWERED])


async def test_a_failed_timeline_read_reranks_each_memory_alone(harness: Any) -> None:
    h = harness
    # Only the rerank reads windows.
    _, reranker = _wire(h, ModelsConfig(), context={"seeds": 0}, profile="conversation")
    _question_then_answer(h)
    plain = h.vector.search_many

    async def failing(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("window read failed")

    h.vector.search_many = failing
    result = await _recall(h, rerank=True)
    h.vector.search_many = plain
    assert result.models == ("rerank",)
    assert result.degraded == ("context",)
    ((_, documents, _),) = reranker.calls
    assert sorted(documents) == sorted([ASKED, ANSWERED])


async def test_rerank_reads_the_windows_of_a_long_head_in_calls_the_store_takes(
    new_harness: Any,
) -> None:
    h = new_harness(context={"seeds": 0}, profile="conversation")  # only the rerank reads windows
    _, reranker = _wire(h, ModelsConfig(rerank_top_n=40))
    h.vector.whole_windows = True
    h.world.memories.clear()  # not _wire's three
    # 40 teas a day apart, each a minute after a question the query does not match: 40 windows
    # that do not merge.
    day = datetime(2025, 1, 1, tzinfo=UTC)
    for i in range(40):
        at = day + timedelta(days=i)
        h.world.put(
            h.memory(f"0190f3a4-7b1c-7d2e-8f00-0000000002{i:02x}", f"note {i}?", timestamp=at),
            h.memory(
                f"0190f3a4-7b1c-7d2e-8f00-0000000003{i:02x}",
                f"tea {i}",
                timestamp=at + timedelta(minutes=1),
            ),
        )
    await _recall(h, query="tea", limit=40, rerank=True)
    windows = sorted((arg for op, arg in h.vector.calls if op == "search_many"), reverse=True)
    assert windows == [SEARCH_MANY_MAX_FILTERS, 40 - SEARCH_MANY_MAX_FILTERS]
    ((_, documents, _),) = reranker.calls
    assert sorted(documents) == sorted(f"note {i}?\ntea {i}" for i in range(40))


async def test_rerank_asks_scoring_for_its_whole_top_n(new_harness: Any) -> None:
    h = new_harness(postrank={"near_duplicates": False})
    _wire(h, ModelsConfig(rerank_top_n=30))
    await _recall(h, limit=2, include_archived=True)  # nothing cuts, nothing widens it
    assert h.ranker.calls[-1]["limit"] == 2
    await _recall(h, limit=2, include_archived=True, rerank=True)
    assert h.ranker.calls[-1]["limit"] == 30
    result = await _recall(h, limit=2, include_archived=True, rerank=True)
    assert len(result.results) == 2  # the limit still holds after reranking


async def test_cache_keys_on_the_model_flags_and_skips_failures(harness: Any) -> None:
    h = harness
    hyde, reranker = _wire(h, recall_cache_ttl_s=60.0)
    await _recall(h)
    await _recall(h, hyde=True)  # a different answer: not the plain recall's entry
    assert len(hyde.calls) == 1
    await _recall(h, hyde=True)  # cached
    assert len(hyde.calls) == 1
    reranker.fail = RuntimeError("boom")
    first = await _recall(h, rerank=True)
    assert "rerank" in first.degraded
    await _recall(h, rerank=True)  # a degraded answer was not cached
    assert len(reranker.calls) == 2


async def test_hyde_with_queries_alone_answers_the_first_of_them(harness: Any) -> None:
    h = harness
    hyde, _ = _wire(h)
    result = await _recall(h, query="", queries=["sarah tea", "lisbon house"], hyde=True)
    assert [q for q, _ in hyde.calls] == ["sarah tea"]  # not "", not both run together
    assert result.models == ("hyde",)
    dense = [arg[0] for op, arg in h.vector.calls if op == "search" and arg[1].start is None]
    hyded = [d for d in dense if d.endswith("\nSarah had tea in Lisbon")]
    assert len(hyded) == 1  # the first sub-query's stream embeds the answer
    assert hyded[0].startswith("sarah tea")
    assert any(d.startswith("lisbon") and "Sarah had" not in d for d in dense)


async def test_hyde_runs_once_when_the_recall_escalates(harness: Any) -> None:
    h = harness
    hyde, _ = _wire(h, scoring={"escalation_floor": 0.99}, streams={"max_pool": 400})
    # More tea than the first pool holds, so widening it can find something new.
    h.world.put(*(h.memory(f"0190f3a4-7b1c-7d2e-8f00-0000000001{i:02x}", "tea") for i in range(9)))
    result = await _recall(h, hyde=True, limit=1)
    assert result.escalated
    assert len(hyde.calls) == 1
    dense = [arg[0] for op, arg in h.vector.calls if op == "search" and arg[1].start is None]
    assert len(dense) == 2
    assert all(d.endswith("\nSarah had tea in Lisbon") for d in dense)


async def test_a_slow_hyde_is_cut_by_its_timeout(harness: Any) -> None:
    h = harness
    hyde, _ = _wire(h, ModelsConfig(hyde_timeout_s=0.1))
    hyde.delay = 1.0
    result = await _recall(h, hyde=True)
    # Waited for, the slow model would have answered: failed means cut.
    assert result.models_failed == ("hyde",)
    assert "hyde" in result.degraded
    assert result.results  # the recall went on without it


async def test_no_time_left_skips_the_model(harness: Any) -> None:
    h = harness
    hyde, _ = _wire(h)
    trace = ModelTrace()
    with tracing(trace):
        text = await h.gateway.reader._models.hypothesis("q", Deadline.within(-1.0))
    assert text == ""
    assert hyde.calls == []
    assert trace.failed == ["hyde"]


# --- settings --------------------------------------------------------------------------------


def test_enabled_needs_a_base_url() -> None:
    with pytest.raises(ValidationError, match="base_url"):
        Settings(hyde={"enabled": True})
    with pytest.raises(ValidationError, match="base_url"):
        Settings(reranker={"enabled": True})


async def test_models_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_GATEWAY_RERANKER__BASE_URL", "http://127.0.0.1:8080")
    monkeypatch.setenv("ENGRAM_GATEWAY_RERANKER__MODE", "replace")
    monkeypatch.setenv("ENGRAM_GATEWAY_RERANKER__TOP_N", "40")
    monkeypatch.setenv("ENGRAM_GATEWAY_DECOMPOSE_MODEL__BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("ENGRAM_GATEWAY_DECOMPOSE_MODEL__ENABLED", "true")
    s = Settings()
    models = build_models(s)
    assert models.query.hyde is None  # no base_url: not built
    assert models.query.reranker is not None
    assert models.query.config.rerank_mode is RerankMode.REPLACE
    assert models.query.config.rerank_top_n == 40
    assert models.decomposer is not None
    await models.close()
    with pytest.raises(ValidationError):
        Settings(reranker={"base_url": "http://x", "mode": "sideways"})
    with pytest.raises(ValidationError):
        Settings(reranker={"base_url": "http://x", "top_n": 101})  # scoring's max_limit


async def test_a_pinned_focus_stays_first_through_the_reranker(harness: Any) -> None:
    # The cross-encoder's order alone, so the focus bonus scoring gave C counts for nothing.
    _wire(harness, ModelsConfig(rerank_mode=RerankMode.REPLACE, rerank_preceding_chars=0))
    # The fake cross-encoder prefers the longest text; C ("tea") is the shortest.
    plain = await _recall(harness, rerank=True)
    assert [s.memory.id for s in plain.results][-1] == C
    pinned = await _recall(harness, rerank=True, focus=Focus(ids=(C,), pinned=True))
    assert next(s.memory.id for s in pinned.results) == C
