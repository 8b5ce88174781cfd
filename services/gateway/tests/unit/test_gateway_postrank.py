"""Post-ranking: dedupe, floors, diversification, limit, token budget, tier escalation."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from engram_core.errors import InvalidArgument
from engram_core.model import Memory
from engram_core.scoring import ScoredCandidate
from engram_core.tags import tag_prefixes
from engram_gateway.service.postrank import (
    ELLIPSIS,
    CutReason,
    Fingerprint,
    GroupBy,
    NearDuplicates,
    PostRankOptions,
    adaptive_floor,
    dedupe,
    dedupe_ids,
    diversify,
    escalated_pool,
    estimate_tokens,
    fingerprint,
    max_rrf_score,
    near_duplicate,
    pack,
    parse_group_by,
    postrank,
    render_memory,
)

WHEN = datetime(2025, 1, 2, 3, 4, tzinfo=UTC)


def sc(
    id: str,
    score: float,
    content: str = "",
    tags: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
) -> ScoredCandidate:
    memory = Memory(
        id=id,
        tenant="t",
        content=content or f"content of memory {id} unlike any other",
        tags=tuple(tags),
        tag_prefixes=tag_prefixes(tags),
        metadata=dict(metadata or {}),
        timestamp=WHEN,
    )
    return ScoredCandidate(memory, score, {}, {})


def ids(items: Sequence[ScoredCandidate]) -> list[str]:
    return [i.memory.id for i in items]


def ranked(n: int, top: float = 1.0, step: float = 0.01) -> list[ScoredCandidate]:
    return [sc(f"m{i}", top - i * step) for i in range(n)]


# --- grouping -----------------------------------------------------------------------------


def test_parse_group_by_forms() -> None:
    assert parse_group_by("") is None
    assert parse_group_by("  ") is None
    assert parse_group_by("tag:session") == GroupBy("session", tag=True, metadata=False)
    assert parse_group_by("metadata:source.session") == GroupBy(
        "source.session", tag=False, metadata=True
    )
    assert parse_group_by("meta:src") == GroupBy("src", tag=False, metadata=True)
    assert parse_group_by("session") == GroupBy("session", tag=True, metadata=True)
    assert parse_group_by("source:web") == GroupBy("source:web", tag=True, metadata=True)


@pytest.mark.parametrize("bad", ["tag:", "metadata:", "a b", "tag:a b", "x" * 200])
def test_bad_group_by_names_the_field(bad: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        parse_group_by(bad)
    assert err.value.field == "diversify_by"


def test_group_key_from_tags_takes_the_segment_under_the_prefix() -> None:
    by = GroupBy("session", metadata=False)
    assert by.key(sc("a", 1, tags=["conv:1", "session:3"]).memory) == "session:3"
    assert by.key(sc("a", 1, tags=["session:3:turn:7"]).memory) == "session:3"
    assert by.key(sc("a", 1, tags=["sessions:3"]).memory) is None  # not under the prefix
    assert by.key(sc("a", 1, tags=["session"]).memory) is None  # the prefix alone has no value
    assert by.key(sc("a", 1, tags=["session:9", "session:10"]).memory) == "session:10"  # sorted
    assert GroupBy("Source/Web", metadata=False).key(sc("a", 1, tags=["source:web:x"]).memory) == (
        "source:web:x"
    )


def test_group_key_from_metadata() -> None:
    by = GroupBy("session_id", tag=False)
    assert by.key(sc("a", 1, metadata={"session_id": "s1"}).memory) == "s1"
    assert by.key(sc("a", 1, metadata={"session_id": 7}).memory) == "7"
    assert by.key(sc("a", 1, metadata={"session_id": ""}).memory) is None
    assert by.key(sc("a", 1, metadata={"session_id": None}).memory) is None
    assert by.key(sc("a", 1, metadata={}).memory) is None
    nested = GroupBy("source.session", tag=False)
    assert nested.key(sc("a", 1, metadata={"source": {"session": "x"}}).memory) == "x"
    assert nested.key(sc("a", 1, metadata={"source": "flat"}).memory) is None


def test_bare_group_name_prefers_metadata_then_tags() -> None:
    by = GroupBy("session")
    both = sc("a", 1, tags=["session:3"], metadata={"session": "meta"})
    assert by.key(both.memory) == "meta"
    assert by.key(sc("a", 1, tags=["session:3"]).memory) == "session:3"


def test_diversify_caps_each_group_and_keeps_order() -> None:
    xs = [
        sc("a1", 0.9, tags=["session:a"]),
        sc("a2", 0.8, tags=["session:a"]),
        sc("loose", 0.75),
        sc("a3", 0.7, tags=["session:a"]),
        sc("b1", 0.6, tags=["session:b"]),
        sc("loose2", 0.5),
    ]
    kept, cuts = diversify(xs, parse_group_by("tag:session"), max_per_group=2)
    assert ids(kept) == ["a1", "a2", "loose", "b1", "loose2"]
    assert [(c.id, c.reason, c.detail) for c in cuts] == [("a3", CutReason.GROUP_FULL, "session:a")]
    one, _ = diversify(xs, parse_group_by("tag:session"), max_per_group=1)
    assert ids(one) == ["a1", "loose", "b1", "loose2"]
    off, cuts = diversify(xs, None)
    assert (ids(off), cuts) == (ids(xs), [])


# --- near-identical content ---------------------------------------------------------------


def test_fingerprint_ignores_case_punctuation_whitespace_and_width() -> None:
    a = fingerprint("Deployed   v2 to PROD!")
    b = fingerprint("deployed v2 to prod")
    c = fingerprint("ｄｅｐｌｏｙｅｄ v2 to prod.")  # full-width letters: NFKC folds them
    assert a.key == b.key == c.key == ("deployed", "v2", "to", "prod")
    assert a.length == 4
    assert near_duplicate(a, b, 0.0)


def test_texts_without_words_compare_as_text() -> None:
    assert near_duplicate(fingerprint("!!!"), fingerprint(" !!! "), 0.9)
    assert not near_duplicate(fingerprint("!!!"), fingerprint("???"), 0.9)


def test_shingle_jaccard_threshold() -> None:
    words = [f"w{i}" for i in range(40)]
    base = fingerprint(" ".join(words))
    # One word changed in the middle: 40 words → 38 3-shingles, 3 of them differ.
    # |A ∩ B| = 35, |A ∪ B| = 41 → J ≈ 0.854.
    changed = fingerprint(" ".join([*words[:20], "other", *words[21:]]))
    assert near_duplicate(base, changed, 0.85)
    assert not near_duplicate(base, changed, 0.86)
    assert not near_duplicate(base, changed, 0.0)  # 0: only identical words count
    # One word appended: 38 vs 39 shingles, 38 shared → J = 38/39 ≈ 0.974.
    longer = fingerprint(" ".join([*words, "extra"]))
    assert near_duplicate(base, longer, 0.97)
    assert not near_duplicate(base, longer, 0.98)


def test_short_texts_use_what_they_have() -> None:
    assert near_duplicate(fingerprint("yes"), fingerprint("Yes."), 0.9)
    assert not near_duplicate(fingerprint("yes"), fingerprint("no"), 0.9)
    assert not near_duplicate(fingerprint("likes tea"), fingerprint("likes coffee"), 0.9)


def test_long_texts_are_shingled_over_their_head_only() -> None:
    words = [f"w{i}" for i in range(1000)]  # ~5,900 characters, over MAX_SHINGLED_CHARS
    text = " ".join(words)
    fp = fingerprint(text)
    assert fp.length == 1000
    assert len(fp.shingles) < 500  # the first 2,048 characters: ~430 of the 998
    assert fingerprint(text.upper() + "  ").key == fp.key  # case and spacing still ignored
    punctuated = fingerprint(text.replace("w5 ", "w5, "))
    assert punctuated.key != fp.key  # beyond the head, punctuation counts for the key...
    assert near_duplicate(fp, punctuated, 0.9)  # ...but the shingles see the same words
    assert not near_duplicate(fp, punctuated, 0.0)
    # Same head, twice the length: never a near-duplicate (word counts too far apart).
    assert not near_duplicate(fp, fingerprint(text + " " + text), 0.9)


def test_index_agrees_with_pairwise_checks() -> None:
    rng = random.Random(7)
    vocab = [f"v{i}" for i in range(60)]
    texts = [" ".join(rng.choices(vocab, k=rng.randint(1, 30))) for _ in range(60)]
    # Plant near-twins: a copy with one word changed or appended.
    for i in range(0, 60, 5):
        twin = texts[i].split()
        twin[rng.randrange(len(twin))] = "changed"
        texts.append(" ".join(twin))
        texts.append(texts[i] + " extra")
    for threshold in (0.0, 0.5, 0.8, 0.9):
        index = NearDuplicates(threshold)
        kept: list[tuple[str, Fingerprint]] = []
        for n, text in enumerate(texts):
            fp = fingerprint(text)
            expected = next((k for k, kfp in kept if near_duplicate(fp, kfp, threshold)), None)
            assert index.twin(fp) == expected, (threshold, text)
            if expected is None:
                index.add(str(n), fp)
                kept.append((str(n), fp))


def test_dedupe_keeps_the_best_ranked_copy() -> None:
    xs = [
        sc("a", 0.9, "Alice moved to Berlin in 2023."),
        sc("b", 0.8, "Bob likes tea."),
        sc("a", 0.7, "Alice moved to Berlin in 2023."),
        sc("c", 0.6, "alice moved to berlin in 2023"),
        sc("d", 0.5, "Alice moved to Paris in 2023."),
    ]
    kept, cuts = dedupe(xs)
    assert ids(kept) == ["a", "b", "d"]
    assert [(c.id, c.reason, c.detail) for c in cuts] == [
        ("a", CutReason.DUPLICATE_ID, ""),
        ("c", CutReason.NEAR_DUPLICATE, "a"),
    ]
    only_ids, cuts = dedupe_ids(xs)
    assert ids(only_ids) == ["a", "b", "c", "d"]
    assert len(cuts) == 1


# --- floors -------------------------------------------------------------------------------


def test_floor_ratio_is_relative_to_the_top() -> None:
    xs = [sc("a", 2.0), sc("b", 1.0), sc("c", 0.21), sc("d", 0.19)]
    kept, cuts = adaptive_floor(xs, floor_ratio=0.1)
    assert ids(kept) == ["a", "b", "c"]
    assert [(c.id, c.reason) for c in cuts] == [("d", CutReason.BELOW_FLOOR)]
    # The same shape on RRF's scale cuts the same.
    rrf = [sc(i.memory.id, i.score / 100) for i in xs]
    assert ids(adaptive_floor(rrf, floor_ratio=0.1)[0]) == ["a", "b", "c"]


def test_gap_cuts_the_tail() -> None:
    xs = [sc("a", 1.0), sc("b", 0.95), sc("c", 0.4), sc("d", 0.39)]
    kept, cuts = adaptive_floor(xs, floor_ratio=0.0, max_gap=0.6)
    assert ids(kept) == ["a", "b", "c", "d"]  # a drop of 0.55 is not > 0.6 × top
    kept, cuts = adaptive_floor(xs, floor_ratio=0.0, max_gap=0.3)
    assert ids(kept) == ["a", "b"]
    assert [(c.id, c.reason) for c in cuts] == [
        ("c", CutReason.SCORE_GAP),
        ("d", CutReason.SCORE_GAP),
    ]


def test_min_keep_and_degenerate_scores() -> None:
    xs = [sc("a", 1.0), sc("b", 0.01), sc("c", 0.01)]
    assert ids(adaptive_floor(xs, floor_ratio=0.5, min_keep=2)[0]) == ["a", "b"]
    assert ids(adaptive_floor(xs, floor_ratio=0.5, max_gap=0.5, min_keep=2)[0]) == ["a", "b"]
    zeros = [sc("a", 0.0), sc("b", 0.0)]
    assert ids(adaptive_floor(zeros, floor_ratio=0.5, max_gap=0.1)[0]) == ["a", "b"]
    assert adaptive_floor([], floor_ratio=0.5) == ([], [])
    assert ids(adaptive_floor(xs, floor_ratio=0.0)[0]) == ["a", "b", "c"]


# --- tokens and packing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("The quick brown fox.", 5),  # 20 chars / 4 = 5; 5 pieces
        ("2024-01-01", 5),  # 10 / 4 → 3, but 5 pieces: 2024 - 01 - 01
        ("internationalization", 5),  # 20 / 4 = 5; one word
        ("a b c d e f", 6),  # 11 / 4 → 3, but 6 words
        ("日本語のテキスト", 8),  # one per non-ASCII character
        ("café", 2),  # 3 / 4 + 1 → 2
        ("ok 🙂", 2),  # 3 / 4 + 1 → 2; two pieces
        ("x" * 400, 100),
    ],
)
def test_estimate_tokens(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_render_memory() -> None:
    assert render_memory(sc("a", 1, "  Hello world \n").memory) == "- [2025-01-02] Hello world"


def short(id: str, score: float, words: int) -> ScoredCandidate:
    return sc(id, score, " ".join(["word"] * words))


def cost(item: ScoredCandidate) -> int:
    return estimate_tokens(render_memory(item.memory))


def test_pack_fits_everything_within_budget() -> None:
    xs = [short("a", 0.9, 5), short("b", 0.8, 5)]
    # "- [2025-01-02] word word word word word": 8 + 5 pieces = 13 tokens each; "\n" costs 1.
    assert cost(xs[0]) == 13
    packed = pack(xs, 27)
    assert ids(packed.items) == ["a", "b"]
    assert packed.context == "\n".join(render_memory(x.memory) for x in xs)
    assert packed.tokens == estimate_tokens(packed.context) <= 27
    assert (packed.cuts, packed.truncated) == ([], "")


def test_pack_skips_what_does_not_fit_and_tries_smaller_ones() -> None:
    xs = [short("a", 0.9, 5), short("big", 0.8, 50), short("c", 0.7, 5), short("d", 0.6, 5)]
    packed = pack(xs, 30)  # a (13) + sep (1) + c (13) = 27; d would make 41
    assert ids(packed.items) == ["a", "c"]
    assert [(c.id, c.reason) for c in packed.cuts] == [
        ("big", CutReason.TOKEN_BUDGET),
        ("d", CutReason.TOKEN_BUDGET),
    ]
    assert packed.tokens <= 30


def test_pack_shortens_the_best_item_when_it_alone_is_too_long() -> None:
    xs = [short("big", 0.9, 100), short("small", 0.8, 2)]
    packed = pack(xs, 20)
    assert ids(packed.items) == ["big"]
    assert packed.truncated == "big"
    assert packed.context.endswith(ELLIPSIS)
    assert packed.context.startswith("- [2025-01-02] word")
    assert packed.tokens <= 20
    # The longest prefix that fits: one more word would not.
    words = packed.context.count("word")
    longer = "- [2025-01-02] " + " ".join(["word"] * (words + 1)) + ELLIPSIS
    assert estimate_tokens(longer) > 20
    assert [c.id for c in packed.cuts] == ["small"]


def test_pack_with_a_budget_below_the_prefix_packs_nothing() -> None:
    packed = pack([short("a", 0.9, 5)], 3)
    assert (packed.items, packed.context, packed.tokens) == ([], "", 0)
    assert [c.reason for c in packed.cuts] == [CutReason.TOKEN_BUDGET]


def test_pack_custom_render_and_separator() -> None:
    xs = [sc("a", 1, "one"), sc("b", 1, "two")]
    packed = pack(xs, 100, render=lambda m: m.content, separator="\n\n")
    assert packed.context == "one\n\ntwo"


# --- the whole step -----------------------------------------------------------------------


def test_postrank_defaults_only_dedupe_floor_and_limit() -> None:
    xs = ranked(30)
    out = postrank(xs, PostRankOptions())
    assert ids(out.results) == [f"m{i}" for i in range(10)]
    assert out.cut_counts() == {"limit": 20}
    assert (out.context, out.tokens) == ("", 0)


def test_postrank_runs_every_step_in_order() -> None:
    xs = [
        sc("a", 1.0, "Alice moved to Berlin.", tags=["session:1"]),
        sc("a", 0.99, "Alice moved to Berlin.", tags=["session:1"]),  # same id
        sc("dup", 0.95, "alice moved to berlin", tags=["session:2"]),  # near-identical
        sc("b", 0.9, "Bob likes tea.", tags=["session:1"]),
        sc("c", 0.8, "Carol plays chess.", tags=["session:1"]),  # session 1 is full
        sc("d", 0.7, "Dan runs.", tags=["session:2"]),
        sc("low", 0.2, "Low score.", tags=["session:3"]),  # under min_score
        sc("e", 0.6, "Eve sings.", tags=["session:3"]),
        sc("f", 0.5, "Fay cooks.", tags=["session:4"]),  # past the limit
        sc("floor", 0.05, "Under the floor."),
    ]
    options = PostRankOptions(
        limit=4, min_score=0.3, diversify_by="tag:session", max_per_group=2, floor_ratio=0.1
    )
    out = postrank(xs, options)
    assert ids(out.results) == ["a", "b", "d", "e"]
    assert [(c.id, c.reason) for c in out.cuts] == [
        ("a", CutReason.DUPLICATE_ID),
        ("low", CutReason.MIN_SCORE),
        ("floor", CutReason.MIN_SCORE),
        ("dup", CutReason.NEAR_DUPLICATE),
        ("c", CutReason.GROUP_FULL),
        ("f", CutReason.LIMIT),
    ]


def test_near_duplicates_do_not_use_a_group_slot() -> None:
    xs = [
        sc("a", 1.0, "same words here", tags=["s:1"]),
        sc("a2", 0.9, "Same words here!", tags=["s:1"]),
        sc("b", 0.8, "other words there", tags=["s:1"]),
    ]
    out = postrank(xs, PostRankOptions(diversify_by="tag:s", max_per_group=2))
    assert ids(out.results) == ["a", "b"]


def test_postrank_packs_with_a_token_budget() -> None:
    xs = [
        sc("a", 0.9, "apples are red"),
        sc("big", 0.85, " ".join(f"w{i}" for i in range(60))),
        sc("c", 0.8, "cherries are dark"),
        sc("d", 0.7, "dates are sweet"),
    ]
    budget = cost(xs[0]) + 1 + cost(xs[2])  # "\n" between them costs 1
    out = postrank(xs, PostRankOptions(limit=3, token_budget=budget))
    assert ids(out.results) == ["a", "c"]
    assert out.context == f"{render_memory(xs[0].memory)}\n{render_memory(xs[2].memory)}"
    assert out.tokens == estimate_tokens(out.context) <= budget
    assert out.cut_counts() == {"limit": 1, "token_budget": 1}


def test_postrank_floor_and_gap_settings() -> None:
    xs = [sc("a", 1.0), sc("b", 0.9), sc("c", 0.3), sc("d", 0.05)]
    assert ids(postrank(xs, PostRankOptions()).results) == ["a", "b", "c"]
    gap = PostRankOptions(max_gap=0.5)
    assert ids(postrank(xs, gap).results) == ["a", "b"]
    off = PostRankOptions(floor_ratio=0.0)
    assert ids(postrank(xs, off).results) == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"min_score": -0.1}, "min_score"),
        ({"min_score": float("nan")}, "min_score"),
        ({"max_per_group": 0}, "max_per_group"),
        ({"token_budget": -1}, "token_budget"),
        ({"token_budget": 10**7}, "token_budget"),
        ({"diversify_by": "tag:"}, "diversify_by"),
        ({"near_duplicate_threshold": 1.5}, "near_duplicate_threshold"),
        ({"floor_ratio": -0.1}, "floor_ratio"),
        ({"max_gap": 2.0}, "max_gap"),
        ({"shingle_size": 0}, "shingle_size"),
        ({"min_keep": 0}, "min_keep"),
        ({"chars_per_token": 0.0}, "chars_per_token"),
    ],
)
def test_bad_options_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        PostRankOptions(**kwargs)
    assert err.value.field == field


def test_options_parse_diversify_by_once() -> None:
    assert PostRankOptions(diversify_by="tag:session").group_by == GroupBy("session", True, False)
    assert PostRankOptions().group_by is None


# --- tier escalation ----------------------------------------------------------------------


def test_escalation_doubles_the_pool_once_when_evidence_is_weak() -> None:
    assert escalated_pool(0.2, floor=0.3, pool=40, max_pool=200) == 80
    assert escalated_pool(0.3, floor=0.3, pool=40, max_pool=200) is None  # at the floor: fine
    assert escalated_pool(None, floor=0.3, pool=40, max_pool=200) == 80  # nothing found
    assert escalated_pool(0.2, floor=0.3, pool=40, max_pool=200, escalated=True) is None


def test_escalation_is_capped_and_needs_a_full_stream() -> None:
    assert escalated_pool(0.1, floor=0.3, pool=150, max_pool=200) == 200
    assert escalated_pool(0.1, floor=0.3, pool=200, max_pool=200) is None
    assert escalated_pool(0.1, floor=0.3, pool=40, max_pool=200, saturated=False) is None
    assert escalated_pool(0.1, floor=0.0, pool=40, max_pool=200) is None  # off


def test_escalation_on_rrf_scale() -> None:
    best_possible = max_rrf_score([1.0, 1.0, 1.0], 60.0)
    assert best_possible == pytest.approx(3 / 61)
    # Found by one stream at rank 1: a third of the best possible.
    one_stream = 1 / 61
    assert escalated_pool(one_stream, floor=0.5, pool=40, max_pool=200, score_scale=best_possible)
    assert (
        escalated_pool(2 / 61, floor=0.5, pool=40, max_pool=200, score_scale=best_possible) is None
    )
