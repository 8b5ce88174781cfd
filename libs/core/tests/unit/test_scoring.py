"""Scoring math. Every expected number below is worked out by hand from the formula in
the module docstring / services/scoring/README.md, never taken from a run of the code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram_core.errors import InvalidArgument
from engram_core.model import Memory
from engram_core.scoring import (
    COMPONENTS,
    CONTEXT,
    SCORED_FIELDS,
    Candidate,
    Focus,
    Fusion,
    Normalisation,
    Params,
    Query,
    RecencyBias,
    RecencyMode,
    ScoredCandidate,
    StreamScore,
    Weights,
    asks_for_latest,
    mentioned_periods,
    rank,
)
from engram_core.tags import tag_prefixes

NOW = datetime(2025, 1, 1, tzinfo=UTC)
EXACT = 1e-12


def mem(
    id: str,
    content: str = "unrelated text",
    *,
    age_days: float = 0.0,
    tags: tuple[str, ...] = (),
    importance: float = 0.5,
    confidence: float = 0.9,
    relevance: float = 0.0,
    metadata: Mapping[str, Any] | None = None,
) -> Memory:
    return Memory(
        id=id,
        tenant="t",
        content=content,
        tags=tags,
        tag_prefixes=tag_prefixes(tags),
        importance=importance,
        confidence=confidence,
        relevance_score=relevance,
        metadata=dict(metadata or {}),
        timestamp=NOW - timedelta(days=age_days),
    )


def cand(m: Memory, relation: float = 0.0, **streams: tuple[float, int]) -> Candidate:
    return Candidate(m, {k: StreamScore(s, r) for k, (s, r) in streams.items()}, relation)


def only(**weights: float) -> Weights:
    """Weights with every component weight 0 except those given."""
    zero = {n: 0.0 for n in Weights.names() if not n.startswith("rrf_")}
    return Weights().with_overrides({**zero, **weights})


def run(
    candidates: list[Candidate],
    text: str = "",
    tags: tuple[str, ...] = (),
    **params: Any,
) -> list[ScoredCandidate]:
    # The hand-worked numbers below use the raw stream components; the default (standard
    # scores) has tests of its own.
    params.setdefault("normalisation", Normalisation.RAW)
    return rank(candidates, Query(now=NOW, text=text, tags=tags), Params(**params))


def ids(results: list[ScoredCandidate]) -> list[str]:
    return [r.memory.id for r in results]


def expect(results: list[ScoredCandidate], expected: list[tuple[str, float]]) -> None:
    """Ids in this order, with these scores (to float rounding)."""
    assert ids(results) == [i for i, _ in expected]
    assert [r.score for r in results] == pytest.approx([s for _, s in expected], abs=EXACT)


# --- weights ---------------------------------------------------------------------------


def test_default_weights_are_the_documented_vector() -> None:
    w = Weights()
    assert {n: w.get(n) for n in Weights.names()} == {
        "vector": 0.35,
        "keyword": 0.35,
        "metadata": 0.35,
        "relation": 0.25,
        "tag": 0.20,
        "label": 0.30,
        "exact": 0.20,
        "recency": 0.10,
        "importance": 0.10,
        "confidence": 0.05,
        "relevance": 0.0,
        "graph": 0.0,
        "time": 0.30,
        "context": 0.40,
        "focus_tag": 0.45,
        "focus_type": 0.25,
        "focus_keyword": 0.2,
        "focus_id": 0.9,
        "recency_bias": 0.2,
        "rrf_vector": 1.0,
        "rrf_keyword": 1.0,
        "rrf_graph": 1.0,
    }


def test_every_component_has_a_weight_of_the_same_name() -> None:
    assert set(COMPONENTS) | {CONTEXT} == {n for n in Weights.names() if not n.startswith("rrf_")}


def test_override_replaces_only_the_named_weight() -> None:
    w = Weights().with_overrides({"tag": 0.9, "rrf_graph": 2.0})
    assert (w.tag, w.rrf_graph, w.vector, w.keyword) == (0.9, 2.0, 0.35, 0.35)


@pytest.mark.parametrize(
    "overrides",
    [{"bogus": 1.0}, {"vector": -0.1}, {"keyword": float("nan")}, {"tag": float("inf")}],
)
def test_bad_override_is_invalid_argument_on_weights(overrides: dict[str, float]) -> None:
    with pytest.raises(InvalidArgument) as err:
        Weights().with_overrides(overrides)
    assert err.value.field == "weights"
    assert next(iter(overrides)) in err.value.reason


def test_limit_below_one_is_refused() -> None:
    with pytest.raises(InvalidArgument) as err:
        Params(limit=0)
    assert err.value.field == "limit"


# --- weighted fusion: one full hand-computed case ------------------------------------


def test_weighted_score_of_every_component_by_hand() -> None:
    a = mem(
        "a",
        "We deploy pipeline changes on Fridays",
        age_days=45,
        tags=("project:engram:ci", "lang:python"),
        importance=0.8,
        confidence=0.6,
        relevance=0.5,
        metadata={"source": "slack", "topic": "Pipeline"},
    )
    b = mem("b", "release notes", age_days=0, importance=0.5, confidence=0.9)
    results = run(
        [cand(b, keyword=(8.0, 1)), cand(a, 0.4, vector=(0.7, 1), keyword=(6.0, 2))],
        text="deploy pipeline",
        tags=("project:engram",),
    )
    assert ids(results) == ["a", "b"]
    ra, rb = results
    assert ra.components == pytest.approx(
        {
            "vector": 0.7,
            "keyword": 0.75,  # 6 / 8, the best keyword score in the set
            "graph": 0.0,  # the graph stream did not return it
            "metadata": 0.5,  # {deploy, pipeline} ∩ {slack, pipeline} = 1 of 2
            "tag": 1.0,  # project:engram is a prefix of project:engram:ci
            "exact": 1.0,
            "recency": 0.75,  # 1 - 45/180
            "importance": 0.8,
            "confidence": 0.6,
            "relevance": 0.5,
            "relation": 0.4,
            "label": 0.0,  # "ci" and "python": the query names neither
            "time": 0.0,  # the query names no date
            "context": 0.0,  # no timeline neighbours
            "focus_tag": 0.0,  # the request has no focus
            "focus_type": 0.0,
            "focus_keyword": 0.0,
            "focus_id": 0.0,
            "recency_bias": 0.0,  # the query does not ask for the latest
        },
        abs=EXACT,
    )
    # .35*.7 + .35*.75 + .35*.5 + .2*1 + .2*1 + .1*.75 + .1*.8 + .05*.6 + 0*.5 + .25*.4
    assert ra.score == pytest.approx(1.3675, abs=EXACT)
    # .35*1 (keyword 8/8) + .1*1 (recency) + .1*.5 + .05*.9
    assert rb.score == pytest.approx(0.545, abs=EXACT)
    assert rb.components["vector"] == 0.0
    assert rb.streams == {"keyword": StreamScore(8.0, 1)}


def test_graph_stream_is_normalised_by_its_best_score() -> None:
    results = run(
        [cand(mem("x"), graph=(3.0, 1)), cand(mem("y"), graph=(1.5, 2))],
        weights=only(graph=1.0),
    )
    assert [(r.memory.id, r.components["graph"], r.score) for r in results] == [
        ("x", 1.0, 1.0),
        ("y", 0.5, 0.5),
    ]


def test_vector_cosine_is_clamped_to_unit_interval() -> None:
    results = run(
        [cand(mem("neg"), vector=(-0.4, 3)), cand(mem("big"), vector=(1.2, 1))],
        weights=only(vector=1.0),
    )
    assert {r.memory.id: r.components["vector"] for r in results} == {"neg": 0.0, "big": 1.0}


def test_relation_is_capped_at_one() -> None:
    (r,) = run([cand(mem("r"), 2.5)], weights=only(relation=0.25))
    assert r.components["relation"] == 1.0
    assert r.score == pytest.approx(0.25, abs=EXACT)


def test_query_independent_components_are_clamped() -> None:
    (r,) = run([cand(mem("c", importance=1.5, confidence=-0.2, relevance=0.3))])
    assert (r.components["importance"], r.components["confidence"]) == (1.0, 0.0)
    assert r.components["relevance"] == pytest.approx(0.3)


# --- individual components ---------------------------------------------------------


def test_metadata_counts_distinct_query_tokens_found_in_string_values() -> None:
    m = mem(
        "m",
        metadata={
            "participants": ["Sarah", "Tom"],
            "title": "Budget review",
            "meeting": "no",  # keys never count, only values
            "count": 3,
            "nested": {"where": "Berlin office"},
        },
    )
    # tokens >= 3 chars: sarah, meeting, about, budget, berlin ("s", "q3" too short)
    # found in values: sarah, budget, berlin -> 3 of 5
    (r,) = run([cand(m)], text="Sarah's meeting about Q3 budget Berlin budget")
    assert r.components["metadata"] == pytest.approx(3 / 5, abs=EXACT)


def test_metadata_matches_whole_tokens_not_substrings() -> None:
    (r,) = run([cand(mem("m", metadata={"role": "author"}))], text="auth")
    assert r.components["metadata"] == 0.0


def test_tag_fraction_with_exact_and_prefix_matches() -> None:
    both = mem("both", tags=("project:engram:ci", "lang:rust"))
    half = mem("half", tags=("project:engram", "lang:python"))
    shorter = mem("shorter", tags=("project",))  # a query tag longer than the memory's: no
    results = run(
        [cand(both), cand(half), cand(shorter)],
        tags=("Project/Engram", "lang:rust", "lang:rust"),
        weights=only(tag=1.0),
    )
    assert [(r.memory.id, r.components["tag"]) for r in results] == [
        ("both", 1.0),
        ("half", 0.5),
        ("shorter", 0.0),
    ]


def test_no_query_tags_gives_zero_tag_component() -> None:
    (r,) = run([cand(mem("t", tags=("a",)))])
    assert r.components["tag"] == 0.0


@pytest.mark.parametrize(
    ("query", "content", "expected"),
    [
        ("  Deploy   PIPELINE ", "We DEPLOY \n  pipeline changes", 1.0),
        ("abc", "xxabcxx", 1.0),
        ("ab", "ab ab ab", 0.0),  # shorter than 3 characters never counts
        ("pipeline deploy", "we deploy pipeline changes", 0.0),  # word order matters
    ],
)
def test_exact_match(query: str, content: str, expected: float) -> None:
    (r,) = run([cand(mem("e", content))], text=query)
    assert r.components["exact"] == expected


@pytest.mark.parametrize(
    ("age_days", "expected"),
    [(0, 1.0), (45, 0.75), (90, 0.5), (180, 0.0), (400, 0.0), (-3, 1.0)],
)
def test_recency_linear_over_window(age_days: float, expected: float) -> None:
    (r,) = run([cand(mem("r", age_days=age_days))])
    assert r.components["recency"] == pytest.approx(expected, abs=EXACT)


def test_recency_window_is_a_setting() -> None:
    (r,) = run([cand(mem("r", age_days=15))], recency_window_days=60)
    assert r.components["recency"] == pytest.approx(0.75, abs=EXACT)


@pytest.mark.parametrize(("age_days", "expected"), [(0, 1.0), (30, 0.5), (60, 0.25), (90, 0.125)])
def test_recency_half_life(age_days: float, expected: float) -> None:
    (r,) = run(
        [cand(mem("r", age_days=age_days))],
        recency_mode=RecencyMode.HALF_LIFE,
        recency_half_life_days=30,
    )
    assert r.components["recency"] == pytest.approx(expected, abs=EXACT)


# --- missing streams -------------------------------------------------------------


def test_missing_stream_counts_zero_and_does_not_break_normalisation() -> None:
    # Lexical did not answer at all: no candidate carries "keyword".
    results = run(
        [cand(mem("v1"), vector=(0.8, 1)), cand(mem("v2"), vector=(0.6, 2))],
        weights=only(vector=1.0, keyword=1.0, graph=1.0),
    )
    assert [(r.memory.id, r.score) for r in results] == [("v1", 0.8), ("v2", 0.6)]
    assert all(r.components["keyword"] == 0.0 and r.components["graph"] == 0.0 for r in results)


def test_candidate_missing_from_one_stream_scores_only_the_others() -> None:
    results = run(
        [
            cand(mem("both"), vector=(0.5, 2), keyword=(2.0, 2)),
            cand(mem("kw"), keyword=(4.0, 1)),
            cand(mem("vec"), vector=(0.9, 1)),
        ],
        weights=only(vector=1.0, keyword=1.0),
    )
    # both: .5 + 2/4 = 1.0 ; kw: 0 + 1 = 1.0 ; vec: .9 + 0 = .9
    expect(results, [("both", 1.0), ("kw", 1.0), ("vec", 0.9)])


def test_no_candidates_gives_no_results() -> None:
    assert run([]) == []


# --- rrf vs weighted -------------------------------------------------------------


def _three() -> list[Candidate]:
    return [
        cand(mem("x"), vector=(0.9, 1), keyword=(2.0, 3)),
        cand(mem("y"), keyword=(10.0, 1)),
        cand(mem("z"), vector=(0.5, 2), keyword=(4.0, 2), metadata=(9.0, 1)),
    ]


def test_weighted_and_rrf_order_the_same_candidates_differently() -> None:
    weighted = run(_three(), weights=only(vector=0.35, keyword=0.35))
    # x: .35*.9 + .35*.2 = .385 ; y: .35*1 = .35 ; z: .35*.5 + .35*.4 = .315
    expect(weighted, [("x", 0.385), ("y", 0.35), ("z", 0.315)])
    rrf = run(_three(), fusion=Fusion.RRF)
    # x: 1/61 + 1/63 ; z: 1/62 + 1/62 (the unknown "metadata" stream adds nothing) ; y: 1/61
    expect(rrf, [("x", 1 / 61 + 1 / 63), ("z", 2 / 62), ("y", 1 / 61)])
    # RRF still reports the components, computed the same way.
    assert rrf[0].components["keyword"] == pytest.approx(0.2, abs=EXACT)


def test_rrf_per_stream_weights_and_k() -> None:
    no_keyword = run(_three(), fusion=Fusion.RRF, weights=Weights(rrf_keyword=0.0))
    expect(no_keyword, [("x", 1 / 61), ("z", 1 / 62), ("y", 0.0)])
    k_zero = run(_three(), fusion=Fusion.RRF, rrf_k=0.0, weights=Weights(rrf_vector=2.0))
    # x: 2/1 + 1/3 ; z: 2/2 + 1/2 ; y: 1/1
    expect(k_zero, [("x", 7 / 3), ("z", 1.5), ("y", 1.0)])


def test_rrf_ignores_component_weights() -> None:
    a = run(_three(), fusion=Fusion.RRF)
    b = run(_three(), fusion=Fusion.RRF, weights=only(importance=5.0, recency=3.0))
    assert [(r.memory.id, r.score) for r in a] == [(r.memory.id, r.score) for r in b]


# --- ordering ----------------------------------------------------------------------


def test_ties_break_by_newer_timestamp_then_id() -> None:
    cands = [
        cand(mem("b", age_days=1), keyword=(1.0, 1)),
        cand(mem("a", age_days=1), keyword=(1.0, 1)),
        cand(mem("c", age_days=2), keyword=(1.0, 1)),
        cand(mem("d", age_days=0), keyword=(1.0, 1)),
    ]
    # Recency weight 0 makes the scores exactly equal; only the tie-breaks decide.
    w = Weights(recency=0.0)
    forward = run(cands, weights=w)
    backward = run(list(reversed(cands)), weights=w)
    assert len({r.score for r in forward}) == 1
    assert ids(forward) == ids(backward) == ["d", "a", "b", "c"]


def test_limit_keeps_the_best() -> None:
    cands = [cand(mem(f"m{i}"), vector=(i / 10, 10 - i)) for i in range(10)]
    assert ids(run(cands, limit=3, weights=only(vector=1.0))) == ["m9", "m8", "m7"]


# --- standard-score normalisation (the default) ------------------------------------------


def test_default_normalisation_is_zscore() -> None:
    assert Params().normalisation is Normalisation.ZSCORE


def test_zscore_weighs_a_bunched_stream_like_a_spread_one() -> None:
    # Cosines bunch (0.40-0.50), BM25 spreads (2-20). Raw, BM25's best wins on its ratio
    # alone; as standard scores each stream's best is worth the same.
    cands = [
        cand(mem("v"), vector=(0.50, 1), keyword=(2.0, 3)),
        cand(mem("k"), vector=(0.40, 3), keyword=(20.0, 1)),
        cand(mem("m"), vector=(0.45, 2), keyword=(11.0, 2)),
    ]
    raw = run(cands, weights=only(vector=1.0, keyword=1.0))
    # v: .5 + .1 = .6 ; k: .4 + 1 = 1.4 ; m: .45 + .55 = 1.0
    expect(raw, [("k", 1.4), ("m", 1.0), ("v", 0.6)])
    z = run(cands, weights=only(vector=1.0, keyword=1.0), normalisation=Normalisation.ZSCORE)
    # Both streams are evenly spaced: z = +-sqrt(3/2) at the ends, 0 in the middle.
    end = (3 / 2) ** 0.5 / 6
    assert {r.memory.id: r.components["vector"] for r in z} == pytest.approx(
        {"v": 0.5 + end, "m": 0.5, "k": 0.5 - end}, abs=EXACT
    )
    assert [r.score for r in z] == pytest.approx([1.0, 1.0, 1.0], abs=EXACT)


def test_zscore_gives_a_candidate_missing_a_stream_that_streams_floor() -> None:
    cands = [
        cand(mem("a"), keyword=(9.0, 1)),
        cand(mem("b"), keyword=(3.0, 2)),
        cand(mem("c"), vector=(0.8, 1)),
    ]
    results = run(cands, weights=only(keyword=1.0), normalisation=Normalisation.ZSCORE)
    comps = {r.memory.id: r.components["keyword"] for r in results}
    # mean 6, std 3: a = .5 + 1/6, b = .5 - 1/6; c was not returned: b's value, not 0.
    assert comps == pytest.approx({"a": 0.5 + 1 / 6, "b": 0.5 - 1 / 6, "c": 0.5 - 1 / 6})
    # A stream with one candidate (no spread): that candidate is its best.
    one = run([cand(mem("x"), vector=(0.3, 1))], normalisation=Normalisation.ZSCORE)
    assert one[0].components["vector"] == 1.0


def test_zscore_gives_nothing_to_a_miss_when_the_stream_has_no_spread() -> None:
    # BM25 matched one memory of a small tenant: the vector-only candidate has no keyword
    # match and must not share the hit's 1 (the stream's lowest value is its best here).
    cands = [
        cand(mem("hit"), keyword=(2.7, 1), vector=(0.7, 1)),
        cand(mem("miss"), vector=(0.4, 2)),
    ]
    results = run(cands, weights=only(keyword=1.0), normalisation=Normalisation.ZSCORE)
    assert {r.memory.id: r.components["keyword"] for r in results} == {"hit": 1.0, "miss": 0.0}
    # Several hits with equal scores: each is the best, a miss still gets nothing.
    tied = [cand(mem(i), keyword=(1.5, n)) for n, i in enumerate("ab", start=1)]
    tied.append(cand(mem("c"), vector=(0.9, 1)))
    ranked = run(tied, weights=only(keyword=1.0), normalisation=Normalisation.ZSCORE)
    assert {r.memory.id: r.components["keyword"] for r in ranked} == {"a": 1.0, "b": 1.0, "c": 0.0}


def test_zscore_keeps_an_outstanding_match_ahead_of_the_merely_good() -> None:
    def keyword_components(scores: list[float]) -> list[float]:
        cands = [cand(mem(f"m{i}"), keyword=(s, i + 1)) for i, s in enumerate(scores)]
        ranked = run(
            cands, weights=only(keyword=1.0), normalisation=Normalisation.ZSCORE, limit=len(cands)
        )
        return [r.components["keyword"] for r in ranked]

    # One BM25 hit at 10 among hits at 1. Among 10 candidates its z is 3: 0.5 + 3/6 = 1.
    assert keyword_components([10.0] + [1.0] * 9)[0] == pytest.approx(1.0, abs=EXACT)
    # Among 16 its z is sqrt(15), further out, and it counts for more rather than being
    # cut back to 1 — a rare-term hit must not tie with every merely good one.
    assert keyword_components([10.0] + [1.0] * 15)[0] == pytest.approx(0.5 + 15**0.5 / 6, abs=EXACT)
    # The floor stays: far below the mean is 0, never negative.
    assert keyword_components([100.0] * 15 + [0.0])[-1] == 0.0


# --- dates named in the query ------------------------------------------------------------


def _day(y: int, m: int, d: int) -> tuple[datetime, datetime]:
    start = datetime(y, m, d, tzinfo=UTC)
    return start, start + timedelta(days=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did she eat on 8 May, 2023?", (_day(2023, 5, 8),)),
        ("on October 13, 2023", (_day(2023, 10, 13),)),
        ("the 3rd of June 2022", (_day(2022, 6, 3),)),
        ("2024-02-29 standup", (_day(2024, 2, 29),)),
        (
            "in March 2023",
            ((datetime(2023, 3, 1, tzinfo=UTC), datetime(2023, 4, 1, tzinfo=UTC)),),
        ),
        (
            "Dec 2023",
            ((datetime(2023, 12, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)),),
        ),
        ("during 2024", ((datetime(2024, 1, 1, tzinfo=UTC), datetime(2025, 1, 1, tzinfo=UTC)),)),
        ("no date here, 42 items", ()),
        (  # not a day: the month it names is still a period
            "31 February, 2023",
            ((datetime(2023, 2, 1, tzinfo=UTC), datetime(2023, 3, 1, tzinfo=UTC)),),
        ),
        # The calendar's last day has no next one to end its period: no period, no error.
        ("on 9999-12-31 or December 31, 9999?", ()),
    ],
)
def test_mentioned_periods(text: str, expected: tuple[tuple[datetime, datetime], ...]) -> None:
    assert mentioned_periods(text) == expected


def test_time_component_is_one_inside_the_named_day_and_halves_per_half_life() -> None:
    day = datetime(2023, 5, 8, 15, tzinfo=UTC)
    cands = [
        cand(replace(mem("in"), timestamp=day)),
        cand(replace(mem("later"), timestamp=datetime(2023, 5, 12, tzinfo=UTC))),
        cand(replace(mem("far"), timestamp=datetime(2022, 1, 1, tzinfo=UTC))),
    ]
    results = run(cands, text="what happened on 8 May, 2023?", weights=only(time=1.0))
    comps = {r.memory.id: r.components["time"] for r in results}
    # "later" is 3 days after the day's end: one half-life (3 days by default).
    assert comps["in"] == 1.0
    assert comps["later"] == pytest.approx(0.5, abs=EXACT)
    assert comps["far"] < 1e-30
    assert ids(results) == ["in", "later", "far"]
    assert run(cands, text="no date", weights=only(time=1.0))[0].components["time"] == 0.0


# --- context: borrowing from timeline neighbours --------------------------------------


def _turns() -> list[Candidate]:
    """q matches the question turn; a is the answer right after it; o is an unrelated
    turn that matches a little better than a."""
    return [
        replace(cand(mem("q"), keyword=(10.0, 1)), neighbours={"a": 1}),
        replace(cand(mem("a"), keyword=(2.0, 3)), neighbours={"q": 1}),
        cand(mem("o"), keyword=(3.0, 2)),
    ]


def test_context_lifts_the_neighbour_of_a_strong_candidate() -> None:
    off = run(_turns(), weights=only(keyword=1.0))
    assert ids(off) == ["q", "o", "a"]
    on = run(_turns(), weights=only(keyword=1.0, context=0.2))
    # scores q 1, o .3, a .2: lowest .2, best lead .8. a borrows q's whole lead:
    # .2 + .2 * .8 = .36 ; q's neighbour a has no lead: q stays 1.
    expect(on, [("q", 1.0), ("a", 0.36), ("o", 0.3)])
    comps = {r.memory.id: r.components[CONTEXT] for r in on}
    assert comps == pytest.approx({"q": 0.0, "a": 1.0, "o": 0.0}, abs=EXACT)


def test_context_decays_with_timeline_distance() -> None:
    far = [
        replace(cand(mem("q"), keyword=(10.0, 1)), neighbours={"a": 2}),
        replace(cand(mem("a"), keyword=(2.0, 3)), neighbours={"q": 2}),
        cand(mem("o"), keyword=(3.0, 2)),
    ]
    on = run(far, weights=only(keyword=1.0, context=0.2), context_decay=0.5)
    # two steps away, q's lead counts half: a = .2 + .2 * .8 * .5 = .28, below o
    by = {r.memory.id: r for r in on}
    assert by["a"].components[CONTEXT] == pytest.approx(0.5, abs=EXACT)
    assert by["a"].score == pytest.approx(0.28, abs=EXACT)
    assert ids(on) == ["q", "o", "a"]


def test_context_ignores_neighbours_that_are_not_candidates() -> None:
    lonely = [
        replace(cand(mem("a"), keyword=(2.0, 1)), neighbours={"gone": 1}),
        cand(mem("b"), keyword=(1.0, 2)),
    ]
    results = run(lonely, weights=only(keyword=1.0, context=0.5))
    assert [(r.score, r.components[CONTEXT]) for r in results] == [(1.0, 0.0), (0.5, 0.0)]


def test_context_bonus_scales_with_rrf_scores_too() -> None:
    on = run(_turns(), fusion=Fusion.RRF, weights=only(context=0.8))
    by = {r.memory.id: r for r in on}
    # RRF: q 1/61, o 1/62, a 1/63. a borrows .8 of q's lead over the lowest (a itself)
    # and overtakes o, which RRF alone ranks above it.
    assert by["a"].score == pytest.approx(1 / 63 + 0.8 * (1 / 61 - 1 / 63), abs=EXACT)
    assert ids(on) == ["q", "a", "o"]


def test_bad_context_decay_and_time_half_life_are_refused() -> None:
    with pytest.raises(InvalidArgument) as err:
        Params(context_decay=1.5)
    assert err.value.field == "context_decay"
    with pytest.raises(InvalidArgument) as err:
        Params(time_half_life_days=0)
    assert err.value.field == "time_half_life_days"


# --- label: the query names a client tag ---------------------------------------------------


def test_label_matches_the_last_part_of_a_client_tag_not_an_entity_tag() -> None:
    cands = [
        cand(mem("about", tags=("speaker:caroline",))),
        cand(mem("mentions", tags=("entity:people:caroline", "speaker:melanie"))),
        cand(mem("two-words", tags=("project:engram-core",))),
        cand(mem("none")),
    ]
    results = run(cands, text="What did Caroline say about engram?", weights=only(label=1.0))
    comps = {r.memory.id: r.components["label"] for r in results}
    # engram-core needs both of its words in the query; an entity tag never counts.
    assert comps == {"about": 1.0, "mentions": 0.0, "two-words": 0.0, "none": 0.0}
    both = run(cands, text="engram core status", weights=only(label=1.0))
    assert {r.memory.id: r.components["label"] for r in both}["two-words"] == 1.0


# --- the request's focus ------------------------------------------------------------------


def focus_run(cands: list[Candidate], focus: Focus, **weights: float) -> list[ScoredCandidate]:
    return rank(
        cands,
        Query(now=NOW, focus=focus),
        Params(
            weights=only(keyword=1.0, **weights), limit=len(cands), normalisation=Normalisation.RAW
        ),
    )


def test_focus_bonuses_are_flat_and_add_up() -> None:
    py = mem("py", tags=("lang:python", "project:engram:ci"), metadata={"stack": "Python 3.11"})
    py = replace(py, type="Decision")
    other = mem("other", tags=("lang:go",))
    cands = [cand(other, keyword=(10.0, 1)), cand(py, keyword=(5.0, 2))]
    focus = Focus(tags=("Project/Engram",), types=("decision",), keywords=("python",), ids=("py",))
    by_id = {
        r.memory.id: r
        for r in focus_run(
            cands, focus, focus_tag=0.45, focus_type=0.25, focus_keyword=0.2, focus_id=0.9
        )
    }
    # py: keyword 5/10 = .5, + .45 (project/engram is a prefix of project:engram:ci, "/"
    # read as ":") + .25 (type, any case) + .2 ("python" is a word of a metadata value)
    # + .9 (a priority id) = 2.3; other: keyword 1, no focus.
    assert by_id["py"].score == pytest.approx(2.3, abs=EXACT)
    assert by_id["other"].score == pytest.approx(1.0, abs=EXACT)
    assert [by_id["py"].components[f"focus_{p}"] for p in ("tag", "type", "keyword", "id")] == [
        1.0,
        1.0,
        1.0,
        1.0,
    ]
    assert all(
        by_id["other"].components[f"focus_{p}"] == 0.0 for p in ("tag", "type", "keyword", "id")
    )


def test_focus_keyword_matches_a_tag_part_or_a_metadata_word_not_a_substring() -> None:
    tagged = mem("tagged", tags=("lang:python",))
    meta = mem("meta", metadata={"notes": ["uses python daily"]})
    near = mem("near", tags=("pythonic",), metadata={"k": "cpython"})
    got = focus_run(
        [cand(m, keyword=(1.0, i + 1)) for i, m in enumerate((tagged, meta, near))],
        Focus(keywords=("Python",)),
        focus_keyword=0.2,
    )
    assert {r.memory.id: r.components["focus_keyword"] for r in got} == {
        "tagged": 1.0,
        "meta": 1.0,
        "near": 0.0,
    }


def test_a_pinned_focus_puts_matching_results_first_in_score_order() -> None:
    strong = mem("strong")
    pinned_a = mem("pinned_a", tags=("runbook",))
    pinned_b = mem("pinned_b")
    cands = [
        cand(strong, keyword=(10.0, 1)),
        cand(pinned_a, keyword=(2.0, 3)),
        cand(pinned_b, keyword=(3.0, 2)),
    ]
    focus = Focus(tags=("runbook",), ids=("pinned_b",))
    # Bonuses 0: only the pin moves them. Unpinned, the keyword order stands.
    assert ids(focus_run(cands, focus)) == ["strong", "pinned_b", "pinned_a"]
    pinned = replace(focus, pinned=True)
    assert ids(focus_run(cands, pinned)) == ["pinned_b", "pinned_a", "strong"]
    # An empty focus pins nothing.
    assert not Focus(pinned=True)
    assert ids(focus_run(cands, Focus(pinned=True))) == ["strong", "pinned_b", "pinned_a"]


# --- the relevance gate -------------------------------------------------------------------


def test_relevance_gate_scales_query_independent_components_by_weak_evidence() -> None:
    # "on": keyword 8/8 = 1; "off": keyword 2/8 = .25, but new and important.
    on = mem("on", age_days=180, importance=0.0, confidence=0.0)
    off = mem("off", age_days=0, importance=1.0, confidence=1.0, relevance=1.0)
    cands = [cand(on, keyword=(8.0, 1)), cand(off, keyword=(2.0, 2))]
    weights = only(keyword=1.0, recency=1.0, importance=1.0, confidence=1.0, relevance=1.0)

    def scores(gate: float) -> dict[str, float]:
        got = rank(
            cands,
            Query(now=NOW),
            Params(weights=weights, relevance_gate=gate, normalisation=Normalisation.RAW),
        )
        return {r.memory.id: r.score for r in got}

    # Off (0): off = .25 + 4 × 1 = 4.25. Gate .5: evidence .25 < .5, the four scaled by
    # .25/.5: .25 + 4 × .5 = 2.25. "on" (evidence 1, recency 0 at 180 days) keeps its 1.
    assert scores(0.0) == pytest.approx({"on": 1.0, "off": 4.25}, abs=EXACT)
    assert scores(0.5) == pytest.approx({"on": 1.0, "off": 2.25}, abs=EXACT)
    # Evidence at the gate: untouched.
    assert scores(0.25) == pytest.approx({"on": 1.0, "off": 4.25}, abs=EXACT)
    # A tag the recall is scoped to is no evidence: every candidate carries it.
    tagged = [
        replace(c, memory=replace(c.memory, tags=("proj",), tag_prefixes=("proj",))) for c in cands
    ]
    scoped = rank(
        tagged,
        Query(now=NOW, tags=("proj",)),
        Params(weights=weights, relevance_gate=0.5, normalisation=Normalisation.RAW),
    )
    assert {r.memory.id: r.score for r in scoped} == pytest.approx(
        {"on": 1.0, "off": 2.25}, abs=EXACT
    )
    with pytest.raises(InvalidArgument) as err:
        Params(relevance_gate=1.5)
    assert err.value.field == "relevance_gate"


# --- recency bias -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "latest"),
    [
        ("What is Sarah's latest job?", True),
        ("where does she live now", True),
        ("What is the most recent release?", True),
        ("Which editor does he use currently", True),
        ("What did Sarah research?", False),
        ("What happened last week?", False),
        ("Is the snowboard new?", False),
    ],
)
def test_asks_for_latest(text: str, latest: bool) -> None:
    assert asks_for_latest(text) is latest


def test_recency_bias_adds_the_min_max_normalised_timestamp() -> None:
    old, mid, new = mem("old", age_days=100), mem("mid", age_days=25), mem("new", age_days=0)
    cands = [cand(old, keyword=(4.0, 1)), cand(mid, keyword=(3.0, 2)), cand(new, keyword=(2.0, 3))]
    weights = only(keyword=1.0, recency_bias=1.0)

    def scores(text: str, bias: RecencyBias | None, default: RecencyBias) -> dict[str, float]:
        got = rank(
            cands,
            Query(now=NOW, text=text, recency_bias=bias),
            Params(weights=weights, recency_bias=default, normalisation=Normalisation.RAW),
        )
        return {r.memory.id: r.score for r in got}

    plain = {"old": 1.0, "mid": 0.75, "new": 0.5}  # keyword / 4
    # + (t - oldest) / span × the match as a share of the best (keyword / 1.0)
    biased = {"old": 1.0, "mid": 0.75 + 0.75 * 0.75, "new": 0.5 + 1.0 * 0.5}
    assert scores("status", None, RecencyBias.OFF) == pytest.approx(plain, abs=EXACT)
    assert scores("status", None, RecencyBias.ON) == pytest.approx(biased, abs=EXACT)
    # auto: on only when the query asks for the latest.
    assert scores("status", None, RecencyBias.AUTO) == pytest.approx(plain, abs=EXACT)
    assert scores("latest status", None, RecencyBias.AUTO) == pytest.approx(biased, abs=EXACT)
    # …and names no date: then "recent" is relative to that date, the time component's job.
    assert scores("latest status on 3 May 2024", None, RecencyBias.AUTO) == pytest.approx(
        plain, abs=EXACT
    )
    # The request's choice overrides the default.
    assert scores("latest status", RecencyBias.OFF, RecencyBias.ON) == pytest.approx(plain)
    assert scores("status", RecencyBias.ON, RecencyBias.OFF) == pytest.approx(biased)


def test_context_lends_a_neighbours_match_not_its_recency() -> None:
    # "fresh" matches nothing but is new and important; "match" is old and matches. Each
    # has a neighbour that matches nothing ("n1" beside fresh, "n2" beside match).
    fresh = mem("fresh", age_days=0, importance=1.0)
    match = mem("match", age_days=400, importance=0.0)
    n1, n2 = mem("n1", age_days=0, importance=0.0), mem("n2", age_days=400, importance=0.0)
    cands = [
        replace(cand(fresh), neighbours={"n1": 1}),
        replace(cand(n1), neighbours={"fresh": 1}),
        replace(cand(match, keyword=(5.0, 1)), neighbours={"n2": 1}),
        replace(cand(n2), neighbours={"match": 1}),
    ]
    weights = only(keyword=1.0, recency=1.0, importance=1.0, context=0.5)
    got = {
        r.memory.id: r
        for r in rank(
            cands, Query(now=NOW), Params(weights=weights, limit=4, normalisation=Normalisation.RAW)
        )
    }
    # n2 borrows from match's keyword lead; n1 gets nothing from fresh's recency/importance.
    assert got["n1"].components["context"] == 0.0
    assert got["n2"].components["context"] == pytest.approx(1.0, abs=EXACT)
    # keyword span 1 (match 1, the rest 0): n2 gains 0.5 × 1.
    assert got["n2"].score == pytest.approx(0.5, abs=EXACT)


def test_recency_bias_goes_to_the_newest_of_the_matching_not_the_newest() -> None:
    # "fresh" matches nothing; of the two that match, "recent" is the newer.
    fresh = mem("fresh", age_days=0)
    recent, older = mem("recent", age_days=10), mem("older", age_days=100)
    cands = [cand(fresh), cand(recent, keyword=(4.0, 1)), cand(older, keyword=(4.0, 2))]
    got = rank(
        cands,
        Query(now=NOW, text="the latest", recency_bias=RecencyBias.ON),
        Params(weights=only(keyword=1.0, recency_bias=1.0), normalisation=Normalisation.RAW),
    )
    by_id = {r.memory.id: r.components["recency_bias"] for r in got}
    # The span is that of the comparable matches (recent, older): fresh, the newest but
    # matching nothing, neither sets it nor gains.
    assert by_id["fresh"] == 0.0
    assert by_id["recent"] == 1.0
    assert by_id["older"] == 0.0
    assert [r.memory.id for r in got] == ["recent", "older", "fresh"]


# --- the fields ranking reads ------------------------------------------------------------

# Values for every field outside SCORED_FIELDS, far from the defaults.
_UNSCORED: dict[str, Any] = {
    "tenant": "other-tenant",
    "updated_at": NOW - timedelta(days=100),
    "last_accessed": NOW - timedelta(days=50),
    "access_count": 42,
    "t_valid": NOW - timedelta(days=400),
    "t_invalid": NOW - timedelta(days=1),
    "archived": True,
    "embedding_model": "another-model",
    "version": 9,
    "entities": ("person:sarah",),
}


def test_every_memory_field_is_either_scored_or_listed_here() -> None:
    assert {f.name for f in fields(Memory)} == SCORED_FIELDS | _UNSCORED.keys()
    assert not SCORED_FIELDS & _UNSCORED.keys()


@pytest.mark.parametrize("fusion", [Fusion.WEIGHTED, Fusion.RRF])
def test_fields_outside_scored_fields_change_no_score(fusion: Fusion) -> None:
    """The gateway sends the scoring service SCORED_FIELDS only: ranking must not read more."""
    memories = [
        mem("a", "Sarah picked Postgres for atlas", age_days=3, tags=("project:atlas",)),
        mem("b", "postgres migration plan", age_days=40, importance=0.9, relevance=0.6),
        mem("c", "lunch order", age_days=1, metadata={"owner": "sarah"}, confidence=0.2),
    ]
    streams = [
        {"vector": (0.8, 1), "keyword": (2.0, 2)},
        {"keyword": (3.0, 1)},
        {"vector": (0.3, 2)},
    ]

    def ranked(ms: list[Memory]) -> list[tuple[str, float]]:
        candidates = [cand(m, 0.2, **s) for m, s in zip(ms, streams, strict=True)]
        out = run(candidates, "which database did sarah pick?", ("project",), fusion=fusion)
        return [(r.memory.id, r.score) for r in out]

    plain = ranked(memories)
    assert ranked([replace(m, **_UNSCORED) for m in memories]) == plain
