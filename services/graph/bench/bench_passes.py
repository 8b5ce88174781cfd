"""What the consolidation passes cost on the graph: a full scan and relevance writes, on
ladybug (on disk in a temporary directory) or Neo4j (a tenant of its own, deleted afterwards;
other tenants of the database are left alone).

    uv run python services/graph/bench/bench_passes.py [--memories 10000] [--page 500]
    uv run python services/graph/bench/bench_passes.py --backend neo4j \
        [--neo4j-uri bolt://127.0.0.1:7687]

Synthetic memories with two entities each, one tenant, beside a second tenant of the same size
(a scan must skip it). Prints: upsert rate (batches of 500, the setup), a full scan in pages
of `--page`, and `update_relevance` of every memory in batches of `--page`.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from neo4j import AsyncGraphDatabase

from engram_core.model import Entity, Memory, RelevanceUpdate
from engram_core.ports import GraphStore
from engram_graph.adapters.ladybug_store import LadybugGraphStore
from engram_graph.adapters.neo4j_store import Neo4jGraphStore

BASE = datetime(2024, 1, 1, tzinfo=UTC)


def memory(tenant: str, i: int) -> Memory:
    return Memory(
        id=f"{i:08d}-0000-7000-8000-000000000000",
        tenant=tenant,
        content=f"synthetic memory number {i} about topic {i % 97}",
        tags=(f"topic:{i % 97}",),
        timestamp=BASE,
        updated_at=BASE,
        version=1,
    )


def entities(i: int) -> list[Entity]:
    return [Entity("concepts", f"c{i % 500}", f"Concept {i % 500}"), Entity("people", "p1", "P")]


def since(start: float) -> float:
    return time.perf_counter() - start


async def run(store: GraphStore, tenants: tuple[str, str], args: argparse.Namespace) -> None:
    label = args.backend
    start = time.perf_counter()
    for tenant in tenants:
        items = [(memory(tenant, i), entities(i)) for i in range(args.memories)]
        for k in range(0, len(items), 500):
            await store.upsert(tenant, items[k : k + 500])
    total = args.memories * len(tenants)
    print(f"[{label}] upsert {total}: {total / since(start):,.0f} memories/s")

    start = time.perf_counter()
    cursor: str | None = None
    seen = pages = 0
    while True:
        page = await store.scan(tenants[0], cursor, args.page)
        seen += len(page.memories)
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == args.memories, seen
    print(f"[{label}] scan {seen} in {pages} pages of {args.page}: {since(start):.2f} s")

    ids = [memory(tenants[0], i).id for i in range(args.memories)]
    start = time.perf_counter()
    for k in range(0, len(ids), args.page):
        batch = [RelevanceUpdate(i, 0.5) for i in ids[k : k + args.page]]
        assert await store.update_relevance(tenants[0], batch) == len(batch)
    print(f"[{label}] update_relevance {len(ids)} in batches of {args.page}: {since(start):.2f} s")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--page", type=int, default=500)
    parser.add_argument("--backend", choices=("ladybug", "neo4j"), default="ladybug")
    parser.add_argument("--neo4j-uri", default="bolt://127.0.0.1:7687")
    args = parser.parse_args()
    if args.backend == "ladybug":
        with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
            ladybug = LadybugGraphStore(Path(tmp) / "graph.lbug")
            try:
                await run(ladybug, ("bench", "bench-other"), args)
            finally:
                await ladybug.close()
        return
    run_id = uuid.uuid4().hex[:8]
    tenants = (f"bench-{run_id}", f"bench-{run_id}-other")
    neo4j = Neo4jGraphStore(args.neo4j_uri, write_timeout_ms=120_000)
    try:
        await run(neo4j, tenants, args)
    finally:
        await neo4j.close()
        await _drop(args.neo4j_uri, tenants)


async def _drop(uri: str, tenants: tuple[str, ...]) -> None:
    # CALL ... IN TRANSACTIONS needs an auto-commit transaction: session.run, not a managed one.
    async with (
        AsyncGraphDatabase.driver(uri, auth=None) as driver,
        driver.session(database="neo4j") as session,
    ):
        for label in ("Memory", "Entity"):
            result = await session.run(
                f"MATCH (n:{label}) WHERE n.tenant IN $tenants "
                "CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 5000 ROWS",
                tenants=list(tenants),
            )
            await result.consume()


if __name__ == "__main__":
    asyncio.run(main())
