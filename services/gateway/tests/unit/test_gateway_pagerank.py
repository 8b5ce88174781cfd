"""Personalised PageRank and the hybrid_graph blend (service/pagerank.py) on hand graphs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engram_core.model import Memory, Relation
from engram_core.scoring import ScoredCandidate
from engram_gateway.service.pagerank import (
    PPR_COMPONENT,
    GraphRerankConfig,
    check_alpha,
    graph_rerank,
    personalised_pagerank,
    pool_edges,
)


def closed_form(
    nodes: list[str], edges: list[tuple[str, str, float]], p: dict[str, float], d: float
) -> dict[str, float]:
    """(1 - d) (I - d Pᵀ)⁻¹ v for an undirected graph without dangling nodes."""
    idx = {n: i for i, n in enumerate(nodes)}
    w = np.zeros((len(nodes), len(nodes)))
    for a, b, weight in edges:
        w[idx[a], idx[b]] += weight
        w[idx[b], idx[a]] += weight
    transition = w / w.sum(axis=1, keepdims=True)
    v = np.array([p.get(n, 0.0) for n in nodes])
    v = v / v.sum()
    x = (1 - d) * np.linalg.solve(np.eye(len(nodes)) - d * transition.T, v)
    return {n: float(x[idx[n]]) for n in nodes}


def test_matches_the_closed_form_on_a_weighted_graph() -> None:
    edges = [("a", "b", 1.0), ("b", "c", 0.5), ("c", "d", 2.0), ("a", "c", 0.25), ("d", "e", 1)]
    p = {"a": 2.0, "d": 1.0}
    got = personalised_pagerank(edges, p, damping=0.85)
    want = closed_form(["a", "b", "c", "d", "e"], edges, p, 0.85)
    assert set(got) == set(want)
    for n in want:
        assert got[n] == pytest.approx(want[n], abs=1e-9), n
    assert sum(got.values()) == pytest.approx(1.0)


def test_a_path_decays_with_distance_from_the_seed() -> None:
    edges = [("s", "x1", 1.0), ("x1", "x2", 1.0), ("x2", "x3", 1.0)]
    r = personalised_pagerank(edges, {"s": 1.0})
    # (x1 may outrank s itself: it has two edges to collect from, s one.)
    assert r["x1"] > r["x2"] > r["x3"] > 0


def test_a_node_linked_to_two_seeds_beats_one_linked_to_one() -> None:
    # bridge touches both seeds, leaf only one; same edge weights.
    edges = [("s1", "bridge", 1.0), ("s2", "bridge", 1.0), ("s1", "leaf", 1.0)]
    r = personalised_pagerank(edges, {"s1": 1.0, "s2": 1.0})
    assert r["bridge"] > r["leaf"]


def test_heavier_edges_carry_more() -> None:
    r = personalised_pagerank([("s", "strong", 0.9), ("s", "weak", 0.1)], {"s": 1.0})
    assert r["strong"] == pytest.approx(9 * r["weak"], rel=1e-6)


def test_isolated_seed_and_unreachable_nodes() -> None:
    r = personalised_pagerank([("x", "y", 1.0)], {"s": 1.0})
    assert r["s"] == pytest.approx(1.0)  # dangling: its mass restarts at itself
    assert r["x"] == 0.0
    assert r["y"] == 0.0


def test_self_loops_and_non_positive_weights_are_ignored() -> None:
    a = personalised_pagerank([("s", "t", 1.0), ("s", "s", 5.0), ("s", "u", 0.0)], {"s": 1.0})
    b = personalised_pagerank([("s", "t", 1.0)], {"s": 1.0})
    assert a["t"] == pytest.approx(b["t"])
    assert a.get("u", 0.0) == 0.0


def test_parallel_edges_add_up() -> None:
    a = personalised_pagerank([("s", "t", 0.5), ("t", "s", 0.5), ("s", "u", 1.0)], {"s": 1.0})
    assert a["t"] == pytest.approx(a["u"])


def test_personalisation_must_have_weight() -> None:
    with pytest.raises(ValueError, match="personalisation"):
        personalised_pagerank([("a", "b", 1.0)], {"a": 0.0})


# --- the pool's graph -----------------------------------------------------------------------


def scored(id: str, score: float, entities: tuple[str, ...] = ()) -> ScoredCandidate:
    return ScoredCandidate(
        Memory(id=id, tenant="t", content=id, entities=entities), score, {"vector": score}, {}
    )


def test_entity_edges_weigh_by_rarity_in_the_pool() -> None:
    pool = [
        scored("a", 1.0, ("people:x", "tools:rare")),
        scored("b", 0.9, ("people:x", "tools:rare")),
        scored("c", 0.8, ("people:x", "tools:mid")),
        scored("d", 0.7, ("people:x", "tools:mid")),
        scored("e", 0.6, ("people:x", "tools:mid", "tools:once")),
    ]
    edges = pool_edges(pool, [], entity_weight=0.5)
    weight = {(a, b): w for a, b, w in edges}
    assert weight[("a", "entity:tools:rare")] == pytest.approx(0.5)  # df 2: the full weight
    mid = 0.5 * math.log(5 / 3) / math.log(5 / 2)
    assert weight[("c", "entity:tools:mid")] == pytest.approx(mid)
    # Everyone mentions people:x (no information); tools:once links nothing.
    assert not any(b in ("entity:people:x", "entity:tools:once") for _, b, _ in edges)


def test_relations_become_edges_but_mentions_do_not() -> None:
    rels = [Relation("a", "z", "RELATES_TO", 0.7), Relation("a", "ent", "MENTIONS", 1.0)]
    edges = pool_edges([scored("a", 1.0), scored("b", 0.5)], rels, entity_weight=0.5)
    assert edges == [("a", "z", 0.7)]


# --- the blend ------------------------------------------------------------------------------


def test_alpha_zero_keeps_the_fused_order() -> None:
    pool = [scored("a", 1.0), scored("b", 0.5), scored("c", 0.4)]
    rels = [Relation("a", "c", "RELATES_TO", 1.0)]
    assert graph_rerank(pool, rels, GraphRerankConfig(alpha=0.0)) == pool


def test_a_result_linked_to_the_seeds_rises_above_an_unlinked_one() -> None:
    pool = [
        scored("s1", 1.0),
        scored("s2", 0.95),
        scored("loner", 0.6),  # better fused score, tied to nothing
        scored("linked", 0.5),  # linked to both seeds
    ]
    rels = [Relation("s1", "linked", "RELATES_TO", 0.9), Relation("linked", "s2", "LEADS_TO", 0.9)]
    out = graph_rerank(pool, rels, GraphRerankConfig(alpha=0.3, seeds=2))
    ids = [s.memory.id for s in out]
    assert ids.index("linked") < ids.index("loner")
    assert ids[0] == "s1"
    by_id = {s.memory.id: s for s in out}
    assert by_id["loner"].components[PPR_COMPONENT] == 0.0
    assert by_id["loner"].score == pytest.approx(0.7 * 0.6)  # (1 - alpha) · fused + 0
    top_ppr = max(s.components[PPR_COMPONENT] for s in out)
    assert top_ppr == pytest.approx(1.0)
    link = by_id["linked"]
    want = 0.7 * 0.5 + 0.3 * 1.0 * link.components[PPR_COMPONENT]
    assert link.score == pytest.approx(want)
    assert link.components["vector"] == 0.5  # the fused components stay


def test_alpha_one_orders_by_pagerank_alone() -> None:
    pool = [scored("s", 1.0), scored("far", 0.9), scored("near", 0.1)]
    rels = [Relation("s", "near", "RELATES_TO", 1.0), Relation("near", "far", "RELATES_TO", 1.0)]
    out = graph_rerank(pool, rels, GraphRerankConfig(alpha=1.0, seeds=1))
    # near sits between the two others and collects from both; far is two steps out.
    assert [s.memory.id for s in out] == ["near", "s", "far"]
    ppr = [s.components[PPR_COMPONENT] for s in out]
    assert ppr == sorted(ppr, reverse=True)


def test_shared_rare_entities_pull_a_result_up() -> None:
    pool = [
        scored("s", 1.0, ("people:caroline", "places:sweden")),
        scored("plain", 0.62, ("people:caroline",)),
        scored("sweden", 0.6, ("people:caroline", "places:sweden")),
        scored("other", 0.55, ("people:caroline",)),
    ]
    out = graph_rerank(pool, [], GraphRerankConfig(alpha=0.3, seeds=1))
    ids = [s.memory.id for s in out]
    assert ids.index("sweden") < ids.index("plain")


def test_check_alpha() -> None:
    assert check_alpha(0.0, 0.3) == 0.3
    assert check_alpha(1.0, 0.3) == 1.0
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(Exception, match=r"graph_rerank\.alpha"):
            check_alpha(bad, 0.3)
