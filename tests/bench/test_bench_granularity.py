"""The multi-granularity bench's pure parts: cutting sittings, deriving windows and digests,
crediting members, and the fast selection agreeing with the fusion it selects for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from bench.granularity import (
    DIGEST_TAG,
    STREAMS,
    Asked,
    Unit,
    combos,
    cross_validated,
    digest,
    fused,
    member_credit,
    recall_matrix,
    sittings,
    windows,
)
from bench.quality import Question
from engram_core.model import Hit, Memory

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _m(i: int, minutes: float, content: str = "") -> Memory:
    return Memory(
        id=f"m{i:02d}",
        tenant="t",
        content=content or f"turn {i}",
        timestamp=T0 + timedelta(minutes=minutes),
    )


def test_a_silence_over_the_gap_starts_a_new_sitting_and_order_is_the_timeline() -> None:
    ms = [_m(2, 1), _m(1, 0), _m(3, 61.5), _m(4, 62)]
    assert [[m.id for m in s] for s in sittings(ms, gap_s=3600)] == [
        ["m01", "m02"],
        ["m03", "m04"],
    ]


def test_windows_are_every_run_of_each_size_within_the_sitting() -> None:
    s = [_m(i, i) for i in range(4)]
    got = [u.members for u in windows(s, [2, 4])]
    assert got == [("m00", "m01"), ("m01", "m02"), ("m02", "m03"), ("m00", "m01", "m02", "m03")]
    assert windows(s[:1], [2]) == []


def test_the_digest_keeps_the_turns_nearest_the_centroid_and_every_member() -> None:
    s = [_m(i, i, f"text {i}") for i in range(6)]
    # Five turns about one thing, one off on its own: the odd one is left out.
    vectors = {f"text {i}": [1.0, 0.1 * i] for i in range(5)} | {"text 5": [0.0, 1.0]}
    u = digest(s, vectors)
    assert u.kind == DIGEST_TAG
    assert u.members == tuple(m.id for m in s)
    assert "text 5" not in u.content
    assert u.content.count("\n") == 3  # four turns, in timeline order
    assert u.content.index("text 1") < u.content.index("text 2")


def test_members_are_credited_where_they_first_appear() -> None:
    units = {
        "w1": Unit("w", ("a", "b"), "", T0),
        "w2": Unit("w", ("b", "c"), "", T0),
    }
    got = member_credit([Hit("w1", 2.0), Hit("w2", 1.0)], units)
    assert got == {"a": (1, 1.0), "b": (2, 1.0), "c": (3, 0.0)}


def _asked() -> Asked:
    base = [("a", 0.9), ("b", 0.5), ("c", 0.1)]
    credit = {
        "win_vector": {"c": (1, 1.0), "x": (2, 0.5)},
        "win_keyword": {"x": (1, 1.0)},
    }
    return Asked(base, credit, {0: 1})


def test_no_weight_is_the_readers_own_ranking_and_weights_move_members_up() -> None:
    a = _asked()
    sitting = {"c": 0}
    assert fused(a, "rrf", (0.0, 0.0, 0.0), sitting) == ["a", "b", "c"]
    assert fused(a, "rrf", (1.0, 0.0, 0.0), sitting)[0] == "c"
    assert fused(a, "score", (0.0, 1.0, 0.0), sitting)[:2] == ["a", "x"]  # joins the pool
    assert fused(a, "rrf", (0.0, 0.0, 1.0), sitting)[0] == "c"  # its sitting's digest


def test_the_fast_selection_scores_each_combo_as_the_fusion_ranks() -> None:
    a = _asked()
    sitting = {"c": 0}
    q = Question("s", 1, "q?", ("C",))
    dia = {"a": "A", "b": "B", "c": "C", "x": "X"}
    every = combos()
    got = recall_matrix([q], [a], dia, sitting, every)
    for j, (scheme, w) in enumerate(every):
        top = fused(a, scheme, w, sitting)[:10]
        assert got[0, j] == (1.0 if "c" in top else 0.0)
    assert len(STREAMS) == 3


def test_each_fold_is_chosen_on_the_other_conversations_and_a_tie_keeps_the_reader() -> None:
    every = combos()
    helps_b = every.index(("rrf", (0.1, 0.0, 0.0)))
    r10 = np.zeros((3, len(every)))
    r10[0, helps_b] = 1.0  # a question of conversation "a" only
    chosen, fit = cross_validated(r10, every, ["a", "b", "b"], "all")
    assert chosen["a"] == every[0]  # nothing on "b" beats the Reader's own ranking
    assert chosen["b"] == every[helps_b]
    assert fit == every[helps_b]
    chosen, _ = cross_validated(r10, every, ["a", "b", "b"], "digest")
    assert chosen["b"] == every[0]  # outside the family
