"""Scoring math for recall (DESIGN §4 step 4). Pure: no I/O, no clock, no randomness.

``rank`` turns merged candidates into an ordered, truncated list. Each candidate gets
every component in [0, 1] (``COMPONENTS``); ``Fusion.WEIGHTED`` sums weight × component,
``Fusion.RRF`` sums per-stream weight / (k + rank). Later signals (context bonus,
relevance gate, recency bias — issue #4) extend this module by adding a component to
``COMPONENTS`` with its weight in ``Weights``, or a post-step in ``rank``; the types stay.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from enum import Enum
from typing import Any

from engram_core.errors import InvalidArgument
from engram_core.model import Memory
from engram_core.tags import normalise_tag, tag_prefixes

STREAM_VECTOR = "vector"
STREAM_KEYWORD = "keyword"
STREAM_GRAPH = "graph"
STREAMS: tuple[str, ...] = (STREAM_VECTOR, STREAM_KEYWORD, STREAM_GRAPH)

DEFAULT_RRF_K = 60.0
DEFAULT_RECENCY_WINDOW_DAYS = 180.0
DEFAULT_RECENCY_HALF_LIFE_DAYS = 30.0
MIN_TOKEN_LENGTH = 3
_SECONDS_PER_DAY = 86_400.0
_TOKEN = re.compile(r"\w+")


class Fusion(Enum):
    WEIGHTED = "weighted"
    RRF = "rrf"


class RecencyMode(Enum):
    LINEAR = "linear"  # 1 at age 0, falling to 0 at the window's end
    HALF_LIFE = "half_life"  # 0.5 ** (age / half-life): never reaches 0


@dataclass(frozen=True, slots=True)
class Weights:
    """Weight per component (weighted fusion) and per stream (``rrf_*``, RRF fusion)."""

    vector: float = 0.35
    keyword: float = 0.35
    metadata: float = 0.35
    relation: float = 0.25
    tag: float = 0.20
    exact: float = 0.20
    recency: float = 0.10
    importance: float = 0.10
    confidence: float = 0.05
    relevance: float = 0.0
    # Off until the graph stream scores discriminate: on LoCoMo its entity matches tie
    # many turns (every turn naming the speaker), and at 0.25 hybrid turn R@10 fell
    # from 0.625 to 0.512 (make bench-quality, 2026-11-30).
    graph: float = 0.0
    rrf_vector: float = 1.0
    rrf_keyword: float = 1.0
    rrf_graph: float = 1.0

    def __post_init__(self) -> None:
        for name in self.names():
            _check_weight(name, getattr(self, name))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def get(self, name: str) -> float:
        value: float = getattr(self, name)
        return value

    def with_overrides(self, overrides: Mapping[str, float]) -> Weights:
        """A copy with some weights replaced; an unknown name or a bad value is refused."""
        known = set(self.names())
        for name, value in overrides.items():
            if name not in known:
                raise InvalidArgument(
                    "weights", f"unknown weight {name!r}; known: {', '.join(self.names())}"
                )
            _check_weight(name, value)
        return replace(self, **{k: float(v) for k, v in overrides.items()}) if overrides else self


def _check_weight(name: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument("weights", f"{name} must be finite and >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class StreamScore:
    """One retrieval stream's answer for a candidate: raw score and 1-based rank."""

    score: float
    rank: int


@dataclass(frozen=True, slots=True)
class Candidate:
    memory: Memory
    streams: Mapping[str, StreamScore] = field(default_factory=dict)
    relation: float = 0.0  # summed strength of relations to other candidates


@dataclass(frozen=True, slots=True)
class ScoredCandidate:
    memory: Memory
    score: float
    components: Mapping[str, float]
    streams: Mapping[str, StreamScore]


@dataclass(frozen=True, slots=True)
class Query:
    """What the components compare candidates against."""

    now: datetime
    text: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Params:
    """How to fuse: server defaults from settings, with per-request overrides applied."""

    fusion: Fusion = Fusion.WEIGHTED
    limit: int = 10
    weights: Weights = field(default_factory=Weights)
    recency_mode: RecencyMode = RecencyMode.LINEAR
    recency_window_days: float = DEFAULT_RECENCY_WINDOW_DAYS
    recency_half_life_days: float = DEFAULT_RECENCY_HALF_LIFE_DAYS
    rrf_k: float = DEFAULT_RRF_K

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise InvalidArgument("limit", f"must be >= 1, got {self.limit}")
        if not self.recency_window_days > 0:
            raise InvalidArgument("recency_window_days", "must be > 0")
        if not self.recency_half_life_days > 0:
            raise InvalidArgument("recency_half_life_days", "must be > 0")
        if not (math.isfinite(self.rrf_k) and self.rrf_k >= 0):
            raise InvalidArgument("rrf_k", "must be finite and >= 0")


@dataclass(frozen=True, slots=True)
class _Context:
    """Per-request values computed once, not once per candidate."""

    query: Query
    params: Params
    phrase: str  # normalised query text, "" when too short to count as an exact match
    tokens: frozenset[str]
    tags: tuple[str, ...]
    stream_max: Mapping[str, float]


def normalise_text(text: str) -> str:
    """Lower-case with runs of whitespace collapsed to one space."""
    return " ".join(text.lower().split())


def tokens(text: str) -> frozenset[str]:
    """Distinct lower-cased word tokens of at least ``MIN_TOKEN_LENGTH`` characters."""
    return frozenset(t for t in _TOKEN.findall(text.lower()) if len(t) >= MIN_TOKEN_LENGTH)


def _strings(value: Any) -> Iterator[str]:
    # Metadata is JSON: strings may sit inside lists or nested objects (e.g. participants).
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)


def _clamp(x: float) -> float:
    return 0.0 if not x > 0.0 else min(1.0, x)


def _normalised_stream(c: Candidate, ctx: _Context, stream: str) -> float:
    hit = c.streams.get(stream)
    top = ctx.stream_max.get(stream, 0.0)
    if hit is None or top <= 0.0:
        return 0.0
    return _clamp(hit.score / top)


def _vector(c: Candidate, ctx: _Context) -> float:
    # The score is a cosine similarity; a negative cosine means unrelated, so 0.
    hit = c.streams.get(STREAM_VECTOR)
    return 0.0 if hit is None else _clamp(hit.score)


def _keyword(c: Candidate, ctx: _Context) -> float:
    # BM25 is unbounded and query-dependent; only its ratio to the best candidate means much.
    return _normalised_stream(c, ctx, STREAM_KEYWORD)


def _graph(c: Candidate, ctx: _Context) -> float:
    return _normalised_stream(c, ctx, STREAM_GRAPH)


def _metadata(c: Candidate, ctx: _Context) -> float:
    if not ctx.tokens or not c.memory.metadata:
        return 0.0
    found = ctx.tokens & tokens(" ".join(_strings(c.memory.metadata)))
    return len(found) / len(ctx.tokens)


def _tag(c: Candidate, ctx: _Context) -> float:
    if not ctx.tags:
        return 0.0
    # tag_prefixes holds every tag and every prefix of it, so one lookup covers both.
    have = set(c.memory.tag_prefixes) or set(tag_prefixes(c.memory.tags))
    return sum(1 for t in ctx.tags if t in have) / len(ctx.tags)


def _exact(c: Candidate, ctx: _Context) -> float:
    return 1.0 if ctx.phrase and ctx.phrase in normalise_text(c.memory.content) else 0.0


def _recency(c: Candidate, ctx: _Context) -> float:
    age_days = max(0.0, (ctx.query.now - c.memory.timestamp).total_seconds() / _SECONDS_PER_DAY)
    p = ctx.params
    if p.recency_mode is RecencyMode.HALF_LIFE:
        return float(0.5 ** (age_days / p.recency_half_life_days))
    return max(0.0, 1.0 - age_days / p.recency_window_days)


def _importance(c: Candidate, ctx: _Context) -> float:
    return _clamp(c.memory.importance)


def _confidence(c: Candidate, ctx: _Context) -> float:
    return _clamp(c.memory.confidence)


def _relevance(c: Candidate, ctx: _Context) -> float:
    return _clamp(c.memory.relevance_score)


def _relation(c: Candidate, ctx: _Context) -> float:
    return _clamp(c.relation)


Component = Callable[[Candidate, _Context], float]

COMPONENTS: Mapping[str, Component] = {
    "vector": _vector,
    "keyword": _keyword,
    "graph": _graph,
    "metadata": _metadata,
    "tag": _tag,
    "exact": _exact,
    "recency": _recency,
    "importance": _importance,
    "confidence": _confidence,
    "relevance": _relevance,
    "relation": _relation,
}
"""Every component by name; each name is also the name of its weight in ``Weights``."""

RRF_WEIGHTS: Mapping[str, str] = {s: f"rrf_{s}" for s in STREAMS}
"""Stream name → name of its RRF weight in ``Weights``."""


def _context(candidates: Sequence[Candidate], query: Query, params: Params) -> _Context:
    stream_max: dict[str, float] = {}
    for c in candidates:
        for name, hit in c.streams.items():
            if hit.score > stream_max.get(name, 0.0):
                stream_max[name] = hit.score
    phrase = normalise_text(query.text)
    return _Context(
        query=query,
        params=params,
        phrase=phrase if len(phrase) >= MIN_TOKEN_LENGTH else "",
        tokens=tokens(query.text),
        tags=tuple(dict.fromkeys(normalise_tag(t) for t in query.tags if t.strip())),
        stream_max=stream_max,
    )


def _rrf(c: Candidate, params: Params) -> float:
    total = 0.0
    for stream, hit in c.streams.items():
        weight_name = RRF_WEIGHTS.get(stream)
        if weight_name is not None and hit.rank >= 1:
            total += params.weights.get(weight_name) / (params.rrf_k + hit.rank)
    return total


def rank(candidates: Sequence[Candidate], query: Query, params: Params) -> list[ScoredCandidate]:
    """Score every candidate and return the best ``params.limit``.

    Order: score descending, then timestamp descending (newer first), then id ascending,
    so equal inputs always give the same output.
    """
    ctx = _context(candidates, query, params)
    weights = [(name, params.weights.get(name)) for name in COMPONENTS]
    rrf = params.fusion is Fusion.RRF
    scored: list[ScoredCandidate] = []
    for c in candidates:
        components = {name: fn(c, ctx) for name, fn in COMPONENTS.items()}
        score = _rrf(c, params) if rrf else sum(w * components[name] for name, w in weights)
        scored.append(ScoredCandidate(c.memory, score, components, c.streams))
    return heapq.nsmallest(
        params.limit, scored, key=lambda s: (-s.score, -s.memory.timestamp.timestamp(), s.memory.id)
    )
