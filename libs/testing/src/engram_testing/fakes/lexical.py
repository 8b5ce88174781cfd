"""An in-memory `TextIndex` for unit tests: BM25 over crude word stems, same filter semantics."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise

from engram_core.filters import matches
from engram_core.model import Filter, Hit, Memory, UpsertResult
from engram_core.ordering import Sort, best
from engram_core.search_text import METADATA_FIELDS, PHRASE_BOOST, document_text, word_pairs
from engram_testing.fakes.common import FakeStore

_WORD = re.compile(r"[^\W_]+")
_K1 = 1.2
_B = 0.75


def _stem(word: str) -> str:
    """A few English suffix rules: enough for "running" ~ "runs", not a real stemmer."""
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def tokens(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower()) if len(w) <= 40]


class FakeTextIndex(FakeStore[None]):
    """BM25 over what it holds. Set ``failure`` to make every call raise it (a backend down)."""

    metadata_fields: tuple[str, ...] = METADATA_FIELDS

    async def upsert(self, tenant: str, memories: Sequence[Memory]) -> UpsertResult:
        self._check()
        applied = self._write(tenant, [(m, None) for m in memories])
        return UpsertResult(applied=len(applied), skipped=len(memories) - len(applied))

    async def search(self, tenant: str, query: str, flt: Filter, limit: int) -> list[Hit]:
        self._check()
        terms = set(tokens(query))
        texts = [
            (m, tokens(" ".join(document_text(m, self.metadata_fields))))
            for m, _ in self._all_live(tenant)
        ]
        docs = [(m, Counter(words)) for m, words in texts]
        if not terms or not docs or limit <= 0:
            return []
        phrases = [
            (p, q) for a, b in word_pairs(query) if len(p := tokens(a)) == len(q := tokens(b)) == 1
        ]
        adjacent = {m.id: set(pairwise(words)) for m, words in texts}
        avg_len = sum(sum(tf.values()) for _, tf in docs) / len(docs) or 1.0
        df = Counter(term for _, tf in docs for term in terms if term in tf)
        hits: list[Hit] = []
        for m, tf in docs:
            if not matches(m, flt):
                continue
            length = sum(tf.values())
            score = 0.0
            for term in terms & tf.keys():
                idf = math.log(1 + (len(docs) - df[term] + 0.5) / (df[term] + 0.5))
                norm = tf[term] + _K1 * (1 - _B + _B * length / avg_len)
                score += idf * tf[term] * (_K1 + 1) / norm
            # The phrase boost: each query word pair found adjacent, as its two terms' BM25.
            score *= 1.0 + PHRASE_BOOST * sum(
                (p[0], q[0]) in adjacent[m.id] for p, q in phrases
            ) / max(1, len(terms))
            if score > 0:
                hits.append(Hit(id=m.id, score=score, memory=m))
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[:limit]

    async def top(self, tenant: str, flt: Filter, sort: Sort, limit: int) -> list[Memory]:
        self._check()
        return best((m for m, _ in self._all_live(tenant)), flt, sort, limit)
