"""What the consolidation passes cost on the vector index: a full scan, relevance writes, and
neighbours — on Qdrant Edge (on disk in a temporary directory), before and after its HNSW
rebuild, or on qdrant-client's local mode (the pure-Python stand-in the unit tests use; no
Qdrant server runs on this machine).

    uv run python services/vector/bench/bench_passes.py [--points 10000] [--backend edge]

Synthetic data: 384-d vectors in 200 clusters (a memory's near neighbours exist, as in real
embeddings), short texts, one tenant. Prints: upsert rate (batches of 500, the setup), a full
scan in pages of `--page`, `neighbours` of 100 ids (limit 10) in one call, repeated
`--repeat` times (p50 and max), and `update_relevance` of every memory in batches of `--page`
(last: on Edge a payload write moves a point out of the HNSW-indexed segment until the next
rebuild).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from qdrant_client import AsyncQdrantClient

from engram_core.model import Memory, RelevanceUpdate
from engram_core.ports import VectorIndex
from engram_vector.adapters.edge import EdgeOptions, EdgeVectorIndex
from engram_vector.adapters.qdrant_server import QdrantOptions, QdrantVectorIndex

TENANT = "bench"
DIM = 384
BASE = datetime(2024, 1, 1, tzinfo=UTC)


def vectors(n: int, rng: random.Random) -> list[list[float]]:
    centres = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(200)]
    out = []
    for _ in range(n):
        c = rng.choice(centres)
        out.append([x + rng.gauss(0, 0.4) for x in c])
    return out


def memory(i: int) -> Memory:
    return Memory(
        id=f"{i:08d}-0000-7000-8000-000000000000",
        tenant=TENANT,
        content=f"synthetic memory number {i} about topic {i % 97}",
        tags=(f"topic:{i % 97}",),
        timestamp=BASE,
        updated_at=BASE,
        version=1,
    )


def since(start: float) -> float:
    return time.perf_counter() - start


async def run(index: VectorIndex, args: argparse.Namespace, label: str) -> None:
    rng = random.Random(7)
    items = list(
        zip([memory(i) for i in range(args.points)], vectors(args.points, rng), strict=True)
    )
    start = time.perf_counter()
    for k in range(0, len(items), 500):
        await index.upsert(TENANT, items[k : k + 500])
    print(f"[{label}] upsert {args.points}: {args.points / since(start):,.0f} points/s")
    await measure(index, args, label)
    if isinstance(index, EdgeVectorIndex):
        start = time.perf_counter()
        await index.optimize()
        print(f"[{label}] HNSW rebuild: {since(start):.1f} s")
        await measure(index, args, f"{label}, HNSW")


async def measure(index: VectorIndex, args: argparse.Namespace, label: str) -> None:
    start = time.perf_counter()
    cursor: str | None = None
    seen = pages = 0
    while True:
        page = await index.scan(TENANT, cursor, args.page)
        seen += len(page.memories)
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == args.points, seen
    print(f"[{label}] scan {seen} in {pages} pages of {args.page}: {since(start):.2f} s")

    ids = [memory(i).id for i in range(args.points)]
    rng = random.Random(11)
    times = []
    for _ in range(args.repeat):
        sample = rng.sample(ids, 100)
        start = time.perf_counter()
        got = await index.neighbours(TENANT, sample, 10, 0.0)
        times.append(since(start) * 1000)
        assert len(got) == 100
    print(
        f"[{label}] neighbours of 100 ids, limit 10: p50 {statistics.median(times):.0f} ms, "
        f"max {max(times):.0f} ms ({args.repeat} calls)"
    )

    start = time.perf_counter()
    for k in range(0, len(ids), args.page):
        batch = [RelevanceUpdate(i, 0.5) for i in ids[k : k + args.page]]
        assert await index.update_relevance(TENANT, batch) == len(batch)
    print(f"[{label}] update_relevance {len(ids)} in batches of {args.page}: {since(start):.2f} s")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--page", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backend", choices=("edge", "qdrant-local"), default="edge")
    args = parser.parse_args()
    if args.backend == "edge":
        with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
            options = EdgeOptions(dimension=DIM, optimize_enabled=False)
            edge = await EdgeVectorIndex.open(Path(tmp) / "vector", options)
            try:
                await run(edge, args, "edge")
            finally:
                await edge.close()
        return
    local = await QdrantVectorIndex.open(
        AsyncQdrantClient(location=":memory:"), QdrantOptions(dimension=DIM)
    )
    try:
        await run(local, args, "qdrant-local")
    finally:
        await local.close()


if __name__ == "__main__":
    asyncio.run(main())
