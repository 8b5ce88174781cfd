"""Pseudo-relevance feedback: the best candidates of the first search, taken as relevant,
ask the streams once more.

The lexical stream is asked for the words those candidates share (RM3: each word weighted
by its share of each document, times the document's weight), without the query's own
words; its hits add ``lexical_weight`` × their BM25 to the first search's. As both are sums
over disjoint terms, that is the BM25 of the query with the words added at a lower weight,
which the lexical service's query (one clause per distinct term) cannot say itself.

The vector stream is asked with the query followed by those candidates' text: the gateway
holds no vectors (memories come without them), so the centroid of the feedback documents
is approximated by embedding them with the query, and each memory's similarity becomes
``(1 - vector_weight)`` × the first cosine + ``vector_weight`` × the second (Rocchio in
score space).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engram_core.model import Hit
from engram_gateway.service.query import MIN_KEYWORD_LENGTH, STOPWORDS

_WORD = re.compile(r"[^\W\d_]+")
# Words sharing this many first letters count as one (a stemmer's reach, roughly): a
# query's "painting" keeps "paints" out of its own expansion.
_STEM = 5


@dataclass(frozen=True, slots=True)
class FeedbackConfig:
    default: bool = False  # run for every recall with text
    # The least costly of the settings measured; none paid on conversation turns.
    docs: int = 3  # first-search candidates taken as relevant
    terms: int = 5  # words asked of the lexical stream; 0: no lexical feedback
    lexical_weight: float = 0.15  # of the expansion's BM25, added to the first
    vector_weight: float = 0.0  # of the feedback cosine in the mix; 0: no vector feedback
    vector_chars: int = 400  # of each feedback document embedded after the query


def _stem(word: str) -> str:
    return word[:_STEM]


def words_of(text: str) -> list[str]:
    """Lower-cased words of at least MIN_KEYWORD_LENGTH letters that are not stopwords."""
    found = _WORD.findall(text.lower())
    return [w for w in found if len(w) >= MIN_KEYWORD_LENGTH and w not in STOPWORDS]


def expansion_terms(
    query: str, documents: Sequence[str], weights: Sequence[float], n: int
) -> list[str]:
    """The ``n`` words of ``documents`` the RM3 relevance model weighs most, without the
    query's words; ties go to the word seen first. ``weights`` are the documents' (any
    scale, one each)."""
    if n <= 0 or not documents:
        return []
    own = {_stem(w) for w in words_of(query)}
    total = sum(weights) or 1.0
    model: dict[str, float] = {}
    for text, weight in zip(documents, weights, strict=True):
        words = [w for w in words_of(text) if _stem(w) not in own]
        if not words:
            continue
        share = weight / total / len(words)
        for w in words:
            model[w] = model.get(w, 0.0) + share
    best: dict[str, str] = {}  # one word per stem: the heaviest spelling
    for word in sorted(model, key=lambda w: -model[w]):  # stable: ties keep first seen
        best.setdefault(_stem(word), word)
    return list(best.values())[:n]


def feedback_text(dense: str, documents: Sequence[str], chars: int) -> str:
    """What the vector stream embeds for feedback: the query first (an embedder that
    truncates keeps it), then the start of each document."""
    return "\n".join([dense, *(d[:chars] for d in documents)])


def added(first: Sequence[Hit], second: Sequence[Hit], weight: float, limit: int) -> list[Hit]:
    """Scores that add up (BM25 over disjoint terms): ``first + weight × second``, a
    memory missing from one list scoring 0 there."""
    extra = {h.id: h.score for h in second}
    mixed = {h.id: h.score + weight * extra.get(h.id, 0.0) for h in first}
    for h in second:
        mixed.setdefault(h.id, weight * h.score)
    return _ranked(first, second, mixed, limit)


def blended(first: Sequence[Hit], second: Sequence[Hit], weight: float, limit: int) -> list[Hit]:
    """Similarities that mix (cosines): ``(1 - weight) × first + weight × second``; a
    memory missing from one list has, there, the lowest score that list holds (it was
    below its cut)."""
    if not first or not second:
        return list(first or second)[:limit]
    low1, low2 = min(h.score for h in first), min(h.score for h in second)
    one = {h.id: h.score for h in first}
    two = {h.id: h.score for h in second}
    ids = dict.fromkeys([*one, *two])
    mixed = {i: (1 - weight) * one.get(i, low1) + weight * two.get(i, low2) for i in ids}
    return _ranked(first, second, mixed, limit)


def _ranked(
    first: Sequence[Hit], second: Sequence[Hit], scores: dict[str, float], limit: int
) -> list[Hit]:
    hits: dict[str, Hit] = {}
    for h in [*first, *second]:
        kept = hits.get(h.id)
        if kept is None or (kept.memory is None and h.memory is not None):
            hits[h.id] = h
    order = sorted(scores, key=lambda i: -scores[i])  # stable: ties keep first-list order
    return [replace(hits[i], score=scores[i]) for i in order[:limit]]
