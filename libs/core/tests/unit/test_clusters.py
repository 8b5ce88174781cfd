"""Clusters: grouping from neighbour pairs, stable MetaPattern ids, extractive summaries."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from engram_core.clusters import (
    Cluster,
    ClusterSettings,
    KeyedCluster,
    Pair,
    assign_keys,
    find_clusters,
    meta_pattern,
    meta_pattern_id,
    summarise,
    summary_unchanged,
)
from engram_core.ids import normalise_id
from engram_core.model import Memory

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def members(clusters: list[Cluster]) -> list[tuple[str, ...]]:
    return [c.members for c in clusters]


def clique(ids: Sequence[str], cosine: float) -> list[Pair]:
    return [Pair(a, b, cosine) for i, a in enumerate(ids) for b in ids[i + 1 :]]


# --- grouping ------------------------------------------------------------------------------

# The threshold of all-MiniLM-L6-v2; the default (bge-small's 0.92) is checked on its own below.
S = ClusterSettings(min_cosine=0.85)


def test_the_default_threshold_is_bge_smalls() -> None:
    pairs = [*clique("abc", 0.92), *clique("def", 0.9199)]
    assert members(find_clusters(pairs)) == [("a", "b", "c")]


def test_groups_pairs_above_the_threshold() -> None:
    pairs = [
        *clique("abc", 0.9),
        Pair("d", "e", 0.95),  # too small a group
        Pair("c", "x", 0.84),  # below the threshold: x stays out
        Pair("f", "g", 0.86),
        Pair("g", "h", 0.85),  # at the threshold: in
        Pair("a", "a", 1.0),
        Pair("a", "z", float("nan")),
    ]
    assert members(find_clusters(pairs, S)) == [("a", "b", "c"), ("f", "g", "h")]


def test_min_size_is_a_setting() -> None:
    pairs = [*clique("abc", 0.9), Pair("d", "e", 0.95)]
    got = find_clusters(pairs, replace(S, min_size=2))
    assert members(got) == [("a", "b", "c"), ("d", "e")]


def test_deterministic_whatever_the_input_order() -> None:
    pairs = [*clique("abcd", 0.9), *clique("pqr", 0.88), Pair("d", "p", 0.5), Pair("x", "y", 0.9)]
    expected = find_clusters(pairs, S)
    assert len(expected) == 2
    rng = random.Random(5)
    for _ in range(20):
        shuffled = [Pair(p.b, p.a, p.cosine) if rng.random() < 0.5 else p for p in pairs]
        rng.shuffle(shuffled)
        assert find_clusters(shuffled, S) == expected


def test_member_strength_is_its_best_cosine_inside() -> None:
    (c,) = find_clusters([Pair("a", "b", 0.9), Pair("b", "c", 0.95), Pair("c", "q", 0.2)], S)
    assert c.members == ("a", "b", "c")
    assert dict(c.strength) == {"a": 0.9, "b": 0.95, "c": 0.95}
    assert c.threshold == 0.85


def test_oversized_chains_are_split_at_a_higher_threshold() -> None:
    # Two tight triples joined by one weak bridge: single linkage makes one chain of 6.
    pairs = [*clique("abc", 0.95), Pair("c", "d", 0.86), *clique("def", 0.95)]
    assert members(find_clusters(pairs, S)) == [("a", "b", "c", "d", "e", "f")]
    got = find_clusters(pairs, replace(S, max_size=4, split_step=0.02))
    assert members(got) == [("a", "b", "c"), ("d", "e", "f")]
    assert all(c.threshold == pytest.approx(0.87) for c in got)


def test_splitting_ends_even_when_nothing_separates() -> None:
    assert find_clusters(clique("abcdef", 1.0), ClusterSettings(max_size=4)) == []


def test_many_separate_groups() -> None:
    pairs = [p for i in range(2000) for p in clique([f"{i:05d}{x}" for x in "abc"], 0.9)]
    got = find_clusters(pairs, S)
    assert len(got) == 2000
    assert got[0].members == ("00000a", "00000b", "00000c")


# --- stable keys -------------------------------------------------------------------------------


def cl(ids: str) -> Cluster:
    return Cluster(tuple(ids), dict.fromkeys(ids, 0.9), 0.85)


def test_a_new_cluster_takes_an_id_derived_from_its_smallest_member() -> None:
    a = assign_keys("t", [cl("bcd")], {})
    (k,) = a.clusters
    assert k.meta_id == meta_pattern_id("t", "b")
    assert normalise_id(k.meta_id) == k.meta_id  # a valid memory id
    assert (k.inherited, k.changed) == (False, True)
    assert a.retired == ()


def test_derived_ids_differ_per_tenant_and_are_stable() -> None:
    assert meta_pattern_id("t", "b") == meta_pattern_id("t", "b")
    assert meta_pattern_id("t", "b") != meta_pattern_id("u", "b")


def test_rerun_with_the_same_members_reuses_the_id_unchanged() -> None:
    first = assign_keys("t", [cl("bcd")], {}).clusters[0]
    again = assign_keys("t", [cl("bcd")], {first.meta_id: ["b", "c", "d"]})
    (k,) = again.clusters
    assert k.meta_id == first.meta_id
    assert (k.inherited, k.changed) == (True, False)
    assert again.retired == ()


def test_a_cluster_that_lost_its_seed_keeps_its_metapattern() -> None:
    previous = {"meta-1": ["b", "c", "d", "e"]}
    (k,) = assign_keys("t", [cl("cdef")], previous).clusters  # b gone, f new: J = 3/5
    assert k.meta_id == "meta-1"
    assert (k.inherited, k.changed) == (True, True)


def test_little_overlap_makes_a_new_one_and_retires_the_old() -> None:
    previous = {"meta-1": ["b", "c", "d", "e"]}
    a = assign_keys("t", [cl("bxyz")], previous)  # J = 1/7
    assert a.clusters[0].meta_id == meta_pattern_id("t", "b")
    assert a.retired == ("meta-1",)


def test_each_previous_id_goes_to_one_cluster_the_best_overlap() -> None:
    previous = {"meta-1": ["a", "b", "c", "d", "e", "f"]}
    # The old cluster split in two: {a,b,c,d} (J 4/6) inherits, {e,f,g} (J 2/7) is new.
    a = assign_keys("t", [cl("abcd"), cl("efg")], previous, ClusterSettings(min_jaccard=0.2))
    ids = {k.cluster.members: k.meta_id for k in a.clusters}
    assert ids[("a", "b", "c", "d")] == "meta-1"
    assert ids[("e", "f", "g")] == meta_pattern_id("t", "e")
    assert a.retired == ()


def test_a_derived_id_already_taken_moves_to_the_next_member() -> None:
    held = meta_pattern_id("t", "b")
    previous = {held: ["b", "c", "d", "e"]}
    # {c,d,e,f} inherits it (J 3/5); {b,x,y} (J 1/6) would derive the same id from b.
    a = assign_keys("t", [cl("bxy"), cl("cdef")], previous)
    ids = {k.cluster.members: k.meta_id for k in a.clusters}
    assert ids[("c", "d", "e", "f")] == held
    assert ids[("b", "x", "y")] == meta_pattern_id("t", "x")


def test_an_unmatched_previous_with_the_derived_id_is_updated_not_retired() -> None:
    derived = meta_pattern_id("t", "b")
    previous = {derived: ["b", "p", "q", "r", "s"]}  # J with {b,c,d} = 1/7: below 0.5
    a = assign_keys("t", [cl("bcd")], previous)
    (k,) = a.clusters
    assert k.meta_id == derived
    assert (k.inherited, k.changed) == (True, True)
    assert a.retired == ()


# --- summaries ------------------------------------------------------------------------------


def mem(id: str, content: str, **kw: object) -> Memory:
    return Memory(id=id, tenant="t", content=content, **kw)  # type: ignore[arg-type]


COFFEE = [
    mem("01", "Sarah drinks espresso every morning. She hates decaf.", tags=("person:sarah",)),
    mem("02", "Every morning Sarah orders an espresso at the corner cafe.", tags=("person:sarah",)),
    mem("03", "Sarah said espresso keeps her focused in the morning.", tags=("topic:coffee",)),
    mem("04", "The quarterly report is due on Friday."),
]


def test_keywords_are_what_most_members_share() -> None:
    s = summarise(COFFEE)
    assert s.keywords[:3] == ("espresso", "morning", "sarah")
    assert "the" not in s.keywords
    assert "report" not in s.keywords  # said by one member only


def test_summary_text_quotes_the_most_shared_sentences() -> None:
    s = summarise(COFFEE, ClusterSettings(summary_sentences=2))
    lines = s.text.splitlines()
    assert lines[0] == f"Theme of 4 memories: {', '.join(s.keywords)}."
    assert len(lines) == 3
    assert all(line.startswith("- ") for line in lines[1:])
    quoted = " ".join(lines[1:])
    assert "espresso" in quoted
    assert "quarterly" not in quoted
    assert "decaf" not in quoted


def test_near_duplicate_sentences_are_quoted_once() -> None:
    dup = [mem(f"0{i}", "Deploys happen on Tuesday afternoons.") for i in range(3)]
    dup.append(mem("09", "DEPLOYS happen on tuesday afternoons!"))
    s = summarise(dup)
    assert s.text.count("- ") == 1


def test_summary_does_not_depend_on_member_order() -> None:
    assert summarise(COFFEE) == summarise(COFFEE[::-1])


def test_tags_shared_by_enough_members_are_kept() -> None:
    assert summarise(COFFEE).tags == ("person:sarah",)  # 2 of 4 = 0.5
    assert summarise(COFFEE, ClusterSettings(tag_min_share=0.75)).tags == ()


def test_summary_length_is_capped() -> None:
    sentence = " ".join(["alpha beta gamma delta"] * 40) + "."
    long = [mem(f"{i:02d}", sentence) for i in range(5)]
    s = summarise(long, ClusterSettings(summary_max_chars=120))
    assert len(s.text) <= 120
    assert s.text.endswith("…")


def test_summary_of_text_without_words() -> None:
    s = summarise([mem("01", "..."), mem("02", "42 17")])
    assert s.text == "Theme of 2 memories."
    assert s.keywords == ()


def test_meta_pattern_memory_and_its_edges() -> None:
    ms = [
        mem("01", "a", importance=0.3, confidence=0.6, timestamp=NOW - 5 * DAY),
        mem("02", "b", importance=0.8, confidence=1.0, timestamp=NOW - 2 * DAY),
        mem("03", "c", importance=0.5, confidence=0.8, timestamp=NOW - 9 * DAY),
    ]
    cluster = Cluster(("01", "02", "03"), {"01": 0.9, "02": 0.95, "03": 0.95}, 0.87)
    keyed = KeyedCluster(meta_pattern_id("t", "01"), cluster, inherited=False, changed=True)
    summary = summarise(ms)
    memory, edges = meta_pattern("t", keyed, ms, summary, NOW)
    assert memory.id == keyed.meta_id
    assert memory.type == "MetaPattern"
    assert memory.content == summary.text
    assert memory.importance == 0.8
    assert memory.confidence == pytest.approx(0.8)
    assert memory.timestamp == NOW - 2 * DAY  # the newest member's
    assert memory.updated_at == NOW
    assert memory.metadata["cluster"]["size"] == 3
    assert [(e.source_id, e.target_id, e.type, e.strength, e.origin) for e in edges] == [
        (keyed.meta_id, "01", "SUMMARIZES", 0.9, "system"),
        (keyed.meta_id, "02", "SUMMARIZES", 0.95, "system"),
        (keyed.meta_id, "03", "SUMMARIZES", 0.95, "system"),
    ]


def test_summary_unchanged() -> None:
    stored = mem("m", "Theme of 3 memories: a, b.\n- one")
    assert summary_unchanged(stored, "Theme of 3 memories:  a, b.\n- one")
    assert not summary_unchanged(stored, "Theme of 4 memories: a, b.\n- one")
    assert not summary_unchanged(None, "anything")


@pytest.mark.parametrize(
    "bad",
    [
        {"min_cosine": 1.2},
        {"min_size": 1},
        {"min_size": 10, "max_size": 5},
        {"split_step": 0.0},
        {"min_jaccard": -0.1},
        {"summary_max_chars": 10},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"."):
        ClusterSettings(**bad)  # type: ignore[arg-type]
