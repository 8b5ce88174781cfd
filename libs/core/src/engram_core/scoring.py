"""Scoring math for recall (DESIGN §4 step 4). Pure: no I/O, no clock, no randomness.

``rank`` turns merged candidates into an ordered, truncated list. Each candidate gets
every component (``COMPONENTS``), each in [0, 1] except the standard-scored streams, which
are only floored at 0; ``Fusion.WEIGHTED`` sums weight × component,
``Fusion.RRF`` sums per-stream weight / (k + rank). Then one post-step, the same for both
fusions: a candidate whose timeline neighbours (``Candidate.neighbours``, found by the
gateway) scored well gains ``context`` — in a conversation the answer is often the turn
right after the one that matches the question.

The stream components (vector, keyword, graph) are normalised over the candidate set
(``Normalisation``): by default each stream's scores become standard scores, so a stream
whose scores bunch together (cosines of 0.3-0.5) weighs as much as one that spreads
(BM25 of 2-20). Measured on LoCoMo (bench/quality.py) — see services/scoring/README.md.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from engram_core.errors import InvalidArgument
from engram_core.model import Memory
from engram_core.tags import normalise_tag, tag_prefixes
from engram_core.written_dates import WrittenDate, dates_in

STREAM_VECTOR = "vector"
STREAM_KEYWORD = "keyword"
STREAM_GRAPH = "graph"
STREAMS: tuple[str, ...] = (STREAM_VECTOR, STREAM_KEYWORD, STREAM_GRAPH)

# The Memory fields ranking reads. A caller that ranks over the wire (the gateway) sends
# only these; a test holds every other field to changing no score.
SCORED_FIELDS = frozenset(
    {
        "id",
        "content",
        "type",
        "tags",
        "tag_prefixes",
        "importance",
        "confidence",
        "metadata",
        "timestamp",
        "relevance_score",
    }
)

DEFAULT_RRF_K = 60.0
DEFAULT_RECENCY_WINDOW_DAYS = 180.0
DEFAULT_RECENCY_HALF_LIFE_DAYS = 30.0
DEFAULT_TIME_HALF_LIFE_DAYS = 3.0
DEFAULT_CONTEXT_DECAY = 0.5
# Standard scores map linearly onto 0.5 + z / Z_SPAN, floored at 0 (z = -Z_SPAN/2).
Z_SPAN = 6.0
MIN_TOKEN_LENGTH = 3
_SECONDS_PER_DAY = 86_400.0
_TOKEN = re.compile(r"\w+")


class Fusion(Enum):
    WEIGHTED = "weighted"
    RRF = "rrf"


class Normalisation(Enum):
    """How a stream's raw scores become its component, over the candidate set."""

    # vector: the cosine clamped to [0, 1]; keyword and graph: score / best score.
    RAW = "raw"
    # Every stream: 0.5 + z / Z_SPAN floored at 0, z the standard score among the
    # candidates the stream returned; a candidate it did not return gets the stream's
    # lowest value (it ranked below all of them). When the returned scores do not spread
    # (one hit, or all equal) each hit is the stream's best, 1, and the others get 0.
    ZSCORE = "zscore"


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
    # The query names a client tag's last part (no request tags needed).
    label: float = 0.3
    exact: float = 0.20
    recency: float = 0.10
    importance: float = 0.10
    confidence: float = 0.05
    relevance: float = 0.0
    # Off until the graph stream scores discriminate: in a conversation its entity
    # matches tie many turns (every turn naming the speaker), and weighted like the
    # other streams it pushed the right turns down (services/scoring/README.md).
    graph: float = 0.0
    # A date the query names ("on 8 May, 2023", "in March 2024") and the memory's timestamp.
    time: float = 0.3
    # Post-step: this × the best timeline neighbour's (decayed) lead over the lowest score.
    context: float = 0.4
    # The request's focus (what the agent is working on): flat bonuses, 0 without a focus.
    focus_tag: float = 0.45
    focus_type: float = 0.25
    focus_keyword: float = 0.2
    focus_id: float = 0.9
    # With recency bias on: this × the candidate's place in time among the comparable
    # matches × its match as a share of the best (`_bias_by_match`).
    recency_bias: float = 0.2
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
    # Other candidates next to this one on the tenant's timeline: id → distance (1 = the
    # memory right before or after). Feeds the ``context`` post-step.
    neighbours: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScoredCandidate:
    memory: Memory
    score: float
    components: Mapping[str, float]
    streams: Mapping[str, StreamScore]


class RecencyBias(Enum):
    """Whether newer candidates about the question gain ``recency_bias`` (`_bias_by_match`):
    never, always, or when the query asks for the latest."""

    OFF = "off"
    ON = "on"
    AUTO = "auto"


@dataclass(frozen=True, slots=True)
class Focus:
    """What the agent is working on, from the request: memories matching it gain flat
    bonuses (``focus_*`` weights), and with ``pinned`` they come before the rest."""

    tags: tuple[str, ...] = ()  # carried exactly or as a prefix (normalised like tags)
    types: tuple[str, ...] = ()  # the memory's type, case-insensitive
    keywords: tuple[str, ...] = ()  # a language or other word, in metadata values or tags
    ids: tuple[str, ...] = ()  # priority memories
    pinned: bool = False

    def __bool__(self) -> bool:
        return bool(self.tags or self.types or self.keywords or self.ids)


@dataclass(frozen=True, slots=True)
class Query:
    """What the components compare candidates against."""

    now: datetime
    text: str = ""
    tags: tuple[str, ...] = ()
    focus: Focus = field(default_factory=Focus)
    recency_bias: RecencyBias | None = None  # None: Params.recency_bias


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
    normalisation: Normalisation = Normalisation.ZSCORE
    time_half_life_days: float = DEFAULT_TIME_HALF_LIFE_DAYS
    context_decay: float = DEFAULT_CONTEXT_DECAY  # per step of distance beyond the first
    # A candidate whose best topical component is below this has its query-independent
    # components (recency, importance, confidence, relevance) scaled by evidence / gate.
    relevance_gate: float = 0.0  # 0 = off
    recency_bias: RecencyBias = RecencyBias.AUTO

    def __post_init__(self) -> None:
        if not 0.0 <= self.relevance_gate <= 1.0:
            raise InvalidArgument("relevance_gate", "must be within [0, 1]")
        if self.limit < 1:
            raise InvalidArgument("limit", f"must be >= 1, got {self.limit}")
        if not self.time_half_life_days > 0:
            raise InvalidArgument("time_half_life_days", "must be > 0")
        if not 0.0 <= self.context_decay <= 1.0:
            raise InvalidArgument("context_decay", "must be within [0, 1]")
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
    streams: Mapping[str, _StreamStats]
    periods: tuple[tuple[datetime, datetime], ...]  # dates the query names, [start, end)
    focus_tags: frozenset[str]  # normalised like tags
    focus_types: frozenset[str]  # lower-cased
    focus_keywords: frozenset[str]  # lower-cased
    biased: bool  # recency bias on for this query


@dataclass(frozen=True, slots=True)
class _StreamStats:
    """One stream's scores over the candidates that carry it."""

    top: float
    low: float
    mean: float
    std: float


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


def _zscore(score: float, st: _StreamStats) -> float:
    if st.std <= 0.0:  # one candidate, or all equal: each is the stream's best
        return 1.0
    # Floored at 0 but not capped at 1: a match standing out by more than Z_SPAN/2
    # deviations (BM25's rare-term hits) keeps its lead instead of tying with the merely
    # good ones. At most 0.5 + sqrt(n - 1) / Z_SPAN for n candidates.
    return max(0.0, 0.5 + (score - st.mean) / (Z_SPAN * st.std))


def _normalised_stream(c: Candidate, ctx: _Context, stream: str) -> float:
    hit = c.streams.get(stream)
    st = ctx.streams.get(stream)
    if st is None:
        return 0.0
    if ctx.params.normalisation is Normalisation.ZSCORE:
        if hit is None:  # the lowest value, unless that is also the best
            return 0.0 if st.std <= 0.0 else _zscore(st.low, st)
        return _zscore(hit.score, st)
    if hit is None or st.top <= 0.0:
        return 0.0
    return _clamp(hit.score / st.top)


def _vector(c: Candidate, ctx: _Context) -> float:
    if ctx.params.normalisation is Normalisation.ZSCORE:
        return _normalised_stream(c, ctx, STREAM_VECTOR)
    # The score is a cosine similarity; a negative cosine means unrelated, so 0.
    hit = c.streams.get(STREAM_VECTOR)
    return 0.0 if hit is None else _clamp(hit.score)


def _keyword(c: Candidate, ctx: _Context) -> float:
    # BM25 is unbounded and query-dependent; only its place among the candidates means much.
    return _normalised_stream(c, ctx, STREAM_KEYWORD)


def _graph(c: Candidate, ctx: _Context) -> float:
    return _normalised_stream(c, ctx, STREAM_GRAPH)


def _metadata(c: Candidate, ctx: _Context) -> float:
    if not ctx.tokens or not c.memory.metadata:
        return 0.0
    found = ctx.tokens & _metadata_words(c)
    return len(found) / len(ctx.tokens)


def _metadata_words(c: Candidate) -> frozenset[str]:
    return tokens(" ".join(_strings(c.memory.metadata)))


def _carried_tags(c: Candidate) -> set[str]:
    """Every tag the memory carries and every prefix of one (``tag_prefixes``)."""
    return set(c.memory.tag_prefixes) or set(tag_prefixes(c.memory.tags))


def _tag(c: Candidate, ctx: _Context) -> float:
    if not ctx.tags:
        return 0.0
    # tag_prefixes holds every tag and every prefix of it, so one lookup covers both.
    have = _carried_tags(c)
    return sum(1 for t in ctx.tags if t in have) / len(ctx.tags)


ENTITY_TAG_PREFIX = "entity:"


def _label(c: Candidate, ctx: _Context) -> float:
    """1 when the query names the last part of one of the client's own tags: "Sarah" and
    ``person:sarah``, "alpha" and ``project:alpha``. Entity tags are the extractor's, not
    the client's (the graph stream covers them): a memory that mentions Sarah is tagged
    ``entity:people:sarah`` while one tagged ``person:sarah`` is about her."""
    if not ctx.tokens:
        return 0.0
    for tag in c.memory.tags:
        leaf = _leaf_tokens(tag)
        if leaf and leaf <= ctx.tokens:
            return 1.0
    return 0.0


@functools.lru_cache(maxsize=65536)
def _leaf_tokens(tag: str) -> frozenset[str]:
    """The words of a client tag's last part (none for an entity tag). Tags repeat across
    memories (``speaker:caroline`` on every turn she spoke), so cached."""
    if tag.startswith(ENTITY_TAG_PREFIX):
        return frozenset()
    return tokens(tag.rsplit(":", 1)[-1].replace("-", " "))


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


def _time(c: Candidate, ctx: _Context) -> float:
    """1 inside a period the query names, halving every ``time_half_life_days`` outside."""
    best = 0.0
    ts = c.memory.timestamp
    for start, end in ctx.periods:
        if start <= ts < end:
            return 1.0
        gap = (start - ts) if ts < start else (ts - end)
        days = gap.total_seconds() / _SECONDS_PER_DAY
        best = max(best, 0.5 ** (days / ctx.params.time_half_life_days))
    return best


def _focus_tag(c: Candidate, ctx: _Context) -> float:
    if not ctx.focus_tags:
        return 0.0
    return 1.0 if ctx.focus_tags & _carried_tags(c) else 0.0


def _focus_type(c: Candidate, ctx: _Context) -> float:
    return 1.0 if c.memory.type.lower() in ctx.focus_types else 0.0


def _focus_keyword(c: Candidate, ctx: _Context) -> float:
    """1 when a focus keyword ("python") is a word of a metadata value or a tag part."""
    words = ctx.focus_keywords
    if not words:
        return 0.0
    parts = {p for t in c.memory.tags for p in t.replace("/", ":").split(":")}
    found = _metadata_words(c) | parts
    return 1.0 if any(w in found for w in words) else 0.0


def _focus_id(c: Candidate, ctx: _Context) -> float:
    return 1.0 if c.memory.id in ctx.query.focus.ids else 0.0


RECENCY_BIAS = "recency_bias"


def _recency_bias(c: Candidate, ctx: _Context) -> float:
    """0 here: with the bias on, ``rank`` sets it from every candidate's match
    (`_bias_by_match`)."""
    return 0.0


Component = Callable[[Candidate, _Context], float]

COMPONENTS: Mapping[str, Component] = {
    "vector": _vector,
    "keyword": _keyword,
    "graph": _graph,
    "metadata": _metadata,
    "tag": _tag,
    "label": _label,
    "exact": _exact,
    "recency": _recency,
    "importance": _importance,
    "confidence": _confidence,
    "relevance": _relevance,
    "relation": _relation,
    "time": _time,
    "focus_tag": _focus_tag,
    "focus_type": _focus_type,
    "focus_keyword": _focus_keyword,
    "focus_id": _focus_id,
    "recency_bias": _recency_bias,
}
"""Every component by name; each name is also the name of its weight in ``Weights``."""

TOPICAL: tuple[str, ...] = ("vector", "keyword", "graph", "metadata", "label", "exact", "time")
"""Components that measure how well a candidate matches the query text: the relevance
gate's evidence (not ``tag``: a recall scoped by tags gives it to every candidate)."""

_EVIDENCE = (*TOPICAL, "tag", "relation")

QUERY_INDEPENDENT: tuple[str, ...] = ("recency", "importance", "confidence", "relevance")
"""Components a memory has whatever the query: the relevance gate scales these."""

_LATEST = re.compile(
    r"\b(latest|newest|most recent(ly)?|recently|current(ly)?|now|nowadays|these days|"
    r"up to date|so far|lately)\b",
    re.IGNORECASE,
)


def asks_for_latest(text: str) -> bool:
    """Whether the query asks for the newest state of things ("what is the latest…",
    "where does she live now"): recency bias ``auto`` turns on for these."""
    return _LATEST.search(text) is not None


CONTEXT = "context"
"""The post-step's component (and weight) name: not in ``COMPONENTS``, as it needs every
other candidate's score first."""

RRF_WEIGHTS: Mapping[str, str] = {s: f"rrf_{s}" for s in STREAMS}
"""Stream name → name of its RRF weight in ``Weights``."""


def _stream_stats(candidates: Sequence[Candidate]) -> dict[str, _StreamStats]:
    scores: dict[str, list[float]] = {}
    for c in candidates:
        for name, hit in c.streams.items():
            scores.setdefault(name, []).append(hit.score)
    return {name: _stats_of(v) for name, v in scores.items()}


def _stats_of(v: Sequence[float]) -> _StreamStats:
    # Floats throughout: statistics.pstdev is exact through Fractions on Python 3.11, ten
    # times slower, and ran for every stream of every ranking (twice per recall).
    mean = math.fsum(v) / len(v)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in v) / len(v))
    return _StreamStats(top=max(v), low=min(v), mean=mean, std=std)


def _context(candidates: Sequence[Candidate], query: Query, params: Params) -> _Context:
    phrase = normalise_text(query.text)
    periods = mentioned_periods(query.text)
    return _Context(
        query=query,
        params=params,
        phrase=phrase if len(phrase) >= MIN_TOKEN_LENGTH else "",
        tokens=tokens(query.text),
        tags=tuple(dict.fromkeys(normalise_tag(t) for t in query.tags if t.strip())),
        streams=_stream_stats(candidates),
        periods=periods,
        focus_tags=frozenset(normalise_tag(t) for t in query.focus.tags if t.strip()),
        focus_types=frozenset(t.lower() for t in query.focus.types),
        focus_keywords=frozenset(k.lower() for k in query.focus.keywords),
        biased=_biased(query, params, bool(periods)),
    )


def _biased(query: Query, params: Params, dated: bool) -> bool:
    """ON always; AUTO when the query asks for the latest and names no date ("what did
    she watch recently, on 6 October?" is recent to that day: the time component's job)."""
    bias = query.recency_bias or params.recency_bias
    if bias is RecencyBias.AUTO:
        return not dated and asks_for_latest(query.text)
    return bias is RecencyBias.ON


def _gated(components: dict[str, float], gate: float) -> dict[str, float]:
    """The relevance gate: with weak topical evidence, the query-independent components
    (a recent, important memory about something else) count only in proportion."""
    if gate <= 0.0:
        return components
    evidence = min(1.0, max(components[n] for n in TOPICAL))
    if evidence >= gate:
        return components
    factor = evidence / gate
    return {n: v * factor if n in QUERY_INDEPENDENT else v for n, v in components.items()}


def _pinned(s: ScoredCandidate, focus: Focus) -> bool:
    return focus.pinned and any(s.components.get(f"focus_{p}", 0.0) > 0.0 for p in _FOCUS)


_FOCUS = ("tag", "type", "keyword", "id")


def pinned_first(results: Sequence[ScoredCandidate], focus: Focus) -> list[ScoredCandidate]:
    """``results`` with those matching a pinned focus moved to the front, each group in its
    own order: steps that reorder after scoring (a rerank) keep the pin."""
    if not (focus.pinned and focus):
        return list(results)
    return sorted(results, key=lambda s: not _pinned(s, focus))


def _rrf(c: Candidate, params: Params) -> float:
    total = 0.0
    for stream, hit in c.streams.items():
        weight_name = RRF_WEIGHTS.get(stream)
        if weight_name is not None and hit.rank >= 1:
            total += params.weights.get(weight_name) / (params.rrf_k + hit.rank)
    return total


def rank(candidates: Sequence[Candidate], query: Query, params: Params) -> list[ScoredCandidate]:
    """Score every candidate and return the best ``params.limit``.

    Order: with a pinned focus, the candidates matching it first; then score descending,
    timestamp descending (newer first) and id ascending, so equal inputs always give the
    same output.
    """
    ctx = _context(candidates, query, params)
    weights = [(name, params.weights.get(name)) for name in COMPONENTS]
    rrf = params.fusion is Fusion.RRF
    every = [{name: fn(c, ctx) for name, fn in COMPONENTS.items()} for c in candidates]
    if ctx.biased:
        every = _bias_by_match(candidates, every, params)
    scored: list[ScoredCandidate] = []
    for c, found in zip(candidates, every, strict=True):
        components = _gated(found, params.relevance_gate)
        score = _rrf(c, params) if rrf else sum(w * components[name] for name, w in weights)
        scored.append(ScoredCandidate(c.memory, score, components, c.streams))
    scored = _with_context(candidates, scored, params)
    return heapq.nsmallest(
        params.limit,
        scored,
        key=lambda s: (
            not _pinned(s, query.focus),
            -s.score,
            -s.memory.timestamp.timestamp(),
            s.memory.id,
        ),
    )


def _with_context(
    candidates: Sequence[Candidate], scored: list[ScoredCandidate], params: Params
) -> list[ScoredCandidate]:
    """Let each candidate borrow from its best timeline neighbour.

    ``context`` = the neighbour's lead over the set's lowest score — of the score its match
    with the query earned (`_evidence`), so a neighbour does not lend its recency or
    importance — as a share of the best lead, times ``context_decay`` per step of distance
    beyond the first; in [0, 1]. The score gains weight × context × the best lead, i.e.
    weight × the neighbour's (decayed) lead: the same whatever the fusion's scale (weighted
    sums near 1, RRF sums near 0.03), and a neighbour that is merely present, at the
    bottom, lends nothing.
    """
    weight = params.weights.get(CONTEXT)
    base = _evidence(scored, params)
    floor = min(base.values(), default=0.0)
    span = max(base.values(), default=0.0) - floor
    out: list[ScoredCandidate] = []
    for c, s in zip(candidates, scored, strict=True):
        best = 0.0
        if span > 0.0:
            for other, distance in c.neighbours.items():
                score = base.get(other)
                if score is not None and distance >= 1 and other != c.memory.id:
                    lead = (score - floor) / span
                    best = max(best, lead * params.context_decay ** (distance - 1))
        value = _clamp(best)
        total = s.score + weight * span * value
        out.append(ScoredCandidate(s.memory, total, {**s.components, CONTEXT: value}, s.streams))
    return out


def _evidence(scored: Sequence[ScoredCandidate], params: Params) -> dict[str, float]:
    """Id → the part of its weighted score that measures the match with the query
    (`TOPICAL`, ``tag`` and ``relation``); an RRF score is all match."""
    if params.fusion is Fusion.RRF:
        return {s.memory.id: s.score for s in scored}
    match = _matcher(params)
    return {s.memory.id: match(s.components) for s in scored}


def _matcher(params: Params) -> Callable[[Mapping[str, float]], float]:
    """The weighted sum of a candidate's evidence components (weights looked up once)."""
    weighted = [(n, params.weights.get(n)) for n in _EVIDENCE]
    return lambda components: sum(w * components[n] for n, w in weighted)


def _bias_by_match(
    candidates: Sequence[Candidate], every: list[dict[str, float]], params: Params
) -> list[dict[str, float]]:
    """The recency bias: a candidate's timestamp min-max normalised over the comparable
    matches (at least half the best match with the query), clamped to [0, 1], times its
    match as a share of the best — the newest of the memories about the question wins,
    not the newest memory about anything."""
    match = _matcher(params)
    matches = [match(c) for c in every]
    best = max(matches, default=0.0)
    if best <= 0.0:
        return every
    stamps = [c.memory.timestamp.timestamp() for c in candidates]
    comparable = [t for t, m in zip(stamps, matches, strict=True) if m >= best / 2]
    oldest, newest = min(comparable), max(comparable)
    out = []
    for c, t, m in zip(every, stamps, matches, strict=True):
        if newest <= oldest:  # the comparable matches share one instant
            place = 1.0 if t >= newest else 0.0
        else:
            place = _clamp((t - oldest) / (newest - oldest))
        out.append({**c, RECENCY_BIAS: place * max(0.0, m) / best})
    return out


# --- dates named in the query text ------------------------------------------------------

MAX_PERIODS = 8


def _period(d: WrittenDate) -> tuple[datetime, datetime]:
    """A written date as the UTC period [start, end) it covers."""
    if d.month is None:
        return datetime(d.year, 1, 1, tzinfo=UTC), datetime(d.year + 1, 1, 1, tzinfo=UTC)
    if d.day is None:
        start = datetime(d.year, d.month, 1, tzinfo=UTC)
        return start, datetime(d.year + d.month // 12, d.month % 12 + 1, 1, tzinfo=UTC)
    start = datetime(d.year, d.month, d.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def mentioned_periods(text: str) -> tuple[tuple[datetime, datetime], ...]:
    """Calendar dates, months and years written in ``text`` as UTC periods [start, end).

    The most specific form wins a stretch of text ("8 May, 2023" is that day, not May nor
    2023). Relative phrases ("last week") are the request's ``time_query``, not this.
    """
    # Not the year 9999: its periods would end past the calendar's last day.
    periods = (_period(d) for d in dates_in(text) if d.year < datetime.max.year)
    return tuple(dict.fromkeys(periods))[:MAX_PERIODS]
