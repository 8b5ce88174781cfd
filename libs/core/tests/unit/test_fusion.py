"""Learned fusion: the model file's checks and the order it gives ``rank``. Expected
numbers are worked out by hand from ``sigmoid(bias + Σ weight × term)``."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engram_core.fusion import FORMAT, BadModel, LearnedFusion, load, parse
from engram_core.model import Memory
from engram_core.scoring import (
    FEATURES,
    Candidate,
    Focus,
    Fusion,
    Normalisation,
    Params,
    Query,
    StreamScore,
    features_of,
    rank,
)

NOW = datetime(2025, 1, 1, tzinfo=UTC)
RAW = Normalisation.RAW  # components worked out by hand: the cosine, BM25 / the best


def model(weights: dict[str, Any], bias: float = 0.0) -> LearnedFusion:
    return parse({"format": FORMAT, "bias": bias, "weights": weights}, FEATURES, "m.json")


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def cand(id: str, vector: tuple[float, int], keyword: tuple[float, int] | None) -> Candidate:
    m = Memory(id=id, tenant="t", content=id, timestamp=NOW)
    streams = {"vector": StreamScore(*vector)}
    if keyword is not None:
        streams["keyword"] = StreamScore(*keyword)
    return Candidate(m, streams)


# a: the vector stream's best, no keyword hit; b: a weaker vector hit and the keyword's only
# one. By hand (raw components, vector and keyword 0.35 each, the rest equal): a 0.315, b
# 0.175 + 0.35 = 0.525, so b first.
POOL = [cand("a", (0.9, 1), None), cand("b", (0.5, 2), (3.0, 1))]


def ranked(learned: LearnedFusion | None, **query: Any) -> list[str]:
    params = Params(learned=learned, normalisation=RAW, **query.pop("params", {}))
    out = rank(POOL, Query(now=NOW, text="", **query), params)
    return [s.memory.id for s in out]


def test_the_model_orders_the_candidates_not_the_hand_set_weights() -> None:
    assert ranked(None) == ["b", "a"]
    # 1 / the vector stream's rank: a is its first.
    assert ranked(model({"rr_vector": 2.0})) == ["a", "b"]
    assert ranked(model({"rr_vector": -2.0})) == ["b", "a"]


def test_the_score_is_the_sigmoid_of_the_weighted_features() -> None:
    m = model({"vector": 1.5, "rr_vector*vector": 2.0, "keyword": -1.0}, bias=-0.5)
    out = rank(POOL, Query(now=NOW), Params(learned=m, normalisation=RAW))
    by_id = {s.memory.id: s.score for s in out}
    # a: vector 0.9, rr_vector 1, keyword 0; b: vector 0.5, rr_vector 1/2, keyword 1.
    assert by_id["a"] == pytest.approx(sigmoid(-0.5 + 1.5 * 0.9 + 2.0 * 0.9))
    assert by_id["b"] == pytest.approx(sigmoid(-0.5 + 1.5 * 0.5 + 2.0 * 0.25 - 1.0))


def test_handset_feature_is_the_weighted_score_with_context() -> None:
    plain = rank(POOL, Query(now=NOW), Params(normalisation=RAW))
    out = rank(POOL, Query(now=NOW), Params(learned=model({"handset": 1.0}), normalisation=RAW))
    assert [s.score for s in out] == pytest.approx([sigmoid(s.score) for s in plain])
    assert features_of(plain[0])["handset"] == plain[0].score


def test_rrf_and_a_focus_keep_the_hand_set_order() -> None:
    flip = model({"rr_vector": 5.0})
    assert ranked(flip, params={"fusion": Fusion.RRF}) == ranked(
        None, params={"fusion": Fusion.RRF}
    )
    assert ranked(flip, focus=Focus(types=("fact",))) == ["b", "a"]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"format": FORMAT, "bias": 0, "weights": {"vectr": 1.0}}, "unknown feature 'vectr'"),
        ({"format": FORMAT, "bias": 0, "weights": {"vector*nope": 1.0}}, "'vector*nope'"),
        ({"format": FORMAT, "bias": 0, "weights": {"vector*time*label": 1.0}}, "unknown feature"),
        ({"format": FORMAT, "bias": 0, "weights": {"vector": "1"}}, "weight of 'vector'"),
        ({"format": FORMAT, "bias": float("nan"), "weights": {"vector": 1}}, "'bias'"),
        ({"format": FORMAT, "bias": 0, "weights": {}}, "'weights'"),
        ({"format": "other/1", "bias": 0, "weights": {"vector": 1}}, "format"),
        ([1, 2], "format"),
    ],
)
def test_a_bad_model_is_refused_naming_the_file(data: Any, says: str) -> None:
    with pytest.raises(BadModel, match=r"^m\.json: ") as info:
        parse(data, FEATURES, "m.json")
    assert says in str(info.value)


def test_load_reads_a_file_and_names_it_when_it_cannot(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"format": FORMAT, "bias": 0.5, "weights": {"keyword": 2}}))
    m = load(good, FEATURES)
    assert (m.bias, m.terms, m.source) == (0.5, ((2.0, 0, -1),), str(good))
    with pytest.raises(BadModel, match=r"missing\.json"):
        load(tmp_path / "missing.json", FEATURES)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(BadModel, match=r"broken\.json"):
        load(broken, FEATURES)
