"""Associations: SIMILAR_TO and PRECEDED_BY proposals, and reconciling them with the graph."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram_core.associations import (
    ORIGIN_SYSTEM,
    AssociationSettings,
    Change,
    Neighbour,
    SequenceKey,
    edge_key,
    preceded_by,
    reconcile,
    similar_to,
)
from engram_core.model import Memory, Relation

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
T0 = datetime(2026, 5, 1, 9, tzinfo=UTC)
MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)
EARLIER = datetime(2026, 1, 1, tzinfo=UTC)


def mem(id: str, at: datetime, tags: tuple[str, ...] = (), **kw: object) -> Memory:
    return Memory(id=id, tenant="t", content=id, timestamp=at, tags=tags, **kw)  # type: ignore[arg-type]


def pairs(rels: list[Relation]) -> list[tuple[str, str, float]]:
    return [(r.source_id, r.target_id, round(r.strength, 6)) for r in rels]


# --- SIMILAR_TO ------------------------------------------------------------------------------


@pytest.mark.parametrize("least", [AssociationSettings().similar_min_cosine, 0.85])
def test_similar_to_above_threshold_only(least: float) -> None:
    got = similar_to(
        [
            Neighbour("a", "b", 0.99),
            Neighbour("a", "c", least),  # at the threshold: in
            Neighbour("a", "d", least - 0.0001),
            Neighbour("a", "a", 1.0),  # itself
            Neighbour("a", "e", float("nan")),
        ],
        NOW,
        AssociationSettings(similar_min_cosine=least),
    )
    assert pairs(got) == [("a", "b", 0.99), ("a", "c", least)]
    for r in got:
        assert r.type == "SIMILAR_TO"
        assert r.origin == ORIGIN_SYSTEM
        assert r.created_at == NOW
        assert r.properties["rule"] == "similarity"


def test_similar_to_is_one_edge_per_pair_from_smaller_id() -> None:
    got = similar_to([Neighbour("b", "a", 0.92), Neighbour("a", "b", 0.90)], NOW)
    assert pairs(got) == [("a", "b", 0.92)]
    assert got[0].properties["cosine"] == 0.92


def test_similar_to_caps_each_memorys_neighbours() -> None:
    s = AssociationSettings(similar_max_per_memory=2)
    hits = [Neighbour("m", n, c) for n, c in [("x", 0.9), ("y", 0.97), ("z", 0.95), ("w", 0.95)]]
    # Best two by cosine, ties by id: y (0.97), then w before z at 0.95.
    assert pairs(similar_to(hits, NOW, s)) == [("m", "w", 0.95), ("m", "y", 0.97)]


def test_similar_to_cap_is_per_memory_searched() -> None:
    # Each of a, b, c keeps one neighbour: m; m thereby gets three edges.
    s = AssociationSettings(similar_max_per_memory=1)
    hits = [Neighbour(x, "m", 0.97) for x in "abc"] + [Neighbour(x, "q", 0.93) for x in "abc"]
    got = similar_to(hits, NOW, s)
    assert {(r.source_id, r.target_id) for r in got} == {("a", "m"), ("b", "m"), ("c", "m")}


def test_similar_to_strength_is_clamped() -> None:
    assert similar_to([Neighbour("a", "b", 1.0000002)], NOW)[0].strength == 1.0


def test_similar_to_is_independent_of_input_order() -> None:
    hits = [Neighbour("a", "b", 0.9), Neighbour("c", "a", 0.91), Neighbour("b", "c", 0.88)]
    assert similar_to(hits, NOW) == similar_to(hits[::-1], NOW)


# --- sequence keys ----------------------------------------------------------------------------


def test_sequence_key_from_tag_prefix_groups_under_it() -> None:
    key = SequenceKey.parse("session")
    assert key.of(mem("a", T0, ("session:3:turn:7", "x"))) == "session:3"
    assert key.of(mem("a", T0, ("sessions:3",))) is None
    assert key.of(mem("a", T0)) is None


def test_sequence_key_metadata_first_and_nested() -> None:
    key = SequenceKey.parse("session")
    m = mem("a", T0, ("session:3",), metadata={"session": "abc"})
    assert key.of(m) == "metadata:session=abc"
    nested = SequenceKey.parse("metadata:source.thread")
    assert nested.of(mem("a", T0, metadata={"source": {"thread": 42}})) == (
        "metadata:source.thread=42"
    )
    assert nested.of(mem("a", T0, ("source:thread",))) is None
    tag_only = SequenceKey.parse("tag:session")
    assert tag_only.of(m) == "session:3"


@pytest.mark.parametrize("bad", ["", "   ", "tag:", "metadata:", "two words"])
def test_bad_sequence_keys_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="sequence key"):
        SequenceKey.parse(bad)
    with pytest.raises(ValueError, match="sequence key"):
        AssociationSettings(sequence_key=bad)


# --- PRECEDED_BY ------------------------------------------------------------------------------


def test_preceded_by_nearest_predecessor_in_the_same_session() -> None:
    here = mem("m", T0, ("session:1",))
    candidates = [
        mem("p1", T0 - 10 * MIN, ("session:1",)),
        mem("p2", T0 - 2 * MIN, ("session:1",)),  # nearest
        mem("other", T0 - 1 * MIN, ("session:2",)),  # another session
        mem("later", T0 + 1 * MIN, ("session:1",)),  # after it
        mem("untagged", T0 - 1 * MIN),
    ]
    got = preceded_by(here, candidates, NOW)
    assert [(r.source_id, r.target_id, r.type) for r in got] == [("m", "p2", "PRECEDED_BY")]
    r = got[0]
    assert r.origin == ORIGIN_SYSTEM
    assert r.created_at == NOW
    assert r.properties == {"rule": "sequence", "key": "session:1", "gap_s": 120.0}


def test_preceded_by_at_most_k_nearest_first() -> None:
    s = AssociationSettings(preceded_max=2)
    here = mem("m", T0, ("session:1",))
    candidates = [mem(f"p{i}", T0 - i * MIN, ("session:1",)) for i in (5, 1, 3, 2)]
    assert [r.target_id for r in preceded_by(here, candidates, NOW, s)] == ["p1", "p2"]
    assert preceded_by(here, candidates, NOW, AssociationSettings(preceded_max=0)) == []


def test_preceded_by_window_is_relative_to_the_memorys_own_time() -> None:
    s = AssociationSettings(preceded_window_hours=2, preceded_max=5)
    # An old memory: the window is around its timestamp, not around now.
    here = mem("m", EARLIER, ("session:1",))
    candidates = [
        mem("edge", EARLIER - 2 * HOUR, ("session:1",)),  # at the edge: in
        mem("out", EARLIER - 2 * HOUR - MIN, ("session:1",)),
        mem("near-now", NOW - MIN, ("session:1",)),
    ]
    got = preceded_by(here, candidates, NOW, s)
    assert [r.target_id for r in got] == ["edge"]


def test_preceded_by_strength_falls_linearly_over_the_window() -> None:
    s = AssociationSettings(preceded_window_hours=4, preceded_max=3, preceded_min_strength=0.2)
    here = mem("m", T0, ("session:1",))
    candidates = [mem(f"p{h}", T0 - h * HOUR, ("session:1",)) for h in (0, 1, 4)]
    # p0 shares m's timestamp but sorts after "m": not a predecessor (see the tie test).
    got = {r.target_id: r.strength for r in preceded_by(here, candidates, NOW, s)}
    assert got == pytest.approx({"p1": 1 - 0.8 * 0.25, "p4": 0.2})


def test_preceded_by_ties_on_timestamp_follow_id_order() -> None:
    here = mem("0193-b", T0, ("session:1",))
    same_time = [mem("0193-a", T0, ("session:1",)), mem("0193-c", T0, ("session:1",))]
    got = preceded_by(here, same_time, NOW)
    assert [(r.target_id, r.strength) for r in got] == [("0193-a", 1.0)]
    assert preceded_by(same_time[0], [here, same_time[1]], NOW) == []


def test_preceded_by_with_a_metadata_key() -> None:
    s = AssociationSettings(sequence_key="metadata:source")
    here = mem("m", T0, metadata={"source": "slack#dev"})
    candidates = [
        mem("a", T0 - MIN, metadata={"source": "slack#dev"}),
        mem("b", T0 - 30 * MIN, metadata={"source": "email"}),
    ]
    assert [r.target_id for r in preceded_by(here, candidates, NOW, s)] == ["a"]


def test_no_key_or_meta_pattern_has_no_predecessors() -> None:
    candidates = [mem("p", T0 - MIN, ("session:1",))]
    assert preceded_by(mem("m", T0), candidates, NOW) == []
    meta = mem("m", T0, ("session:1",), type="MetaPattern")
    assert preceded_by(meta, candidates, NOW) == []
    here = mem("m", T0, ("session:1",))
    meta_candidate = [mem("p", T0 - MIN, ("session:1",), type="MetaPattern")]
    assert preceded_by(here, meta_candidate, NOW) == []


# --- reconcile ------------------------------------------------------------------------------


def sys(a: str, b: str, type_: str, strength: float, **kw: object) -> Relation:
    return Relation(a, b, type_, strength, origin=ORIGIN_SYSTEM, **kw)  # type: ignore[arg-type]


def test_edge_key_orders_symmetric_types_only() -> None:
    assert edge_key(Relation("b", "a", "SIMILAR_TO")) == ("a", "b", "SIMILAR_TO")
    assert edge_key(Relation("b", "a", "PRECEDED_BY")) == ("b", "a", "PRECEDED_BY")


def test_new_edges_are_created() -> None:
    plan = reconcile([sys("a", "b", "SIMILAR_TO", 0.9)], [])
    assert [(w.change, w.relation.source_id, w.relation.target_id) for w in plan.writes] == [
        (Change.CREATE, "a", "b")
    ]
    assert plan.unchanged == 0
    assert plan.user_owned == ()


def test_user_edges_are_never_overwritten() -> None:
    user = Relation("m", "p", "PRECEDED_BY", 0.3, origin="user")
    unknown = Relation("a", "b", "SIMILAR_TO", 0.1, origin="")  # anything not ours
    plan = reconcile(
        [sys("m", "p", "PRECEDED_BY", 0.9), sys("a", "b", "SIMILAR_TO", 0.95)], [user, unknown]
    )
    assert plan.writes == ()
    assert [(r.source_id, r.target_id) for r in plan.user_owned] == [("a", "b"), ("m", "p")]


def test_a_user_edge_of_another_type_or_direction_does_not_block() -> None:
    existing = [
        Relation("m", "p", "RELATES_TO", origin="user"),
        Relation("p", "m", "PRECEDED_BY", origin="user"),
    ]
    plan = reconcile([sys("m", "p", "PRECEDED_BY", 0.9)], existing)
    assert [w.change for w in plan.writes] == [Change.CREATE]


def test_system_edge_with_the_same_strength_is_left_alone() -> None:
    plan = reconcile([sys("a", "b", "SIMILAR_TO", 0.905)], [sys("a", "b", "SIMILAR_TO", 0.9)])
    assert plan.writes == ()
    assert plan.unchanged == 1


def test_system_edge_with_a_new_strength_is_updated_in_place() -> None:
    created = datetime(2026, 1, 1, tzinfo=UTC)
    stored = sys("b", "a", "SIMILAR_TO", 0.86, created_at=created)  # held the other way round
    plan = reconcile([sys("a", "b", "SIMILAR_TO", 0.95, created_at=NOW)], [stored])
    (write,) = plan.writes
    assert write.change is Change.UPDATE
    assert write.previous_strength == 0.86
    assert (write.relation.source_id, write.relation.target_id) == ("b", "a")  # no mirror edge
    assert write.relation.created_at == created
    assert write.relation.strength == 0.95


def test_epsilon_is_a_setting() -> None:
    proposal = [sys("a", "b", "SIMILAR_TO", 0.905)]
    existing = [sys("a", "b", "SIMILAR_TO", 0.9)]
    plan = reconcile(proposal, existing, AssociationSettings(strength_epsilon=0.0))
    assert [w.change for w in plan.writes] == [Change.UPDATE]


def test_duplicate_proposals_collapse_to_the_strongest() -> None:
    plan = reconcile(
        [
            sys("a", "b", "SIMILAR_TO", 0.88),
            sys("b", "a", "SIMILAR_TO", 0.93),
            sys("a", "b", "SIMILAR_TO", 0.90),
        ],
        [],
    )
    assert [(w.relation.strength, w.change) for w in plan.writes] == [(0.93, Change.CREATE)]


def test_every_write_is_a_system_edge_in_key_order() -> None:
    proposals = [
        Relation("z", "y", "PRECEDED_BY", 0.7),  # origin defaults to "user" in the model
        sys("a", "c", "SIMILAR_TO", 0.9),
        sys("a", "b", "SIMILAR_TO", 0.9),
    ]
    plan = reconcile(proposals, [])
    assert all(w.relation.origin == ORIGIN_SYSTEM for w in plan.writes)
    assert [edge_key(w.relation) for w in plan.writes] == sorted(
        edge_key(w.relation) for w in plan.writes
    )


def test_rerunning_on_what_the_first_run_wrote_writes_nothing() -> None:
    here = mem("m", T0, ("session:1",))
    proposals = [
        *similar_to([Neighbour("m", "x", 0.95), Neighbour("x", "m", 0.95)], NOW),
        *preceded_by(here, [mem("p", T0 - MIN, ("session:1",))], NOW),
    ]
    first = reconcile(proposals, [])
    assert len(first.writes) == 2
    second = reconcile(proposals, [w.relation for w in first.writes])
    assert second.writes == ()
    assert second.unchanged == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"similar_min_cosine": 1.5},
        {"preceded_min_strength": -0.1},
        {"preceded_window_hours": 0.0},
        {"preceded_max": -1},
        {"similar_max_per_memory": -1},
        {"strength_epsilon": float("nan")},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"."):
        AssociationSettings(**bad)  # type: ignore[arg-type]
