"""BENCHMARKS.md's "plain BM25" reference, recomputed with this bench's metrics.

Okapi BM25 (k1 1.2, b 0.75) over each turn's content as `make bench-quality` stores it,
lower-cased word tokens less a short English stopword list, one index per conversation;
no server, no model. It shows which reading of "session recall@5" the reference figures
use (README, Retrieval quality): this gives the reference turn R@10 (0.574) and, read as
session hit@5 (`s_h@5`), 0.860 against the reference's 0.862; read as the share of gold
sessions (`s_r@5`), 0.785.

    uv run python -m bench.reference_bm25 [locomo_dev.json]
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench.common import LOCOMO
from bench.quality import SESSION_K, Answer, aggregate, load, table

MODE = "bm25"
_WORD = re.compile(r"\w+")
_STOPWORDS = frozenset(
    _WORD.findall(
        """a an the and or but if of at by for with about to from in on is are was were be been
        being do does did have has had i you he she it we they me him her them my your his its
        our their what which who whom this that these those am will would should can could not
        no so than too very just how when where why all any both each few more most other some
        such only own same s t don now"""
    )
)


def tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


class Okapi:
    """BM25 over a fixed list of documents."""

    def __init__(self, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self._tfs = [Counter(tokens(d)) for d in docs]
        self._lens = [sum(tf.values()) for tf in self._tfs]
        self._avg = sum(self._lens) / max(len(docs), 1)
        df = Counter(w for tf in self._tfs for w in tf)
        n = len(docs)
        self._idf = {w: math.log((n - f + 0.5) / (f + 0.5) + 1) for w, f in df.items()}
        self._k1, self._b = k1, b

    def ranked(self, query: str, limit: int) -> list[int]:
        words = [w for w in tokens(query) if w in self._idf]
        scores: list[tuple[float, int]] = []
        for i, (tf, length) in enumerate(zip(self._tfs, self._lens, strict=True)):
            norm = self._k1 * (1 - self._b + self._b * length / self._avg)
            s = (self._idf[w] * tf[w] * (self._k1 + 1) / (tf[w] + norm) for w in words if w in tf)
            scores.append((sum(s), i))
        scores.sort(key=lambda p: -p[0])
        return [i for _, i in scores[:limit]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("data", nargs="?", type=Path, default=LOCOMO, help="locomo_dev.json")
    args = parser.parse_args(argv)
    conversations, questions, _ = load(args.data)
    indexes = {c.sample_id: (c.turns, Okapi([t.content for t in c.turns])) for c in conversations}
    answers: dict[tuple[int, str], Answer] = {}
    for i, q in enumerate(questions):
        turns, index = indexes[q.sample_id]
        answers[(i, MODE)] = Answer([turns[j].dia_id for j in index.ranked(q.text, 20)])
    report = aggregate(questions, answers, (MODE,))
    print(table(report))
    o = report[MODE]["overall"]
    print(
        f"reference_bm25 turn_r@10={o['r@10']:.3f} session_r@{SESSION_K}="
        f"{o[f's_r@{SESSION_K}']:.3f} session_hit@{SESSION_K}={o[f's_h@{SESSION_K}']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
