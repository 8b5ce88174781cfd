from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram_core.errors import InvalidArgument
from engram_core.model import Memory
from engram_core.scoring import Candidate, Fusion, Normalisation, RecencyMode, Weights
from engram_scoring.bootstrap import build_ranker
from engram_scoring.config import Settings, WeightSettings

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def test_every_core_weight_is_a_described_setting_with_the_core_default() -> None:
    assert set(WeightSettings.model_fields) == set(Weights.names())
    assert WeightSettings().to_core() == Weights()
    for name, f in {**WeightSettings.model_fields, **Settings.model_fields}.items():
        assert f.description, name


def test_env_overrides_weights_and_recency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_SCORING_WEIGHTS__VECTOR", "0.9")
    monkeypatch.setenv("ENGRAM_SCORING_WEIGHTS__RRF_GRAPH", "0.5")
    monkeypatch.setenv("ENGRAM_SCORING_RECENCY_MODE", "half_life")
    monkeypatch.setenv("ENGRAM_SCORING_RRF_K", "10")
    ranker = build_ranker(Settings())
    d = ranker.defaults
    assert (d.weights.vector, d.weights.rrf_graph, d.weights.keyword) == (0.9, 0.5, 0.35)
    assert (d.recency_mode, d.rrf_k) == (RecencyMode.HALF_LIFE, 10.0)


def test_env_sets_normalisation_time_and_context(monkeypatch: pytest.MonkeyPatch) -> None:
    d = build_ranker(Settings()).defaults
    assert (d.normalisation, d.time_half_life_days, d.context_decay) == (
        Normalisation.ZSCORE,
        3.0,
        0.5,
    )
    monkeypatch.setenv("ENGRAM_SCORING_NORMALISATION", "raw")
    monkeypatch.setenv("ENGRAM_SCORING_TIME_HALF_LIFE_DAYS", "7")
    monkeypatch.setenv("ENGRAM_SCORING_CONTEXT_DECAY", "0.25")
    d = build_ranker(Settings()).defaults
    assert (d.normalisation, d.time_half_life_days, d.context_decay) == (
        Normalisation.RAW,
        7.0,
        0.25,
    )


def test_negative_weight_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_SCORING_WEIGHTS__TAG", "-1")
    with pytest.raises(ValueError, match="tag"):
        Settings()


def test_request_knobs_on_top_of_defaults() -> None:
    ranker = build_ranker(Settings(default_limit=7, max_limit=50, profile="conversation"))
    p = ranker.params(None, 0, {})
    assert (p.fusion, p.limit, p.weights) == (Fusion.WEIGHTED, 7, Weights())
    p = ranker.params(Fusion.RRF, 50, {"exact": 1.0})
    assert (p.fusion, p.limit, p.weights.exact, p.weights.vector) == (Fusion.RRF, 50, 1.0, 0.35)


def test_profile_overrides_go_over_the_configured_weights_and_under_the_request() -> None:
    weights = WeightSettings(label=0.6, context=0.7, exact=0.5)
    ranker = build_ranker(Settings(weights=weights, profile="conversation"))
    configured = ranker.params(None, 0, {}).weights
    assert (configured.label, configured.context, configured.exact) == (0.6, 0.7, 0.5)
    assert ranker.params(None, 0, {}, "conversation").weights == configured
    off = ranker.params(None, 0, {}, "default").weights
    assert (off.label, off.context, off.exact) == (0.0, 0.0, 0.5)
    mine = ranker.params(None, 0, {"context": 0.2}, "default").weights
    assert (mine.label, mine.context) == (0.0, 0.2)


def test_out_of_the_box_a_request_naming_no_profile_is_ranked_by_default() -> None:
    ranker = build_ranker(Settings())
    assert ranker.params(None, 0, {}).weights == ranker.params(None, 0, {}, "default").weights
    assert ranker.params(None, 0, {}).weights.label == 0.0


def test_the_profile_setting_is_the_one_of_a_request_that_names_none() -> None:
    ranker = build_ranker(Settings(profile="default"))
    assert ranker.params(None, 0, {}).weights == ranker.params(None, 0, {}, "default").weights
    assert ranker.params(None, 0, {}).weights.context == 0.0
    assert ranker.params(None, 0, {}, "conversation").weights == Weights()


def test_an_unknown_profile_setting_fails_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_SCORING_PROFILE", "chat")
    with pytest.raises(ValueError, match="unknown profile 'chat'"):
        Settings()


@pytest.mark.parametrize(
    ("limit", "weights", "field"),
    [(51, {}, "limit"), (-1, {}, "limit"), (5, {"nope": 1.0}, "weights")],
)
def test_bad_request_knobs(limit: int, weights: dict[str, float], field: str) -> None:
    ranker = build_ranker(Settings(max_limit=50))
    with pytest.raises(InvalidArgument) as err:
        ranker.params(None, limit, weights)
    assert err.value.field == field


def test_an_unknown_request_profile_names_the_field() -> None:
    with pytest.raises(InvalidArgument) as err:
        build_ranker(Settings()).params(None, 0, {}, "chat")
    assert err.value.field == "profile"


def test_server_clock_is_used_when_no_now_is_given() -> None:
    ranker = build_ranker(Settings(), clock=lambda: NOW)
    m = Memory(id="m", tenant="t", content="c", timestamp=NOW - timedelta(days=90))
    (r,) = ranker.rank([Candidate(m)], ranker.defaults)
    assert r.components["recency"] == 0.5  # 1 - 90/180 against the injected clock
    (r,) = ranker.rank([Candidate(m)], ranker.defaults, now=NOW + timedelta(days=45))
    assert r.components["recency"] == 0.25
