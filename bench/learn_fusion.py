"""Learned fusion: a logistic model over each candidate's ranking features, cross-validated.

Every dev question is asked in process (bench.quality_inprocess's stores and Reader); the
scoring call of each recall is recorded with its whole candidate pool, and every candidate
gets its features (`features_of`: every component, ``context``, the hand-set score, 1 / each
stream's rank) and a label: is it a gold turn. Then leave-one-conversation-out
cross-validation: for each conversation, a model trained on the other five ranks its pool,
against the hand-set order of the same pool. ``--write`` writes the model fitted on all six
as JSON (bias and a weight per feature, standardisation folded in) to read what it learned.

    uv run python -m bench.learn_fusion [data] [--profile conversation] [--storage tagged]
        [--model pairwise|logistic|gbdt] [--products] [--depth 50] [--recollect]
        [--write model.json]

The pool is kept in bench/results/fusion-pool-<profile>-<storage>.pickle until
``--recollect`` (needed after a change to retrieval or the components).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import pickle
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from bench.common import LOCOMO, RESULTS
from bench.quality import LIMIT, SESSION_K, Question, load, metrics
from bench.quality_inprocess import LocalRanker, build_reader, close_services, open_filled
from engram_core.profiles import CONVERSATION, PROFILES
from engram_core.scoring import COMPONENTS, CONTEXT, STREAMS, ScoredCandidate
from engram_embed.paths import MODEL_NAME
from engram_gateway.service import Deadline, RecallMode, RecallRequest

FEATURES = (*COMPONENTS, CONTEXT, "handset", *(f"rr_{s}" for s in STREAMS))
PRODUCT = "*"
SHOWN = ("r@10", f"s_h@{SESSION_K}", f"s_r@{SESSION_K}", "mrr")
C = 1.0  # the logistic model's inverse regularisation, fixed (never chosen on a test fold)
DEPTH = 50  # trained on each question's hand-set top this many: the ones it must reorder


class Recorder:
    """The gateway's RankerPort: ranks the whole pool once, keeps it, answers its top."""

    def __init__(self, inner: LocalRanker) -> None:
        self._inner = inner
        self._most = inner._ranker.limits.max_limit
        self.pool: list[ScoredCandidate] = []

    async def rank(
        self,
        query: str,
        candidates: Sequence[Any],
        fusion: Any,
        limit: int,
        query_tags: Sequence[str],
        **given: Any,
    ) -> list[Any]:
        every = min(max(len(candidates), 1), self._most)
        self.pool = await self._inner.rank(query, candidates, fusion, every, query_tags, **given)
        return self.pool[:limit]


@dataclass(frozen=True, slots=True)
class Pool:
    """One question's candidates in hand-set order: features, labels, dia_ids."""

    sample_id: str
    gold: tuple[str, ...]
    dia_ids: list[str | None]
    x: np.ndarray  # candidates × base features
    reader: list[str | None]  # the Reader's answer, for a check against bench.quality
    degraded: tuple[str, ...]  # stages that failed (a loaded machine): not comparable


async def collect(data: Path, profile: str, storage: str) -> tuple[list[str], list[Pool]]:
    conversations, questions, _ = load(data)
    services = await open_filled(conversations, MODEL_NAME, profile, storage)
    recorders: list[Recorder] = []

    def wrap(local: LocalRanker) -> Recorder:
        recorders.append(Recorder(local))
        return recorders[-1]

    names = list(FEATURES)
    pools: list[Pool] = []
    try:
        reader = build_reader(services, profile=profile, ranker=wrap)
        for i, q in enumerate(questions):
            req = RecallRequest(query=q.text, limit=LIMIT, mode=RecallMode.HYBRID)
            result = await reader.recall(q.sample_id, req, Deadline.within(60.0))
            pools.append(_pool(q, recorders[0].pool, result, names))
            if (i + 1) % 200 == 0:
                print(f"  asked {i + 1}/{len(questions)}", flush=True)
    finally:
        await close_services(services)
    return names, pools


def _pool(q: Question, ranked: Sequence[ScoredCandidate], result: Any, names: list[str]) -> Pool:
    rows = [features_of(s) for s in ranked]
    x = np.array([[r[n] for n in names] for r in rows], dtype=np.float64).reshape(len(rows), -1)
    reader = [r.memory.metadata.get("dia_id") for r in result.results]
    dia_ids = [_dia(s) for s in ranked]
    return Pool(q.sample_id, q.gold, dia_ids, x, reader, tuple(result.degraded))


def features_of(s: ScoredCandidate) -> dict[str, float]:
    """What the model reads of a ranked candidate: every component (``context`` with them),
    ``handset`` (the hand-set score) and ``rr_<stream>`` (1 / the stream's rank, 0 when it
    did not return the candidate)."""
    out = {name: s.components.get(name, 0.0) for name in (*COMPONENTS, CONTEXT)}
    out["handset"] = s.score
    for name in STREAMS:
        hit = s.streams.get(name)
        out[f"rr_{name}"] = 1.0 / hit.rank if hit is not None and hit.rank >= 1 else 0.0
    return out


def _dia(s: ScoredCandidate) -> str | None:
    d = s.memory.metadata.get("dia_id")
    return d if isinstance(d, str) else None


# --- the models --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Design:
    """Which columns a model reads: base features that vary, and their pairwise products."""

    base: list[int]
    pairs: list[tuple[int, int]]

    def matrix(self, x: np.ndarray) -> np.ndarray:
        cols = [x[:, i] for i in self.base] + [x[:, i] * x[:, j] for i, j in self.pairs]
        return np.column_stack(cols) if cols else np.zeros((len(x), 0))

    def names(self, names: Sequence[str]) -> list[str]:
        products = [f"{names[i]}{PRODUCT}{names[j]}" for i, j in self.pairs]
        return [names[i] for i in self.base] + products


def design(x: np.ndarray, products: bool, off: frozenset[int] = frozenset()) -> Design:
    """The columns that vary in training, less ``off`` (what the profile turns off)."""
    base = [i for i in range(x.shape[1]) if np.std(x[:, i]) > 1e-9 and i not in off]
    pairs = list(itertools.combinations(base, 2)) if products else []
    return Design(base, pairs)


def _labels(pools: Sequence[Pool]) -> np.ndarray:
    return np.concatenate([[d in p.gold for d in p.dia_ids] for p in pools]).astype(int)


def _top(pools: Sequence[Pool], depth: int) -> list[Pool]:
    """Each pool cut to its hand-set top ``depth``: what the model must reorder."""
    return [replace(p, dia_ids=p.dia_ids[:depth], x=p.x[:depth]) for p in pools]


def _pairs(pools: Sequence[Pool], d: Design) -> tuple[np.ndarray, np.ndarray]:
    """Differences gold − other within each question, both ways round (label 1 and 0)."""
    diffs = []
    for p in pools:
        m = d.matrix(p.x)
        gold = np.array([i in p.gold for i in p.dia_ids])
        if gold.any() and (~gold).any():
            diffs.append((m[gold][:, None, :] - m[~gold][None, :, :]).reshape(-1, m.shape[1]))
    x = np.vstack(diffs)
    return np.vstack([x, -x]), np.concatenate([np.ones(len(x)), np.zeros(len(x))])


def fit(
    pools: Sequence[Pool],
    kind: str,
    products: bool,
    depth: int = DEPTH,
    off: frozenset[int] = frozenset(),
) -> Any:
    pools = _top(pools, depth)
    x = np.vstack([p.x for p in pools])
    y = _labels(pools)
    d = design(x, products, off)
    if kind == "gbdt":
        trees = HistGradientBoostingClassifier(
            max_iter=200, learning_rate=0.05, max_leaf_nodes=15, random_state=0
        )
        return d, None, trees.fit(d.matrix(x), y)
    scaler = StandardScaler().fit(d.matrix(x))
    if kind == "pairwise":
        scaler.mean_ = np.zeros_like(scaler.mean_)  # differences: centring means nothing
        px, py = _pairs(pools, d)
        ranking = LogisticRegression(C=C, max_iter=5000, fit_intercept=False)
        return d, scaler, ranking.fit(px / scaler.scale_, py)
    model = LogisticRegression(C=C, max_iter=5000)
    return d, scaler, model.fit(scaler.transform(d.matrix(x)), y)


def predict(fitted: Any, x: np.ndarray) -> np.ndarray:
    d, scaler, model = fitted
    m = d.matrix(x)
    p: np.ndarray = model.predict_proba(scaler.transform(m) if scaler else m)[:, 1]
    return p


def learned_order(fitted: Any, pool: Pool) -> list[str | None]:
    if not len(pool.x):
        return []
    p = predict(fitted, pool.x)
    # Ties keep the hand-set order (a stable sort of the hand-set ranking).
    return [pool.dia_ids[i] for i in np.argsort(-p, kind="stable")]


def as_json(fitted: Any, names: Sequence[str], about: str) -> dict[str, Any]:
    """The logistic model with its standardisation folded in: weights of raw features."""
    d, scaler, model = fitted
    coef = model.coef_[0] / scaler.scale_
    bias = float(model.intercept_[0] - np.sum(coef * scaler.mean_))
    weights = {n: round(float(w), 6) for n, w in zip(d.names(names), coef, strict=True) if w}
    return {"about": about, "bias": round(bias, 6), "weights": weights}


def turned_off(names: Sequence[str], profile: str) -> frozenset[int]:
    """Features whose weight the profile sets to 0: signals it deems noise for its memories
    (``default``: speaker labels, timeline context), so no model of it may read them."""
    zero = {n for n, w in PROFILES[profile].weight_overrides.items() if w == 0}
    return frozenset(i for i, n in enumerate(names) if n in zero)


# --- cross-validation --------------------------------------------------------------------


def scores(orders: Sequence[Sequence[str | None]], pools: Sequence[Pool]) -> dict[str, float]:
    rows = [metrics(list(o[:LIMIT]), p.gold) for o, p in zip(orders, pools, strict=True)]
    return {m: sum(r[m] for r in rows) / len(rows) for m in SHOWN}


def cross_validate(
    pools: Sequence[Pool], kind: str, products: bool, depth: int, off: frozenset[int]
) -> None:
    convs = list(dict.fromkeys(p.sample_id for p in pools))
    handset: list[list[str | None]] = []
    learned: list[list[str | None]] = []
    held: list[Pool] = []
    print(f"{'fold':<10} {'n':>4} {'order':<8} " + " ".join(f"{m:>7}" for m in SHOWN))
    for conv in convs:
        test = [p for p in pools if p.sample_id == conv]
        fitted = fit([p for p in pools if p.sample_id != conv], kind, products, depth, off)
        h = [p.dia_ids for p in test]
        ll = [learned_order(fitted, p) for p in test]
        _row(conv, test, "handset", scores(h, test))
        _row(conv, test, "learned", scores(ll, test))
        handset += h
        learned += ll
        held += test
    _row("overall", held, "handset", scores(handset, held))
    _row("overall", held, "learned", scores(learned, held))
    # The Reader's own answer, after the steps that follow scoring: should be the hand-set.
    _row("overall", held, "reader", scores([p.reader for p in held], held))
    _compare(handset, learned, held)
    degraded = sum(bool(p.degraded) for p in held)
    print(f"questions with a degraded recall: {degraded}")


def _compare(
    handset: Sequence[Sequence[str | None]],
    learned: Sequence[Sequence[str | None]],
    pools: Sequence[Pool],
) -> None:
    """Questions whose turn R@10 the learned order raised or lowered: a gain made of a
    few questions either way is noise."""
    up = down = 0
    for h, ll, p in zip(handset, learned, pools, strict=True):
        diff = metrics(list(ll[:LIMIT]), p.gold)["r@10"] - metrics(list(h[:LIMIT]), p.gold)["r@10"]
        up += diff > 0
        down += diff < 0
    print(f"turn R@10 per question, learned against hand-set: {up} up, {down} down")


def _row(fold: str, pools: Sequence[Pool], order: str, s: dict[str, float]) -> None:
    print(f"{fold:<10} {len(pools):>4} {order:<8} " + " ".join(f"{s[m]:>7.3f}" for m in SHOWN))


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=LOCOMO, help="locomo_dev.json")
    parser.add_argument("--profile", choices=sorted(PROFILES), default=CONVERSATION)
    parser.add_argument("--storage", choices=("tagged", "flat"), default="tagged")
    parser.add_argument(
        "--model",
        choices=("pairwise", "logistic", "gbdt"),
        default="pairwise",
        help="pairwise: logistic on gold − other differences within a question (a ranking "
        "loss); logistic: on each candidate; gbdt: scikit-learn's boosted trees (not written)",
    )
    parser.add_argument("--products", action="store_true", help="and every product of two")
    parser.add_argument("--depth", type=int, default=DEPTH, help="train on each hand-set top N")
    parser.add_argument("--recollect", action="store_true", help="ask every question again")
    parser.add_argument("--write", type=Path, default=None, help="the model fitted on all, here")
    args = parser.parse_args()
    cache = RESULTS / f"fusion-pool-{args.profile}-{args.storage}.pickle"
    if args.recollect or not cache.exists():
        print(f"collecting the pools ({args.profile}, {args.storage}) ...", flush=True)
        collected = await collect(args.data, args.profile, args.storage)
        cache.write_bytes(pickle.dumps(collected))
    names, pools = pickle.loads(cache.read_bytes())
    products = args.products
    print(f"{args.model} products={products} profile={args.profile} storage={args.storage}")
    off = turned_off(names, args.profile)
    left_out = ", ".join(names[i] for i in sorted(off)) or "none"
    print(f"left out (the profile turns them off): {left_out}")
    cross_validate(pools, args.model, products, args.depth, off)
    if args.write:
        if args.model == "gbdt":
            parser.error("only a logistic model is written (a bias and a weight per feature)")
        about = (
            f"{args.model} logistic, C={C}, products={products}, hand-set top {args.depth}, "
            f"{len(pools)} questions of {args.data.name} ({args.profile} profile, "
            f"{args.storage} storage): python -m bench.learn_fusion"
        )
        fitted = fit(pools, args.model, products, args.depth, off)
        args.write.write_text(json.dumps(as_json(fitted, names, about), indent=1) + "\n")
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
