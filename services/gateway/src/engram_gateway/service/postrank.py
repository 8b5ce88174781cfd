"""After ranking: dedupe, score floors, diversification, limit, token budget.

Pure: no I/O, no gRPC, no generated code. Generic over anything with a ``memory`` and a
``score`` (``engram_core.scoring.ScoredCandidate`` fits), taken best first. ``postrank``
runs the steps in this order and reports every item it cut and why:

1. duplicates by id (the first, best-ranked copy stays) and ``min_score`` (absolute);
2. the adaptive floor, relative to the top score: an item under ``floor_ratio × top`` is
   cut, and with ``max_gap`` > 0 everything after the first drop between neighbours larger
   than ``max_gap × top`` (the first ``min_keep`` items always stay);
3. one pass, best first, until ``limit`` items are kept: near-identical content (the same
   words once case, Unicode compatibility forms (NFKC), punctuation and spacing are
   normalised away, or a Jaccard similarity of word 3-shingles ≥
   ``near_duplicate_threshold``) and diversification (at most ``max_per_group`` per group
   of ``diversify_by``); the rest is cut by ``limit``;
4. with a ``token_budget``: pack best-first into a context string (see ``pack``).

``escalated_pool`` decides the tier escalation (widen the pool once when the evidence is
weak); the pipeline runs it between ranking and this module.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from engram_core.errors import InvalidArgument
from engram_core.model import Memory
from engram_core.tags import normalise_tag

DEFAULT_NEAR_DUPLICATE_THRESHOLD = 0.9
DEFAULT_SHINGLE_SIZE = 3
MAX_SHINGLED_CHARS = 2048  # bounds the near-duplicate cost of long texts (~350 words)
DEFAULT_FLOOR_RATIO = 0.1
DEFAULT_MAX_PER_GROUP = 2
DEFAULT_CHARS_PER_TOKEN = 4.0
MAX_TOKEN_BUDGET = 1_000_000
ELLIPSIS = "…"
_WORD = re.compile(r"\w+")
# Byte tables for estimate_tokens: bytes.translate runs in C, a regex ~20× slower. Bytes of
# non-ASCII characters count as word characters (those characters are charged one each).
_WORDISH = frozenset(
    b"0123456789_" + bytes(range(65, 91)) + bytes(range(97, 123)) + bytes(range(128, 256))
)
_TO_RUNS = bytes(ord("a") if b in _WORDISH else ord(" ") for b in range(256))
_NOT_PUNCTUATION = bytes(sorted(_WORDISH)) + b" \t\n\r\x0b\x0c"


class Ranked(Protocol):
    """What post-ranking needs of a result."""

    @property
    def memory(self) -> Memory: ...

    @property
    def score(self) -> float: ...


R = TypeVar("R", bound=Ranked)


class CutReason(StrEnum):
    DUPLICATE_ID = "duplicate_id"
    MIN_SCORE = "min_score"
    BELOW_FLOOR = "below_floor"
    SCORE_GAP = "score_gap"
    NEAR_DUPLICATE = "near_duplicate"
    GROUP_FULL = "group_full"
    LIMIT = "limit"
    TOKEN_BUDGET = "token_budget"


@dataclass(frozen=True, slots=True)
class Cut:
    id: str
    reason: CutReason
    detail: str = ""  # the id it duplicates, the full group's key, …


# --- grouping -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupBy:
    """Where a memory's group key comes from: a tag prefix, a metadata key, or either."""

    name: str
    tag: bool = True
    metadata: bool = True

    def key(self, memory: Memory) -> str | None:
        """The group of ``memory``; None (ungrouped, never limited) when it has none."""
        if self.metadata:
            value = _metadata_value(memory.metadata, self.name)
            if value is not None:
                return value
        if self.tag:
            prefix = normalise_tag(self.name) + ":"
            found = sorted(t for t in memory.tags if t.startswith(prefix))
            if found:
                # The segment right under the prefix: "session:3:turn:7" groups as "session:3".
                return prefix + found[0][len(prefix) :].split(":", 1)[0]
        return None


def _metadata_value(metadata: Any, path: str) -> str | None:
    value = metadata
    for part in path.split("."):  # "source.session" reads nested objects
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def parse_group_by(spec: str, field_path: str = "diversify_by") -> GroupBy | None:
    """``tag:<prefix>``, ``metadata:<key>`` (dots for nested keys) or a bare ``<name>``
    (metadata key, else tag prefix); empty → None (no diversification)."""
    text = spec.strip()
    if not text:
        return None
    source, sep, name = text.partition(":")
    tag, metadata = True, True
    if sep and source.lower() == "tag":
        metadata = False
    elif sep and source.lower() in ("metadata", "meta"):
        tag = False
    else:
        name = text
    if not name or any(c.isspace() for c in name) or len(name) > 128:
        raise InvalidArgument(
            field_path,
            f"{spec[:64]!r}: expected tag:<prefix>, metadata:<key> or <name> "
            "(non-empty, no whitespace, at most 128 characters)",
        )
    return GroupBy(name, tag=tag, metadata=metadata)


# --- near-identical content ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fingerprint:
    key: tuple[str, ...]  # equal keys: same text up to case, width, punctuation, spacing
    length: int  # words (whitespace-separated)
    shingles: frozenset[str]  # word shingles of the first MAX_SHINGLED_CHARS characters


def fingerprint(text: str, shingle_size: int = DEFAULT_SHINGLE_SIZE) -> Fingerprint:
    normal = unicodedata.normalize("NFKC", text).casefold()
    spaced = normal.split()
    if len(normal) <= MAX_SHINGLED_CHARS:
        words = tuple(_WORD.findall(normal))
        key = words or (" ".join(spaced),)  # no words at all: compare the text itself
    else:
        # Long texts: the regex only over the head bounds the cost; equality then ignores
        # case and spacing, not punctuation (the shingles still catch such near-twins).
        words = tuple(_WORD.findall(normal, 0, MAX_SHINGLED_CHARS))
        key = ("", " ".join(spaced))
    head = words or key
    k = max(1, min(shingle_size, len(head)))
    shingles = frozenset(" ".join(head[i : i + k]) for i in range(len(head) - k + 1))
    return Fingerprint(key, len(spaced), shingles)


def _similar(a_len: int, b_len: int, a_size: int, b_size: int, common: int, t: float) -> bool:
    # Word counts further apart than the threshold ratio never match (that also bounds the
    # Jaccard of the whole texts); then the shingles' Jaccard decides.
    small, large = sorted((a_len, b_len))
    return small >= t * large and common / (a_size + b_size - common) >= t


def near_duplicate(a: Fingerprint, b: Fingerprint, threshold: float) -> bool:
    """Same normalised words; or, with threshold > 0, word counts within the threshold ratio
    and a Jaccard similarity of word shingles ≥ threshold.

    Only the first ``MAX_SHINGLED_CHARS`` characters are shingled, so the cost per text is
    bounded: two long texts alike over that much and of similar length count as
    near-identical even if they part later.
    """
    if a.key == b.key:
        return True
    if threshold <= 0 or not a.shingles or not b.shingles:
        return False
    common = len(a.shingles & b.shingles)
    sizes = (len(a.shingles), len(b.shingles))
    return _similar(a.length, b.length, *sizes, common, threshold)


class NearDuplicates:
    """Kept texts, indexed so that checking one costs the shingles it shares with them.

    Same answers as ``near_duplicate`` against each kept text in turn, without comparing
    every pair.
    """

    def __init__(self, threshold: float) -> None:
        self._threshold = threshold
        self._by_key: dict[tuple[str, ...], int] = {}
        self._postings: dict[str, list[int]] = {}
        self._lengths: list[int] = []
        self._sizes: list[int] = []
        self._ids: list[str] = []

    def twin(self, fp: Fingerprint) -> str | None:
        """The id of the first kept text ``fp`` nearly duplicates, or None."""
        same = self._by_key.get(fp.key)
        if same is not None:
            return self._ids[same]
        if self._threshold <= 0 or not fp.shingles:
            return None
        shared: dict[int, int] = {}
        for shingle in fp.shingles:
            for idx in self._postings.get(shingle, ()):
                shared[idx] = shared.get(idx, 0) + 1
        size, t = len(fp.shingles), self._threshold
        hits = (
            idx
            for idx, common in shared.items()
            if _similar(fp.length, self._lengths[idx], size, self._sizes[idx], common, t)
        )
        first = min(hits, default=None)
        return None if first is None else self._ids[first]

    def add(self, id: str, fp: Fingerprint) -> None:
        idx = len(self._ids)
        self._ids.append(id)
        self._lengths.append(fp.length)
        self._sizes.append(len(fp.shingles))
        self._by_key.setdefault(fp.key, idx)
        if self._threshold > 0:
            for shingle in fp.shingles:
                self._postings.setdefault(shingle, []).append(idx)


# --- steps --------------------------------------------------------------------------------


def dedupe_ids(items: Iterable[R]) -> tuple[list[R], list[Cut]]:
    kept: list[R] = []
    cuts: list[Cut] = []
    seen: set[str] = set()
    for item in items:
        mid = item.memory.id
        if mid in seen:
            cuts.append(Cut(mid, CutReason.DUPLICATE_ID))
        else:
            seen.add(mid)
            kept.append(item)
    return kept, cuts


def dedupe(
    items: Iterable[R],
    threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD,
    shingle_size: int = DEFAULT_SHINGLE_SIZE,
) -> tuple[list[R], list[Cut]]:
    """Drop repeated ids and near-identical content; the best-ranked copy stays."""
    unique, cuts = dedupe_ids(items)
    seen = NearDuplicates(threshold)
    kept: list[R] = []
    for item in unique:
        fp = fingerprint(item.memory.content, shingle_size)
        twin = seen.twin(fp)
        if twin is None:
            seen.add(item.memory.id, fp)
            kept.append(item)
        else:
            cuts.append(Cut(item.memory.id, CutReason.NEAR_DUPLICATE, twin))
    return kept, cuts


def adaptive_floor(
    items: Sequence[R],
    floor_ratio: float = DEFAULT_FLOOR_RATIO,
    max_gap: float = 0.0,
    min_keep: int = 1,
) -> tuple[list[R], list[Cut]]:
    """Cut what scores under ``floor_ratio × top``, and the tail after a drop > ``max_gap × top``.

    Relative to the top score so it works whatever the fusion's scale; a top ≤ 0 cuts
    nothing. The first ``min_keep`` items always stay.
    """
    top = max((i.score for i in items), default=0.0)
    if top <= 0 or (floor_ratio <= 0 and max_gap <= 0):
        return list(items), []
    kept: list[R] = []
    cuts: list[Cut] = []
    for pos, item in enumerate(items):
        if pos < min_keep:
            kept.append(item)
        elif max_gap > 0 and kept and kept[-1].score - item.score > max_gap * top:
            gap = f"{kept[-1].score - item.score:.4g} after {kept[-1].memory.id}"
            cuts += [Cut(i.memory.id, CutReason.SCORE_GAP, gap) for i in items[pos:]]
            break
        elif item.score < floor_ratio * top:
            cuts.append(Cut(item.memory.id, CutReason.BELOW_FLOOR, f"{item.score:.4g}"))
        else:
            kept.append(item)
    return kept, cuts


def diversify(
    items: Iterable[R], by: GroupBy | None, max_per_group: int = DEFAULT_MAX_PER_GROUP
) -> tuple[list[R], list[Cut]]:
    """At most ``max_per_group`` items per group key, best first; ungrouped items all stay."""
    if by is None:
        return list(items), []
    counts: dict[str, int] = {}
    kept: list[R] = []
    cuts: list[Cut] = []
    for item in items:
        key = by.key(item.memory)
        if key is not None and counts.get(key, 0) >= max_per_group:
            cuts.append(Cut(item.memory.id, CutReason.GROUP_FULL, key))
            continue
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
        kept.append(item)
    return kept, cuts


# --- token budget -------------------------------------------------------------------------


def estimate_tokens(text: str, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    """A tokenizer-free estimate of an LLM's token count, erring high.

    The larger of (a) ASCII characters / ``chars_per_token`` plus one per non-ASCII
    character (CJK and emoji run about a token or more per character) and (b) the number
    of words and ASCII punctuation marks (each is at least one token: "2024-01-01" is 5).
    On English prose both land near what BPE tokenizers give (~4 characters a token).
    """
    if not text:
        return 0
    data = text.encode("utf-8")
    ascii_chars = len(text.encode("ascii", "ignore"))
    by_chars = math.ceil(ascii_chars / chars_per_token + (len(text) - ascii_chars))
    pieces = len(data.translate(_TO_RUNS).split()) + len(data.translate(None, _NOT_PUNCTUATION))
    return max(by_chars, pieces)


def render_memory(memory: Memory) -> str:
    """One memory in a context: ``- [YYYY-MM-DD] content`` (the date helps temporal questions)."""
    return f"- [{memory.timestamp:%Y-%m-%d}] {memory.content.strip()}"


@dataclass(frozen=True, slots=True)
class Packed(Generic[R]):
    items: list[R]
    context: str
    tokens: int  # estimate_tokens(context) ≤ the budget
    cuts: list[Cut] = field(default_factory=list)
    truncated: str = ""  # id of the item whose text was shortened to fit, if any


def pack(
    items: Sequence[R],
    budget: int,
    *,
    render: Callable[[Memory], str] = render_memory,
    separator: str = "\n",
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
) -> Packed[R]:
    """Pack rendered items best-first into ``budget`` tokens.

    An item that does not fit is skipped and the next, smaller ones are tried (first fit in
    rank order). The best item is always included: shortened (ending in "…") when it alone
    exceeds the budget, so a small budget still gets the best memory rather than nothing.
    """

    def cost(text: str) -> int:
        return estimate_tokens(text, chars_per_token)

    sep_cost = cost(separator)
    pieces: list[str] = []
    kept: list[R] = []
    cuts: list[Cut] = []
    used = 0
    truncated = ""
    for item in items:
        text = render(item.memory)
        need = cost(text) + (sep_cost if pieces else 0)
        if used + need <= budget:
            pieces.append(text)
            kept.append(item)
            used += need
        elif not pieces and not cuts:
            short = _shorten(item.memory, budget, render, cost)
            if short is None:
                cuts.append(Cut(item.memory.id, CutReason.TOKEN_BUDGET, f"{cost(text)} tokens"))
            else:
                pieces.append(short)
                kept.append(item)
                used += cost(short)
                truncated = item.memory.id
        else:
            cuts.append(Cut(item.memory.id, CutReason.TOKEN_BUDGET, f"{need} tokens"))
    context = separator.join(pieces)
    # Per-piece estimates round up, so the whole costs no more than their sum (≤ budget).
    return Packed(kept, context, cost(context), cuts, truncated)


def _shorten(
    memory: Memory, budget: int, render: Callable[[Memory], str], cost: Callable[[str], int]
) -> str | None:
    """The longest rendering of a prefix of the content (+ "…") within budget, or None."""
    content = memory.content.strip()

    def rendered(n: int) -> str:
        return render(replace(memory, content=content[:n].rstrip() + ELLIPSIS))

    lo, hi = 0, len(content)
    if cost(rendered(0)) > budget:
        return None
    while lo < hi:  # the cost grows with n; find the largest n that fits
        mid = (lo + hi + 1) // 2
        if cost(rendered(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return rendered(lo)


# --- the whole step -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PostRankOptions:
    """Request fields (``limit``, ``min_score``, ``diversify_by``, ``max_per_group``,
    ``token_budget``) and settings (the rest); errors name the request field."""

    limit: int = 10
    min_score: float = 0.0
    diversify_by: str = ""
    max_per_group: int = DEFAULT_MAX_PER_GROUP
    token_budget: int = 0  # 0: no packing
    near_duplicate_threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD  # 0: exact words only
    near_duplicates: bool = True  # False: only duplicate ids are dropped, never content
    shingle_size: int = DEFAULT_SHINGLE_SIZE
    floor_ratio: float = DEFAULT_FLOOR_RATIO  # 0: off
    max_gap: float = 0.0  # 0: off
    min_keep: int = 1
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN
    group_by: GroupBy | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise InvalidArgument("limit", f"must be >= 1, got {self.limit}")
        if not (math.isfinite(self.min_score) and self.min_score >= 0):
            raise InvalidArgument("min_score", f"must be finite and >= 0, got {self.min_score!r}")
        if self.max_per_group < 1:
            raise InvalidArgument("max_per_group", f"must be >= 1, got {self.max_per_group}")
        if not 0 <= self.token_budget <= MAX_TOKEN_BUDGET:
            raise InvalidArgument(
                "token_budget", f"must be within 0..{MAX_TOKEN_BUDGET}, got {self.token_budget}"
            )
        _unit("near_duplicate_threshold", self.near_duplicate_threshold)
        _unit("floor_ratio", self.floor_ratio)
        _unit("max_gap", self.max_gap)
        for name in ("shingle_size", "min_keep"):
            if getattr(self, name) < 1:
                raise InvalidArgument(name, f"must be >= 1, got {getattr(self, name)}")
        if not (math.isfinite(self.chars_per_token) and self.chars_per_token > 0):
            raise InvalidArgument("chars_per_token", "must be finite and > 0")
        object.__setattr__(self, "group_by", parse_group_by(self.diversify_by))


def _unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise InvalidArgument(name, f"must be within [0, 1], got {value!r}")


@dataclass(frozen=True, slots=True)
class PostRanked(Generic[R]):
    results: list[R]
    cuts: list[Cut]
    context: str = ""  # with a token budget: the packed results
    tokens: int = 0

    def cut_counts(self) -> dict[str, int]:
        """How many items each reason cut (for the response / logs)."""
        out: dict[str, int] = {}
        for c in self.cuts:
            out[c.reason.value] = out.get(c.reason.value, 0) + 1
        return out


def postrank(items: Sequence[R], options: PostRankOptions) -> PostRanked[R]:
    """Every post-ranking step over ``items`` (best first); see the module docstring."""
    o = options
    unique, cuts = dedupe_ids(items)
    scored: list[R] = []
    for item in unique:
        if item.score < o.min_score:
            cuts.append(Cut(item.memory.id, CutReason.MIN_SCORE, f"{item.score:.4g}"))
        else:
            scored.append(item)
    floored, floor_cuts = adaptive_floor(scored, o.floor_ratio, o.max_gap, o.min_keep)
    cuts += floor_cuts

    # One pass: near-duplicates and full groups are checked only until the limit is met,
    # and only against the kept items.
    kept: list[R] = []
    seen = NearDuplicates(o.near_duplicate_threshold)
    groups: dict[str, int] = {}
    for pos, item in enumerate(floored):
        if len(kept) == o.limit:
            cuts += [Cut(i.memory.id, CutReason.LIMIT) for i in floored[pos:]]
            break
        fp = fingerprint(item.memory.content, o.shingle_size) if o.near_duplicates else None
        twin = seen.twin(fp) if fp is not None else None
        if twin is not None:
            cuts.append(Cut(item.memory.id, CutReason.NEAR_DUPLICATE, twin))
            continue
        key = o.group_by.key(item.memory) if o.group_by is not None else None
        if key is not None:
            if groups.get(key, 0) >= o.max_per_group:
                cuts.append(Cut(item.memory.id, CutReason.GROUP_FULL, key))
                continue
            groups[key] = groups.get(key, 0) + 1
        if fp is not None:
            seen.add(item.memory.id, fp)
        kept.append(item)
    if not o.token_budget:
        return PostRanked(kept, cuts)
    packed = pack(kept, o.token_budget, chars_per_token=o.chars_per_token)
    return PostRanked(packed.items, cuts + packed.cuts, packed.context, packed.tokens)


# --- tier escalation ----------------------------------------------------------------------


def escalated_pool(
    best_score: float | None,
    *,
    floor: float,
    pool: int,
    max_pool: int,
    saturated: bool = True,
    escalated: bool = False,
    score_scale: float = 1.0,
) -> int | None:
    """The pool for a second, wider round, or None to keep the answer.

    Widen once (``escalated`` says it already happened), doubling the pool up to
    ``max_pool``, when ``best_score / score_scale`` is below ``floor``, or when there is no
    result at all. ``score_scale`` 1 compares the raw fused score (weighted fusion); under
    RRF pass ``max_rrf_score(...)`` so the floor is a share of the best possible score.
    Only when some stream filled its pool (``saturated``): otherwise every match was already
    seen and a wider pool finds nothing new. ``floor`` 0 turns it off.
    """
    if escalated or floor <= 0 or not saturated or score_scale <= 0:
        return None
    if best_score is not None and best_score / score_scale >= floor:
        return None
    wider = min(2 * pool, max_pool)
    return wider if wider > pool else None


def max_rrf_score(stream_weights: Iterable[float], k: float) -> float:
    """RRF's best possible score: rank 1 in every stream, Σ w / (k + 1)."""
    return sum(w / (k + 1.0) for w in stream_weights)
