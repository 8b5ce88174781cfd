"""Gateway settings swept in process, each chosen by leave-one-conversation-out CV.

Opens the stores bench.quality_inprocess filled (run it once first with the same
``--profile``/``--storage``) and asks every question of one gateway per point of the grid,
the points side by side question after question, so their recall times share the
machine's load. The first point is always the settings as they are (the baseline).

Cross-validation: for each conversation, the point with the best turn R@10 (then MRR) on
the other conversations is scored on it; the CV figure pools those held-out answers, so
no conversation is scored with a point chosen on it.

    uv run python -m bench.sweep DATA --grid feedback.docs=3,5 --grid feedback.terms=5,10
        [--set feedback.default=true] [--mode hybrid|hybrid_rerank] [--profile default]
        [--storage flat] [--out answers.json]

``--set`` applies to every point but the baseline; ``--grid`` values multiply.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import LOCOMO
from bench.quality import RERANK_MODE, STORAGES, Answer, Question, load, metrics
from bench.quality_inprocess import (
    MODE_OF,
    build_reader,
    close_services,
    dia_ids,
    filled_store,
    open_services,
)
from engram_core.profiles import CONVERSATION, PROFILES
from engram_embed.paths import MODEL_NAME
from engram_gateway.service import Deadline, RecallRequest

Point = dict[str, Any]  # dotted setting -> value
REPORTED = ("r@10", "s_h@5", "s_r@5", "mrr")


def _value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse(pairs: Sequence[str]) -> list[tuple[str, list[Any]]]:
    out = []
    for pair in pairs:
        key, _, values = pair.partition("=")
        if not values:
            raise SystemExit(f"expected setting=value[,value…], got {pair!r}")
        out.append((key, [_value(v) for v in values.split(",")]))
    return out


def points(fixed: Sequence[str], grid: Sequence[str]) -> list[Point]:
    base = {k: v[0] for k, v in parse(fixed)}
    axes = parse(grid)
    combos = itertools.product(*(values for _, values in axes))
    return [{}, *({**base, **dict(zip([k for k, _ in axes], c, strict=True))} for c in combos)]


def nested(point: Point) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in point.items():
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def label(point: Point) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items()) or "baseline"


def means(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {m: statistics.fmean(r[m] for r in rows) if rows else 0.0 for m in REPORTED}


def cross_validated(
    questions: Sequence[Question], scores: Sequence[Sequence[Mapping[str, float]]]
) -> tuple[dict[str, float], dict[str, int]]:
    """``scores[p][i]``: point p's metrics on question i. The pooled held-out metrics, and
    the point chosen per held-out conversation."""
    convs = sorted({q.sample_id for q in questions})
    held: list[Mapping[str, float]] = []
    chosen: dict[str, int] = {}
    for conv in convs:
        train = [i for i, q in enumerate(questions) if q.sample_id != conv]
        test = [i for i, q in enumerate(questions) if q.sample_id == conv]

        def fit(p: int, train: list[int] = train) -> tuple[float, float]:
            m = means([scores[p][i] for i in train])
            return (round(m["r@10"], 6), round(m["mrr"], 6))

        best = max(range(len(scores)), key=fit)  # ties: the earlier point (baseline first)
        chosen[conv] = best
        held.extend(scores[best][i] for i in test)
    return means(held), chosen


async def ask(
    readers: Sequence[Any], questions: Sequence[Question], mode: str
) -> list[list[Answer]]:
    out: list[list[Answer]] = [[] for _ in readers]
    started = time.perf_counter()
    for n, q in enumerate(questions):
        # Alternate the order, so no point always runs first (colder) or last.
        order = list(enumerate(readers))
        for p, reader in order if n % 2 == 0 else order[::-1]:
            req = RecallRequest(
                query=q.text,
                limit=20,
                mode=MODE_OF[mode],
                rerank=True if mode == RERANK_MODE else None,
            )
            result = await reader.recall(q.sample_id, req, Deadline.within(60.0))
            out[p].append(Answer(dia_ids(result), result.query_ms, result.degraded))

        if (n + 1) % 200 == 0:
            print(f"  asked {n + 1}/{len(questions)} ({time.perf_counter() - started:.0f}s)")
    return out


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=LOCOMO)
    parser.add_argument("--grid", action="append", default=[], help="setting=v1,v2,…")
    parser.add_argument("--set", action="append", default=[], help="setting=value (not base)")
    parser.add_argument("--mode", choices=sorted(MODE_OF), default="hybrid")
    parser.add_argument("--profile", choices=sorted(PROFILES), default=CONVERSATION)
    parser.add_argument("--storage", choices=STORAGES, default="tagged")
    parser.add_argument("--out", type=Path, default=None, help="per-point figures as JSON")
    parser.add_argument("--every", type=int, default=1, help="ask every n-th question (smoke)")
    parser.add_argument(
        "--store", type=Path, default=None, help="a copy of the filled stores (one process each)"
    )
    args = parser.parse_args()
    store = args.store or filled_store(MODEL_NAME, args.profile, args.storage)
    if not (store / "filled").exists():
        raise SystemExit(f"{store} is not filled: run bench.quality_inprocess with these flags")
    grid = points(args.set, args.grid)
    _, questions, _ = load(args.data)
    questions = questions[:: args.every]
    services = await open_services(store, MODEL_NAME)
    try:
        rerank = args.mode == RERANK_MODE
        readers = [build_reader(services, rerank, args.profile, overrides=nested(p)) for p in grid]
        answers = await ask(readers, questions, args.mode)
    finally:
        await close_services(services)
    scores = [
        [metrics(a.ranked, q.gold) for a, q in zip(per, questions, strict=True)] for per in answers
    ]
    report = []
    for p, point in enumerate(grid):
        m = means(scores[p])
        p50 = statistics.median(a.query_ms for a in answers[p])
        degraded = sum(bool(a.degraded) for a in answers[p])
        by_cat = {
            c: means([scores[p][i] for i, q in enumerate(questions) if q.category == c])
            for c in sorted({q.category for q in questions})
        }
        report.append(
            {"point": point, **m, "p50_ms": p50, "degraded": degraded, "by_category": by_cat}
        )
        cells = " ".join(f"{k}={m[k]:.3f}" for k in REPORTED)
        cats = " ".join(f"c{c}={v['r@10']:.3f}" for c, v in by_cat.items())
        print(f"{label(point):<70} {cells} p50_ms={p50:.0f} degraded={degraded} r@10 {cats}")
    cv, chosen = cross_validated(questions, scores)
    where = f"mode={args.mode} profile={args.profile} storage={args.storage}"
    for conv, p in chosen.items():
        print(f"  fold {conv}: {label(grid[p])}")
    base = report[0]
    print(
        "cv "
        + " ".join(f"{k}={cv[k]:.3f}" for k in REPORTED)
        + " | baseline "
        + " ".join(f"{k}={base[k]:.3f}" for k in REPORTED)
        + f" questions={len(questions)} {where}"
    )
    if args.out:
        args.out.write_text(json.dumps({"points": report, "cv": cv, "chosen": chosen}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
