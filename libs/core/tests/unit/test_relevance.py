"""relevance_score: the issue's formula by hand, its monotonicity, clamps and write rule.

Expected values are computed here from the issue's text with literal constants
(rate 0.01, access 0.05, 0.3·ln, 0.3 + 0.3·access, 0.5 + importance, 0.7 + 0.3·c,
clamp [0.3·importance, 1]) — never by calling the module.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta

import pytest

from engram_core.associations import AssociationSettings
from engram_core.clusters import ClusterSettings
from engram_core.forgetting import ForgetSettings
from engram_core.model import Memory, Relation
from engram_core.relevance import (
    DecaySettings,
    compute,
    descriptions,
    needs_write,
    relation_counts,
    relevance_score,
)

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def mem(
    age_days: float = 0.0,
    accessed_days_ago: float | None = None,
    importance: float = 0.5,
    confidence: float = 0.9,
    **kw: object,
) -> Memory:
    return Memory(
        id="m",
        tenant="t",
        content="x",
        timestamp=NOW - age_days * DAY,
        last_accessed=None if accessed_days_ago is None else NOW - accessed_days_ago * DAY,
        importance=importance,
        confidence=confidence,
        **kw,  # type: ignore[arg-type]
    )


def by_hand(age: float, idle: float, relations: int, importance: float, confidence: float) -> float:
    decay = math.exp(-0.01 * age)
    access = 1.0 if idle <= 1.0 else math.exp(-0.05 * idle)
    rel = 1 + 0.3 * math.log(1 + relations)
    raw = decay * (0.3 + 0.3 * access) * rel * (0.5 + importance) * (0.7 + 0.3 * confidence)
    return min(1.0, max(0.3 * importance, raw))


# --- hand-computed values --------------------------------------------------------------


def test_fresh_memory_just_stored() -> None:
    # decay 1, access 1 (touched at creation), rel 1: 0.6 · 1.0 · 0.97
    assert relevance_score(mem(), 0, NOW) == pytest.approx(0.582)


def test_hundred_days_old_never_accessed_three_relations() -> None:
    r = compute(mem(age_days=100), 3, NOW)
    assert r.decay == pytest.approx(math.exp(-1))
    assert r.access == pytest.approx(math.exp(-5))
    assert r.rel == pytest.approx(1 + 0.3 * math.log(4))
    assert r.age_days == pytest.approx(100)
    assert r.idle_days == pytest.approx(100)  # never accessed: idle since its timestamp
    assert r.score == pytest.approx(by_hand(100, 100, 3, 0.5, 0.9))
    assert r.score == pytest.approx(0.1525, abs=5e-4)  # 0.36788·0.30202·1.41589·1.0·0.97


@pytest.mark.parametrize(
    ("age", "idle", "relations", "importance", "confidence"),
    [
        (10, 0.5, 0, 0.2, 0.4),  # accessed within the day: access term 1
        (10, 3, 1, 0.8, 1.0),
        (365, 40, 7, 0.1, 0.0),
        (2, 2, 0, 0.0, 0.9),
        (0, 0, 20, 1.0, 1.0),  # clamps at the ceiling
        (3000, 3000, 0, 0.6, 0.5),  # clamps at the importance floor
    ],
)
def test_matches_the_issue_formula(
    age: float, idle: float, relations: int, importance: float, confidence: float
) -> None:
    m = mem(age, idle, importance, confidence)
    assert relevance_score(m, relations, NOW) == pytest.approx(
        by_hand(age, idle, relations, importance, confidence)
    )


def test_uses_the_memorys_own_confidence() -> None:
    low = relevance_score(mem(age_days=5, confidence=0.1), 0, NOW)
    high = relevance_score(mem(age_days=5, confidence=1.0), 0, NOW)
    assert low == pytest.approx(by_hand(5, 5, 0, 0.5, 0.1))
    assert high == pytest.approx(by_hand(5, 5, 0, 0.5, 1.0))
    assert high > low


def test_every_constant_is_a_setting() -> None:
    s = DecaySettings(
        rate=0.1,
        recent_access_days=0.0,
        access_rate=0.2,
        relation_weight=0.5,
        base=0.1,
        access_weight=0.5,
        importance_offset=0.25,
        confidence_base=0.5,
        confidence_weight=0.5,
        floor_per_importance=0.0,
        ceiling=0.9,
    )
    m = mem(age_days=4, accessed_days_ago=2, importance=0.6, confidence=0.8)
    expected = math.exp(-0.4) * (0.1 + 0.5 * math.exp(-0.4)) * (1 + 0.5 * math.log(3)) * 0.85 * 0.9
    assert relevance_score(m, 2, NOW, s) == pytest.approx(expected)


# --- clamps ---------------------------------------------------------------------------


def test_floor_is_a_share_of_importance() -> None:
    r = compute(mem(age_days=1000, importance=0.9), 0, NOW)
    assert r.raw < 0.001
    assert r.score == pytest.approx(0.27)


def test_zero_importance_may_fall_to_almost_nothing() -> None:
    assert relevance_score(mem(age_days=1000, importance=0.0), 0, NOW) < 0.001


def test_ceiling() -> None:
    r = compute(mem(importance=1.0, confidence=1.0), 10, NOW)
    assert r.raw == pytest.approx(0.6 * (1 + 0.3 * math.log(11)) * 1.5)
    assert r.raw > 1
    assert r.score == 1.0


def test_out_of_range_inputs_are_clamped() -> None:
    assert relevance_score(mem(importance=7.0, confidence=-2.0), 0, NOW) == pytest.approx(
        by_hand(0, 0, 0, 1.0, 0.0)
    )
    assert relevance_score(mem(), -5, NOW) == relevance_score(mem(), 0, NOW)


def test_a_future_timestamp_counts_as_now() -> None:
    r = compute(mem(age_days=-3), 0, NOW)
    assert r.age_days == 0
    assert r.score == pytest.approx(0.582)


# --- monotonicity -----------------------------------------------------------------------


def test_older_is_lower() -> None:
    scores = [relevance_score(mem(age_days=d, importance=0.2), 0, NOW) for d in range(0, 400, 7)]
    floor = 0.3 * 0.2
    for younger, older in itertools.pairwise(scores):
        assert older <= younger
        if younger > floor:
            assert older < younger


def test_accessed_is_higher() -> None:
    never = relevance_score(mem(age_days=60), 0, NOW)
    long_ago = relevance_score(mem(age_days=60, accessed_days_ago=30), 0, NOW)
    last_week = relevance_score(mem(age_days=60, accessed_days_ago=7), 0, NOW)
    today = relevance_score(mem(age_days=60, accessed_days_ago=0.2), 0, NOW)
    assert never < long_ago < last_week < today


def test_access_term_is_one_up_to_the_recent_window() -> None:
    assert compute(mem(age_days=9, accessed_days_ago=1.0), 0, NOW).access == 1.0
    assert compute(mem(age_days=9, accessed_days_ago=1.01), 0, NOW).access < 1.0


def test_more_relations_is_higher() -> None:
    scores = [relevance_score(mem(age_days=30), n, NOW) for n in (0, 1, 2, 5, 20)]
    assert scores == sorted(scores)
    assert len(set(scores)) == len(scores)


def test_more_important_or_confident_is_higher() -> None:
    imp = [relevance_score(mem(age_days=30, importance=i), 0, NOW) for i in (0, 0.3, 0.6, 1)]
    conf = [relevance_score(mem(age_days=30, confidence=c), 0, NOW) for c in (0, 0.3, 0.6, 1)]
    assert imp == sorted(imp)
    assert len(set(imp)) == 4
    assert conf == sorted(conf)
    assert len(set(conf)) == 4


def test_now_is_injected_and_alone_moves_the_score() -> None:
    m = mem(age_days=10)
    assert relevance_score(m, 0, NOW) == relevance_score(m, 0, NOW)
    assert relevance_score(m, 0, NOW + 30 * DAY) < relevance_score(m, 0, NOW)


# --- when to write ---------------------------------------------------------------------


def test_needs_write_only_past_epsilon() -> None:
    s = DecaySettings(epsilon=0.01)
    assert not needs_write(0.50, 0.505, s)
    assert not needs_write(0.50, 0.491, s)
    assert needs_write(0.50, 0.485, s)
    assert needs_write(0.50, 0.52, s)
    assert needs_write(float("nan"), 0.5, s)
    assert needs_write(0.5, 0.5, DecaySettings(epsilon=0.0)) is False


def test_daily_passes_write_rarely_and_never_drift_past_epsilon() -> None:
    s = DecaySettings()
    m = mem(importance=0.2)
    stored = relevance_score(m, 0, NOW, s)
    writes = 0
    for day in range(1, 121):
        fresh = relevance_score(m, 0, NOW + day * DAY, s)
        if needs_write(stored, fresh, s):
            stored = fresh
            writes += 1
        assert abs(stored - fresh) <= s.epsilon
    assert 0 < writes < 60  # far fewer than one write per pass


# --- relation counts -------------------------------------------------------------------


def test_relation_counts() -> None:
    rels = [
        Relation("a", "b", "RELATES_TO"),
        Relation("a", "b", "RELATES_TO"),  # the same edge read twice
        Relation("b", "a", "SIMILAR_TO"),
        Relation("c", "a", "PRECEDED_BY"),
        Relation("a", "a", "RELATES_TO"),  # self-loop
        Relation("a", "entity:people:sam", "MENTIONS"),
        Relation("x", "y", "RELATES_TO"),  # not asked about
    ]
    assert relation_counts(["a", "b", "c", "d"], rels) == {"a": 3, "b": 2, "c": 1, "d": 0}


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"rate": -0.1},
        {"epsilon": float("nan")},
        {"ceiling": 0.0},
        {"ceiling": 1.5},
        {"floor_per_importance": 0.8, "ceiling": 0.5},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"."):
        DecaySettings(**bad)


def test_settings_are_frozen() -> None:
    s = DecaySettings()
    with pytest.raises(AttributeError):
        s.rate = 0.5  # type: ignore[misc]
    assert replace(s, rate=0.02).rate == 0.02


@pytest.mark.parametrize(
    "settings_type", [DecaySettings, ForgetSettings, AssociationSettings, ClusterSettings]
)
def test_every_setting_has_a_description(settings_type: type[DecaySettings]) -> None:
    described = descriptions(settings_type)
    assert set(described) == {f.name for f in fields(settings_type)}
    assert all(text.strip() for text in described.values())
