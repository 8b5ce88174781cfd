"""Write rate and read latency of a graph store (ladybug or Neo4j), as the service uses it.

Synthetic tenant: N memories with 3 entities each (drawn from N/5 entities, skewed so a few are
popular), and 2 typed relations per memory between random memories (mean degree 4). ladybug
lives on disk in a temporary directory, as in production; on Neo4j the run uses a tenant of
its own and deletes it afterwards (other tenants of the database are left alone).

    uv run python services/graph/bench/bench_graph.py [--memories 10000] [--queries 300]
    uv run python services/graph/bench/bench_graph.py --backend neo4j \
        [--neo4j-uri bolt://127.0.0.1:7687] [--batch 500]

Prints: upsert rate (batches of 100, new memories), re-upsert rate (newer versions whose
entities change), add_relations rate (batches of 500), and p50/p99 of related at depth 1/2/3,
search by entity keys, by keywords and with a tag filter, get of 20 ids, relations of 20
and of 200 ids (the gateway asks for the relations of its candidate pool on every recall).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from engram_core.model import Entity, Filter, Memory, Relation, TagMatch
from engram_core.ports import GraphStore
from engram_core.tags import tag_prefixes
from engram_graph.adapters.ladybug_store import LadybugGraphStore
from engram_graph.adapters.neo4j_store import Neo4jGraphStore

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


@asynccontextmanager
async def open_store(backend: str, neo4j_uri: str) -> AsyncIterator[tuple[GraphStore, str]]:
    """The store and the tenant to use; the bench's data is gone afterwards."""
    if backend == "ladybug":
        with tempfile.TemporaryDirectory() as tmp:
            store = LadybugGraphStore(Path(tmp) / "graph.lbug")
            try:
                yield store, TENANT
            finally:
                await store.close()
        return
    from neo4j import AsyncGraphDatabase

    tenant = f"{TENANT}-{uuid.uuid4().hex[:8]}"
    store = Neo4jGraphStore(neo4j_uri, write_timeout_ms=300_000)
    try:
        yield store, tenant
    finally:
        await store.close()
        # CALL ... IN TRANSACTIONS runs only in an implicit (auto-commit) transaction.
        async with (
            AsyncGraphDatabase.driver(neo4j_uri) as driver,
            driver.session(database="neo4j") as session,
        ):
            result = await session.run(
                "MATCH (n) WHERE n.tenant = $tenant "
                "CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 5000 ROWS",
                tenant=tenant,
            )
            await result.consume()


async def run(n: int, queries: int, batch: int, backend: str, neo4j_uri: str) -> None:
    rng = random.Random(7)
    pool = entities(max(n // 5, 10), rng)
    async with open_store(backend, neo4j_uri) as (store, tenant):
        items = [(memory(i, 1, rng), pick(pool, rng)) for i in range(n)]
        t0 = time.perf_counter()
        for s in range(0, n, batch):
            await store.upsert(tenant, items[s : s + batch])
        dt = time.perf_counter() - t0
        print(
            f"{backend} N={n}: upsert {n / dt:.0f} memories/s (batches of {batch}, 3 entities each)"
        )

        edges = []
        for _ in range(2 * n):
            a, b = rng.randrange(n), rng.randrange(n)
            if a != b:
                edges.append(
                    Relation(f"m{a:07d}", f"m{b:07d}", rng.choice(TYPES), round(rng.random(), 3))
                )
        t0 = time.perf_counter()
        for s in range(0, len(edges), 500):
            await store.add_relations(tenant, edges[s : s + 500], 1)
        dt = time.perf_counter() - t0
        print(f"  add_relations {len(edges) / dt:.0f} edges/s (batches of 500)")

        k = min(n, 2000)
        updates = [(replace(items[i][0], version=2), pick(pool, rng)) for i in range(k)]
        t0 = time.perf_counter()
        for s in range(0, k, batch):
            await store.upsert(tenant, updates[s : s + batch])
        dt = time.perf_counter() - t0
        print(f"  re-upsert {k / dt:.0f} memories/s (newer version, entities replaced)")

        seeds = [f"m{rng.randrange(n):07d}" for _ in range(queries)]
        for depth in (1, 2, 3):
            await timed(
                f"related depth {depth} limit 20",
                queries,
                lambda i, d=depth: store.related(tenant, seeds[i], d, [], 20),
            )
        await timed(
            "related depth 3 limit 100",
            queries,
            lambda i: store.related(tenant, seeds[i], 3, [], 100),
        )
        keys = [[e.key for e in pick(pool, rng, 2)] for _ in range(queries)]
        await timed(
            "search 2 entity keys limit 20",
            queries,
            lambda i: store.search(tenant, keys[i], [], Filter(), 20),
        )
        words = [rng.sample(WORDS, 2) for _ in range(queries)]
        await timed(
            "search 2 keywords limit 20",
            queries,
            lambda i: store.search(tenant, [], words[i], Filter(), 20),
        )
        flt = Filter(tags=("project",), tag_match=TagMatch.PREFIX, exclude_tags=("topic:golf",))
        await timed(
            "search keys+keywords+tag filter",
            queries,
            lambda i: store.search(tenant, keys[i], words[i][:1], flt, 20),
        )
        ids = [[f"m{rng.randrange(n):07d}" for _ in range(20)] for _ in range(queries)]
        await timed("get 20 ids", queries, lambda i: store.get(tenant, ids[i]))
        await timed("relations of 20 ids", queries, lambda i: store.relations(tenant, ids[i]))
        many = [[f"m{rng.randrange(n):07d}" for _ in range(200)] for _ in range(queries)]
        await timed("relations of 200 ids", queries, lambda i: store.relations(tenant, many[i]))
        await timed("count", min(queries, 50), lambda i: store.count(tenant))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--backend", choices=("ladybug", "neo4j"), default="ladybug")
    parser.add_argument("--neo4j-uri", default="bolt://127.0.0.1:7687")
    args = parser.parse_args()
    for n in args.memories:
        asyncio.run(run(n, args.queries, args.batch, args.backend, args.neo4j_uri))


if __name__ == "__main__":
    main()
