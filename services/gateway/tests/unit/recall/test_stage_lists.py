"""The stage lists: one place says what a recall runs, in which order."""

from __future__ import annotations

from engram_gateway.service.recall import Stage
from engram_gateway.service.recall.stages import PREPARE, SEARCH, TRENDING


def names(stages: tuple[Stage, ...]) -> list[str]:
    return [s.name for s in stages]


def test_a_search_round_retrieves_ranks_and_then_refines() -> None:
    order = names(SEARCH)
    # Feedback merges the candidates again from its second search, so it comes before
    # pinned memories join them.
    assert order[:5] == ["retrieve", "candidates", "feedback", "pinned", "none_found"]
    # Relations and neighbours feed scoring; state runs on the ranking before the
    # reranker reads it; post-ranking makes the answer last.
    assert order.index("relations") < order.index("scoring")
    assert order.index("context") < order.index("scoring")
    assert order.index("graph_rerank") < order.index("state") < order.index("rerank")
    assert order[-1] == "answer"


def test_a_recall_prepares_hyde_before_decomposing_and_trending_lists() -> None:
    assert names(PREPARE) == ["hyde", "decompose"]
    assert names(TRENDING) == ["listing", "state", "answer"]
