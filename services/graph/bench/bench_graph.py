"""Write rate and read latency of the ladybug graph store, as the graph service uses it.

Synthetic tenant: N memories with 3 entities each (drawn from N/5 entities, skewed so a few are
popular), and 2 typed relations per memory between random memories (mean degree 4). The
database lives on disk in a temporary directory, as in production.

    uv run python services/graph/bench/bench_graph.py [--memories 10000] [--queries 300]

Prints: upsert rate (batches of 100, new memories), re-upsert rate (newer versions whose
entities change), add_relations rate (batches of 500), and p50/p99 of related at depth 1/2/3,
search by entity keys, by keywords and with a tag filter, and get of 20 ids.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from engram_core.model import Entity, Filter, Memory, Relation, TagMatch
from engram_core.tags import tag_prefixes
from engram_graph.adapters.ladybug_store import LadybugGraphStore

TENANT = "bench"
BASE = datetime(2024, 1, 1, tzinfo=UTC)
KINDS = ("people", "tools", "projects", "concepts", "organizations", "places")
# Entity names and tags are drawn from the NATO alphabet.
NATO = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
)
WORDS = tuple(NATO.split())
TYPES = ("RELATES_TO", "LEADS_TO", "PART_OF", "DERIVED_FROM", "SIMILAR_TO")


def entities(n: int, rng: random.Random) -> list[Entity]:
    out = []
    for i in range(n):
        name = f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()} {i}"
        out.append(Entity(KINDS[i % len(KINDS)], f"e{i}", name))
    return out


def memory(i: int, version: int, rng: random.Random) -> Memory:
    tags = (f"project:{rng.choice(WORDS)}", f"topic:{rng.choice(WORDS)}")
    return Memory(
        id=f"m{i:07d}",
        tenant=TENANT,
        content=f"memory {i} " + " ".join(rng.choices(WORDS, k=30)),
        type=rng.choice(("Memory", "Decision", "Insight")),
        tags=tags,
        tag_prefixes=tag_prefixes(tags),
        metadata={"i": i},
        timestamp=BASE + timedelta(minutes=i),
        updated_at=BASE,
        version=version,
    )


def pick(pool: list[Entity], rng: random.Random, k: int = 3) -> list[Entity]:
    # Skewed: low indices are popular (a few entities are mentioned by many memories).
    idx = {min(int(rng.expovariate(1 / (len(pool) / 4))), len(pool) - 1) for _ in range(k)}
    return [pool[i] for i in sorted(idx)]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(label: str, n: int, call: Callable[[int], Awaitable[object]]) -> None:
    samples = []
    sizes = []
    for i in range(n):
        t0 = time.perf_counter()
        result = await call(i)
        samples.append((time.perf_counter() - t0) * 1000)
        sizes.append(len(result) if isinstance(result, list) else 0)
    print(
        f"  {label:<34} p50 {statistics.median(samples):7.2f} ms   p99 {pct(samples, 0.99):7.2f} ms"
        f"   (mean hits {statistics.mean(sizes):.1f})"
    )


async def run(n: int, queries: int, batch: int) -> None:
    rng = random.Random(7)
    pool = entities(max(n // 5, 10), rng)
    with tempfile.TemporaryDirectory() as tmp:
        store = LadybugGraphStore(Path(tmp) / "graph.lbug")
        try:
            items = [(memory(i, 1, rng), pick(pool, rng)) for i in range(n)]
            t0 = time.perf_counter()
            for s in range(0, n, batch):
                await store.upsert(TENANT, items[s : s + batch])
            dt = time.perf_counter() - t0
            print(f"N={n}: upsert {n / dt:.0f} memories/s (batches of {batch}, 3 entities each)")

            edges = []
            for _ in range(2 * n):
                a, b = rng.randrange(n), rng.randrange(n)
                if a != b:
                    edges.append(
                        Relation(
                            f"m{a:07d}", f"m{b:07d}", rng.choice(TYPES), round(rng.random(), 3)
                        )
                    )
            t0 = time.perf_counter()
            for s in range(0, len(edges), 500):
                await store.add_relations(TENANT, edges[s : s + 500], 1)
            dt = time.perf_counter() - t0
            print(f"  add_relations {len(edges) / dt:.0f} edges/s (batches of 500)")

            k = min(n, 2000)
            updates = [(replace(items[i][0], version=2), pick(pool, rng)) for i in range(k)]
            t0 = time.perf_counter()
            for s in range(0, k, batch):
                await store.upsert(TENANT, updates[s : s + batch])
            dt = time.perf_counter() - t0
            print(f"  re-upsert {k / dt:.0f} memories/s (newer version, entities replaced)")

            seeds = [f"m{rng.randrange(n):07d}" for _ in range(queries)]
            for depth in (1, 2, 3):
                await timed(
                    f"related depth {depth} limit 20",
                    queries,
                    lambda i, d=depth: store.related(TENANT, seeds[i], d, [], 20),
                )
            await timed(
                "related depth 3 limit 100",
                queries,
                lambda i: store.related(TENANT, seeds[i], 3, [], 100),
            )
            keys = [[e.key for e in pick(pool, rng, 2)] for _ in range(queries)]
            await timed(
                "search 2 entity keys limit 20",
                queries,
                lambda i: store.search(TENANT, keys[i], [], Filter(), 20),
            )
            words = [rng.sample(WORDS, 2) for _ in range(queries)]
            await timed(
                "search 2 keywords limit 20",
                queries,
                lambda i: store.search(TENANT, [], words[i], Filter(), 20),
            )
            flt = Filter(tags=("project",), tag_match=TagMatch.PREFIX, exclude_tags=("topic:golf",))
            await timed(
                "search keys+keywords+tag filter",
                queries,
                lambda i: store.search(TENANT, keys[i], words[i][:1], flt, 20),
            )
            ids = [[f"m{rng.randrange(n):07d}" for _ in range(20)] for _ in range(queries)]
            await timed("get 20 ids", queries, lambda i: store.get(TENANT, ids[i]))
            await timed("relations of 20 ids", queries, lambda i: store.relations(TENANT, ids[i]))
            await timed("count", min(queries, 50), lambda i: store.count(TENANT))
        finally:
            await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    for n in args.memories:
        asyncio.run(run(n, args.queries, args.batch))


if __name__ == "__main__":
    main()
