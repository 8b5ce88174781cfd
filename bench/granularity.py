"""Multi-granularity memory, measured in process: do units above the single memory pay?

Over the kept in-process stores of bench.quality_inprocess (same Reader, same profile),
every tenant's stored memories are read back (the vector store's scan), put in timeline
order (timestamp, then id) and cut into sittings where two memories lie more than an hour
apart (the context step's window). Derived from each sitting, as ingest would derive them:

- windows: every run of 2-4 consecutive memories, their contents joined;
- a digest: the sitting's ``DIGEST_TURNS`` memories nearest its embedding centroid, in
  timeline order, joined (extractive, chosen with the embedding model, no LLM).

The derived units are written as documents of their own into a second set of the
product's stores (vector and lexical, beside the memories' stores), each carrying its
members' ids. A question is asked of the Reader as `make bench-quality` asks it, and of
the derived stores: windows by vector and by BM25, digests by vector and by BM25. The
window hits credit their members (a member's rank is where it first appears walking the
hits), which join the pool; a digest hit credits the members of its sitting already in
the pool. Derived units never appear as results. Two ways of fusing are tried beside the
Reader's own ranking (``fused``: ``rrf`` on ranks, ``score`` on min-max scaled scores), with
a weight per stream from ``GRID``; the weights are chosen by leave-one-conversation-out
cross-validation (chosen on five conversations by turn R@10, scored on the sixth) within
each of ``FAMILIES``, and the CV figure is what counts (``fit``, chosen on all six, is the
in-sample ceiling).

    uv run python -m bench.granularity [locomo_dev.json] [--profile conversation|default]
        [--storage tagged|flat] [--embed-model M] [--rebuild] [--sizes 2,3,4] [--reuse]

The derived stores are kept under the memories' store (``derived-<sizes>``); the
embeddings of the derived texts in bench/results/granularity-embeddings-<model>.pickle;
what a run asked in bench/results/granularity-<profile>-<storage>-<sizes>.pickle, which
``--reuse`` reads again instead of asking (the selection alone).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import pickle
import shutil
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import LOCOMO, RESULTS, model_path
from bench.quality import KS, LIMIT, SESSION_K, Answer, Question, aggregate, load, table
from bench.quality_inprocess import (
    ask_all,
    build_reader,
    close_services,
    filled_store,
    open_filled,
    open_services,
)
from engram_core.ids import new_id
from engram_core.model import Filter, Hit, Memory, TagMatch
from engram_core.profiles import CONVERSATION, PROFILES, profile_named
from engram_core.tags import tag_prefixes
from engram_embed.factory import EmbedSettings, make_embedder
from engram_embed.paths import MODEL_NAME, MODELS
from engram_gateway.service.query import dense_query, rules_of

SITTING_GAP_S = 3600.0  # a longer silence starts a new sitting (the context window)
DIGEST_TURNS = 4
WINDOW_HITS = 40  # windows asked of each window stream
DIGEST_HITS = 5
RRF_K = 60.0
GRID = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)
STREAMS = ("win_vector", "win_keyword", "digest")
WINS = STREAMS[:2]  # the streams whose members join the pool
WINDOW_TAG = "derived:window"
DIGEST_TAG = "derived:digest"
MODE = "hybrid"


@dataclass(frozen=True, slots=True)
class Unit:
    """A derived document: what it says and whose it is."""

    kind: str  # WINDOW_TAG or DIGEST_TAG
    members: tuple[str, ...]  # memory ids, in timeline order
    content: str
    timestamp: datetime


@dataclass
class Asked:
    """One question's evidence: the Reader's ranking and the members each stream credits."""

    base: list[tuple[str, float]]  # (memory id, score), best first
    credit: dict[str, dict[str, tuple[int, float]]] = field(default_factory=dict)
    sitting: dict[int, int] = field(default_factory=dict)  # digest: sitting → its best rank


# --- deriving the units ----------------------------------------------------------------


def sittings(memories: Sequence[Memory], gap_s: float = SITTING_GAP_S) -> list[list[Memory]]:
    """``memories`` in timeline order, cut where two lie more than ``gap_s`` apart."""
    out: list[list[Memory]] = []
    for m in sorted(memories, key=lambda m: (m.timestamp, m.id)):
        if out and (m.timestamp - out[-1][-1].timestamp).total_seconds() <= gap_s:
            out[-1].append(m)
        else:
            out.append([m])
    return out


def windows(sitting: Sequence[Memory], sizes: Sequence[int]) -> list[Unit]:
    return [
        Unit(
            WINDOW_TAG,
            tuple(m.id for m in run),
            "\n".join(m.content for m in run),
            run[0].timestamp,
        )
        for size in sizes
        for i in range(len(sitting) - size + 1)
        for run in [sitting[i : i + size]]
    ]


def digest(sitting: Sequence[Memory], vectors: Mapping[str, Sequence[float]]) -> Unit:
    """The sitting's memories nearest its centroid, in timeline order."""
    vs = [_unit(vectors[m.content]) for m in sitting]
    centroid = _unit([sum(col) for col in zip(*vs, strict=True)])
    near = sorted(range(len(sitting)), key=lambda i: -_dot(vs[i], centroid))[:DIGEST_TURNS]
    chosen = [sitting[i] for i in sorted(near)]
    return Unit(
        DIGEST_TAG,
        tuple(m.id for m in sitting),
        "\n".join(m.content for m in chosen),
        sitting[0].timestamp,
    )


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def _unit(v: Sequence[float]) -> list[float]:
    n = math.sqrt(_dot(v, v)) or 1.0
    return [x / n for x in v]


async def stored(services: Mapping[str, Any], tenant: str) -> list[Memory]:
    """Every memory of ``tenant`` as the vector store holds it."""
    out: list[Memory] = []
    cursor: str | None = None
    while True:
        page = await services["vector"].scan_by_sequence(tenant, cursor, 500)
        out += page.memories
        cursor = page.next_cursor
        if cursor is None:
            return out


class Embeddings:
    """Texts embedded once across runs (the derived texts repeat across stores)."""

    def __init__(self, model: str) -> None:
        self._path = RESULTS / f"granularity-embeddings-{model}.pickle"
        self._kept: dict[str, list[float]] = (
            pickle.loads(self._path.read_bytes()) if self._path.exists() else {}
        )
        self.embedder = make_embedder(EmbedSettings(model_dir=model_path(model)))

    async def of(self, texts: Sequence[str]) -> dict[str, list[float]]:
        todo = list(dict.fromkeys(t for t in texts if t not in self._kept))
        for i in range(0, len(todo), 64):
            batch = todo[i : i + 64]
            for text, vector in zip(batch, await self.embedder.embed(batch), strict=True):
                self._kept[text] = list(vector)
        if todo:
            self._path.write_bytes(pickle.dumps(self._kept))
        return {t: self._kept[t] for t in texts}


async def derive(
    tenant: str, memories: Sequence[Memory], sizes: Sequence[int], emb: Embeddings
) -> list[Unit]:
    cut = sittings(memories)
    vectors = await emb.of([m.content for m in memories])
    units = [u for s in cut for u in windows(s, sizes)]
    return units + [digest(s, vectors) for s in cut if len(s) > 1]


async def write_units(
    derived: Mapping[str, Any], tenant: str, units: Sequence[Unit], emb: Embeddings
) -> dict[str, Unit]:
    """The units stored as documents of their own; by the id each was stored under."""
    vectors = await emb.of([u.content for u in units])
    by_id: dict[str, Unit] = {}
    docs: list[tuple[Memory, list[float]]] = []
    for u in units:
        tags = (f"{u.kind}:{len(u.members)}",)
        doc = Memory(
            id=new_id(),
            tenant=tenant,
            content=u.content,
            tags=tags,
            tag_prefixes=tag_prefixes(tags),
            metadata={"members": list(u.members)},
            timestamp=u.timestamp,
            embedding_model=emb.embedder.model_name,
        )
        by_id[doc.id] = u
        docs.append((doc, vectors[u.content]))
    for i in range(0, len(docs), 500):
        await derived["vector"].upsert(tenant, docs[i : i + 500])
        await derived["lexical"].upsert(tenant, [d for d, _ in docs[i : i + 500]])
    return by_id


# --- asking ----------------------------------------------------------------------------


def _kind(tag: str) -> Filter:
    return Filter(tags=(tag,), tag_match=TagMatch.PREFIX)


async def derived_hits(
    derived: Mapping[str, Any], tenant: str, text: str, dense: str
) -> dict[str, list[Hit]]:
    """The derived stores' four searches for one question, by stream."""
    v, lx = derived["vector"], derived["lexical"]
    win_v, win_k, dig_v, dig_k = await asyncio.gather(
        v.search(tenant, _kind(WINDOW_TAG), WINDOW_HITS, query=dense),
        lx.search(tenant, text, _kind(WINDOW_TAG), WINDOW_HITS),
        v.search(tenant, _kind(DIGEST_TAG), DIGEST_HITS, query=dense),
        lx.search(tenant, text, _kind(DIGEST_TAG), DIGEST_HITS),
    )
    return {"win_vector": win_v, "win_keyword": win_k, "dig_vector": dig_v, "dig_keyword": dig_k}


def member_credit(hits: Sequence[Hit], units: Mapping[str, Unit]) -> dict[str, tuple[int, float]]:
    """Member → (its rank: where it first appears walking the hits, its best window's
    score min-max scaled over the hits)."""
    if not hits:
        return {}
    top, low = max(h.score for h in hits), min(h.score for h in hits)
    span = top - low
    out: dict[str, tuple[int, float]] = {}
    for h in hits:
        scaled = (h.score - low) / span if span > 0 else 1.0
        for m in units[h.id].members:
            if m not in out:
                out[m] = (len(out) + 1, scaled)
    return out


def sitting_ranks(
    found: Mapping[str, list[Hit]], units: Mapping[str, Unit], sitting_of: Mapping[str, int]
) -> dict[int, int]:
    """Sitting → the digest rank it reached in either digest stream (RRF of the two)."""
    score: dict[int, float] = {}
    for name in ("dig_vector", "dig_keyword"):
        for r, h in enumerate(found[name], 1):
            s = sitting_of[units[h.id].members[0]]
            score[s] = score.get(s, 0.0) + 1.0 / (RRF_K + r)
    ordered = sorted(score, key=lambda s: -score[s])
    return {s: r for r, s in enumerate(ordered, 1)}


# --- fusing ----------------------------------------------------------------------------

Weights = tuple[float, float, float]  # by STREAMS


def fused(a: Asked, scheme: str, w: Weights, sitting_of: Mapping[str, int]) -> list[str]:
    """The top LIMIT ids with the derived streams credited; all weights 0 is the Reader's
    own ranking."""
    base_rank = {m: r for r, (m, _) in enumerate(a.base, 1)}
    if not any(w):
        return [m for m, _ in a.base[:LIMIT]]
    scores = [s for _, s in a.base]
    low, span = (min(scores), max(scores) - min(scores)) if scores else (0.0, 0.0)
    pool = dict.fromkeys(base_rank)
    for name, wt in zip(STREAMS[:2], w[:2], strict=True):
        if wt > 0:
            pool.update(dict.fromkeys(list(a.credit[name])[:LIMIT]))
    total: dict[str, float] = {}
    for m in pool:
        if scheme == "rrf":
            s = 1.0 / (RRF_K + base_rank[m]) if m in base_rank else 0.0
        else:
            s = (a.base[base_rank[m] - 1][1] - low) / span if m in base_rank and span else 0.0
        for name, wt in zip(STREAMS[:2], w[:2], strict=True):
            got = a.credit[name].get(m)
            if got and wt:
                s += wt * (1.0 / (RRF_K + got[0]) if scheme == "rrf" else got[1])
        dr = a.sitting.get(sitting_of.get(m, -1))
        if dr and w[2]:
            s += w[2] * (1.0 / (RRF_K + dr) if scheme == "rrf" else 1.0 / dr)
        total[m] = s
    far = len(base_rank) + 1
    return sorted(total, key=lambda m: (-total[m], base_rank.get(m, far)))[:LIMIT]


Combo = tuple[str, Weights]
BASELINE: Combo = ("rrf", (0.0, 0.0, 0.0))


def combos() -> list[Combo]:
    """The Reader's own ranking first (a tie keeps it), then every scheme and weight."""
    grid: list[Weights] = [
        (a, b, c) for a, b, c in itertools.product(GRID, GRID, GRID) if a or b or c
    ]
    return [BASELINE, *((s, w) for s in ("rrf", "score") for w in grid)]


# What the selection may choose from: fewer free weights overfit the five less.
FAMILIES: dict[str, Callable[[Weights], bool]] = {
    "all": lambda w: True,  # both window streams and the digest, each its own weight
    "windows": lambda w: w[2] == 0,  # no digest
    "tied": lambda w: w[0] == w[1] and w[2] == 0,  # one weight for both window streams
    "digest": lambda w: w[0] == w[1] == 0,  # the digest alone
}


def features(a: Asked, scheme: str, sitting_of: Mapping[str, int]) -> tuple[list[str], Any]:
    """The pool (the Reader's ranking, then each window stream's first LIMIT members) and
    per member its base value and one value per stream, as ``fused`` adds them."""
    pool = list(dict.fromkeys([m for m, _ in a.base]))
    for name in STREAMS[:2]:
        pool += [m for m in list(a.credit[name])[:LIMIT] if m not in set(pool)]
    rank = {m: r for r, (m, _) in enumerate(a.base, 1)}
    scores = [s for _, s in a.base]
    low, span = (min(scores), max(scores) - min(scores)) if scores else (0.0, 0.0)
    rows = []
    for m in pool:
        if scheme == "rrf":
            row = [1.0 / (RRF_K + rank[m]) if m in rank else 0.0]
            row += [
                1.0 / (RRF_K + a.credit[n][m][0]) if m in a.credit[n] else 0.0 for n in STREAMS[:2]
            ]
        else:
            row = [(a.base[rank[m] - 1][1] - low) / span if m in rank and span else 0.0]
            row += [a.credit[n][m][1] if m in a.credit[n] else 0.0 for n in WINS]
        dr = a.sitting.get(sitting_of.get(m, -1))
        row.append(0.0 if not dr else 1.0 / (RRF_K + dr) if scheme == "rrf" else 1.0 / dr)
        rows.append(row)
    return pool, np.array(rows, dtype=np.float64).reshape(len(pool), 1 + len(STREAMS))


def recall_matrix(
    questions: Sequence[Question],
    asked: Sequence[Asked],
    dia: Mapping[str, str],
    sitting_of: Mapping[str, int],
    every: Sequence[Combo],
) -> Any:
    """Turn R@10 of every question (rows) under every combo (columns), all combos of a
    question ranked at once; the pool order breaks ties as ``fused`` does."""
    out = np.zeros((len(questions), len(every)))
    for scheme in ("rrf", "score"):
        cols = [j for j, c in enumerate(every) if c[0] == scheme]
        w = np.array([[1.0, *every[j][1]] for j in cols]).T  # (1 + streams) × combos
        for i, (q, a) in enumerate(zip(questions, asked, strict=True)):
            pool, f = features(a, scheme, sitting_of)
            if not pool:
                continue
            order = np.argsort(-(f @ w), axis=0, kind="stable")[:10]
            gold = np.array([dia.get(m) in set(q.gold) for m in pool])
            out[i, cols] = gold[order].sum(axis=0) / len(set(q.gold))
    return out


def cross_validated(
    r10: Any, every: Sequence[Combo], convs: Sequence[str], family: str
) -> tuple[dict[str, Combo], Combo]:
    """Per held-out conversation, the combo of ``family`` best on the other five by turn
    R@10 (``r10``: questions × ``every``); and the one best on all six (in-sample, for
    reference). A tie keeps the earlier combo, so the Reader's own ranking unless
    something beats it."""
    cols = [j for j, c in enumerate(every) if FAMILIES[family](c[1])]
    held = np.array(convs)

    def best(keep: Any) -> Combo:
        return every[cols[int(np.argmax(r10[keep][:, cols].sum(axis=0)))]]

    chosen = {str(c): best(held != c) for c in sorted(set(convs))}
    return chosen, best(np.ones(len(convs), dtype=bool))


def answers_of(
    ranked: Sequence[Sequence[str]], dia: Mapping[str, str], name: str
) -> dict[tuple[int, str], Answer]:
    return {(i, name): Answer([dia.get(m) for m in r]) for i, r in enumerate(ranked)}


def _kept_units(store: Path, rebuild: bool) -> Path:
    """Where the units are kept; the store emptied first when they are not (or rebuilt)."""
    kept = store / "units.pickle"
    if rebuild or not kept.exists():
        shutil.rmtree(store, ignore_errors=True)
        store.mkdir(parents=True)
    return kept


async def prepare_derived(
    services: Mapping[str, Any],
    store: Path,
    tenants: Sequence[str],
    sizes: Sequence[int],
    model: str,
    rebuild: bool,
) -> tuple[dict[str, Any], dict[str, Unit]]:
    """The derived stores beside the memories' stores, filled when they are not."""
    kept = _kept_units(store, rebuild)
    derived = await open_services(store, model)
    if kept.exists():
        return derived, pickle.loads(kept.read_bytes())
    emb = Embeddings(model)
    units: dict[str, Unit] = {}
    started = time.perf_counter()
    for tenant in tenants:
        found = await derive(tenant, await stored(services, tenant), sizes, emb)
        units |= await write_units(derived, tenant, found, emb)
        print(f"  derived {tenant}: {len(found)} units ({time.perf_counter() - started:.0f}s)")
    kept.write_bytes(pickle.dumps(units))
    return derived, units


async def ask_derived(
    derived: Mapping[str, Any],
    questions: Sequence[Question],
    raw: Mapping[tuple[int, str], Any],
    units: Mapping[str, Unit],
    sitting_of: Mapping[str, int],
    profile: str,
) -> tuple[list[Asked], list[float]]:
    """Each question's Asked, and the derived searches' milliseconds per question."""
    drop = profile_named(profile).drop_names_from_dense_query
    rules = rules_of(profile)
    out: list[Asked] = []
    took: list[float] = []
    for i, q in enumerate(questions):
        base = [(r.memory.id, r.score) for r in raw[(i, MODE)].results]
        dense = dense_query(q.text, rules) if drop else q.text
        started = time.perf_counter()
        found = await derived_hits(derived, q.sample_id, q.text, dense)
        took.append((time.perf_counter() - started) * 1000)
        credit = {s: member_credit(found[s], units) for s in STREAMS[:2]}
        out.append(Asked(base, credit, sitting_ranks(found, units, sitting_of)))
    return out, took


def sittings_of(units: Mapping[str, Unit]) -> dict[str, int]:
    """Member → its sitting, numbered by digest."""
    out: dict[str, int] = {}
    for n, u in enumerate(u for u in units.values() if u.kind == DIGEST_TAG):
        out.update(dict.fromkeys(u.members, n))
    return out


@dataclass
class Evidence:
    """What a run asked, kept so the selection can be read again without the stores."""

    asked: list[Asked]
    dia: dict[str, str]  # memory id → dia_id, for the metrics only
    sitting_of: dict[str, int]
    reader_ms: list[float]
    derived_ms: list[float]
    derived_per_memory: float
    degraded: dict[str, int]  # the Reader's answers per stream or step that failed


async def gather(args: argparse.Namespace, sizes: Sequence[int]) -> Evidence:
    """The derived stores made (or reopened) and every question asked of both levels."""
    conversations, questions, _ = load(args.data)
    model = args.embed_model
    services = await open_filled(conversations, model, args.profile, args.storage)
    store = filled_store(model, args.profile, args.storage)
    where = store / f"derived-{'-'.join(map(str, sizes))}"
    tenants = [c.sample_id for c in conversations]
    derived, units = await prepare_derived(services, where, tenants, sizes, model, args.rebuild)
    try:
        dia = {
            m.id: str(m.metadata.get("dia_id")) for t in tenants for m in await stored(services, t)
        }
        reader = build_reader(services, profile=args.profile)
        answers, raw = await ask_all(reader, questions, [MODE])
        sitting_of = sittings_of(units)
        asked, took = await ask_derived(derived, questions, raw, units, sitting_of, args.profile)
    finally:
        await close_services(derived)
        await close_services(services)
    mine = [answers[(i, MODE)] for i in range(len(questions))]
    degraded = Counter(d for a in mine for d in a.degraded)
    per_memory = len(units) / max(1, len(dia))
    reader_ms = [a.query_ms for a in mine]
    return Evidence(asked, dia, sitting_of, reader_ms, took, per_memory, dict(degraded))


def analyse(questions: Sequence[Question], ev: Evidence, args: argparse.Namespace) -> None:
    """Every family's CV and in-sample figures beside the Reader's own, printed and kept."""
    every = combos()
    r10 = recall_matrix(questions, ev.asked, ev.dia, ev.sitting_of, every)
    convs = [q.sample_id for q in questions]
    base = [fused(a, *BASELINE, ev.sitting_of) for a in ev.asked]
    answers = answers_of(base, ev.dia, MODE)
    choices: dict[str, Any] = {}
    for family in FAMILIES:
        chosen, fit = cross_validated(r10, every, convs, family)
        cv = [fused(a, *chosen[c], ev.sitting_of) for a, c in zip(ev.asked, convs, strict=True)]
        answers |= answers_of(cv, ev.dia, f"cv:{family}")
        answers |= answers_of(
            [fused(a, *fit, ev.sitting_of) for a in ev.asked], ev.dia, f"fit:{family}"
        )
        choices[family] = {"held_out": chosen, "fit": fit}
        for conv, (scheme, w) in sorted(chosen.items()):
            print(f"  {family}: held out {conv}: {scheme} {w}")
        print(f"  {family}: in-sample best {fit[0]} {fit[1]}")
    modes = [MODE, *(f"cv:{f}" for f in FAMILIES), *(f"fit:{f}" for f in FAMILIES)]
    figures = aggregate(questions, answers, modes)
    print(table(figures))
    costs = {
        "derived_per_memory": ev.derived_per_memory,
        "reader_p50_ms": statistics.median(ev.reader_ms),
        "derived_searches_p50_ms": statistics.median(ev.derived_ms),
    }
    print("  cost: " + " ".join(f"{k}={v:.2f}" for k, v in costs.items()))
    print(f"  degraded answers of the Reader: {ev.degraded or 'none'}")
    out = {
        "args": vars(args) | {"data": str(args.data)},
        "choices": choices,
        "costs": costs,
        "degraded": ev.degraded,
    }
    (RESULTS / f"{_name(args)}.json").write_text(json.dumps(out | {"figures": figures}))
    for mode in modes:
        o = figures[mode]["overall"]
        print(
            f"{mode}: turn_r@10={o['r@10']:.3f} session_hit@{SESSION_K}="
            f"{o[f's_h@{SESSION_K}']:.3f} session_r@{SESSION_K}={o[f's_r@{SESSION_K}']:.3f} "
            f"r@{KS[1]}={o['r@5']:.3f} mrr={o['mrr']:.3f} profile={args.profile} "
            f"storage={args.storage}"
        )


def _name(args: argparse.Namespace) -> str:
    return f"granularity-{args.profile}-{args.storage}-{args.sizes.replace(',', '-')}"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=LOCOMO, help="locomo_dev.json")
    parser.add_argument("--profile", choices=sorted(PROFILES), default=CONVERSATION)
    parser.add_argument("--storage", choices=("tagged", "flat"), default="tagged")
    parser.add_argument("--embed-model", choices=MODELS, default=MODEL_NAME)
    parser.add_argument("--sizes", default="2,3,4", help="window sizes, comma-separated")
    parser.add_argument("--rebuild", action="store_true", help="derive the units again")
    parser.add_argument(
        "--reuse", action="store_true", help="read the last run's answers again, no stores"
    )
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    if not sizes or min(sizes) < 1:
        parser.error("--sizes: positive window sizes")
    args.sizes = ",".join(map(str, sizes))
    _, questions, _ = load(args.data)
    kept = RESULTS / f"{_name(args)}.pickle"
    if args.reuse and kept.exists():
        ev: Evidence = pickle.loads(kept.read_bytes())
    else:
        ev = await gather(args, sizes)
        kept.write_bytes(pickle.dumps(ev))
    analyse(questions, ev, args)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
