"""Speed of the Qdrant Edge adapter: upsert rate, search latency before, during and after
the HNSW rebuild, recall@10 against exact cosine. 384-d vectors, one tenant.

    uv run python services/vector/bench/bench_edge.py --points 10000 100000
    uv run python services/vector/bench/bench_edge.py --points 100000 --data clustered

``random``: i.i.d. Gaussian vectors, the worst case for HNSW recall (every point is
almost equally far from a query). ``clustered``: points around n/100 random centres,
closer to how sentence embeddings spread.

Prints a markdown table; the figures in services/vector/README.md come from it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from engram_core.model import Filter, Memory, TagMatch
from engram_core.tags import tag_prefixes
from engram_vector.adapters.edge import EdgeOptions, EdgeVectorIndex

DIM = 384
TENANT = "bench"
BATCH = 500
QUERIES = 200
BASE = datetime(2024, 1, 1, tzinfo=UTC)


def memories(n: int) -> list[Memory]:
    out = []
    for i in range(n):
        tags = (f"project:p{i % 20}", f"lang:l{i % 7}")
        out.append(
            Memory(
                id=str(uuid.UUID(int=i + 1)),
                tenant=TENANT,
                content=f"memory number {i} with a sentence of ordinary length in it",
                type=("Decision", "Pattern", "Insight", "Memory")[i % 4],
                tags=tags,
                tag_prefixes=tag_prefixes(tags),
                timestamp=BASE + timedelta(minutes=i),
                updated_at=BASE,
                version=1,
            )
        )
    return out


async def latencies(
    search: Callable[[list[float]], Awaitable[object]], queries: np.ndarray
) -> list[float]:
    out = []
    for q in queries:
        started = time.perf_counter()
        await search(q.tolist())
        out.append((time.perf_counter() - started) * 1000)
    return out


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def exact_top10(data: np.ndarray, queries: np.ndarray) -> list[set[int]]:
    unit = data / np.linalg.norm(data, axis=1, keepdims=True)
    qs = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    scores = qs @ unit.T
    return [set(np.argpartition(-row, 10)[:10].tolist()) for row in scores]


def vectors(rng: np.random.Generator, n: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    if kind == "random":
        return rng.standard_normal((n, DIM)), rng.standard_normal((QUERIES, DIM))
    centres = rng.standard_normal((max(n // 100, 1), DIM))
    data = centres[rng.integers(0, len(centres), n)] + 0.5 * rng.standard_normal((n, DIM))
    near = centres[rng.integers(0, len(centres), QUERIES)]
    return data, near + 0.5 * rng.standard_normal((QUERIES, DIM))


async def run(n: int, root: Path, threads: int, kind: str) -> dict[str, str]:
    rng = np.random.default_rng(n)
    raw_data, raw_queries = vectors(rng, n, kind)
    data, queries = raw_data.astype(np.float32), raw_queries.astype(np.float32)
    mems = memories(n)
    options = EdgeOptions(dimension=DIM, optimize_enabled=False, indexing_threads=threads)
    index = await EdgeVectorIndex.open(root, options)
    row: dict[str, str] = {"points": f"{n:,} {kind}"}
    try:
        started = time.perf_counter()
        for s in range(0, n, BATCH):
            batch = zip(mems[s : s + BATCH], data[s : s + BATCH].tolist(), strict=True)
            await index.upsert(TENANT, list(batch))
        row["upsert/s"] = f"{n / (time.perf_counter() - started):,.0f}"

        plain = Filter()
        # 5% of the points: project p3 (every 20th), whose type is always "Memory".
        tagged = Filter(tags=("project:p3",), tag_match=TagMatch.PREFIX, types=("Memory",))

        async def search(q: list[float]) -> object:
            return await index.search(TENANT, q, plain, 10)

        async def search_tagged(q: list[float]) -> object:
            return await index.search(TENANT, q, tagged, 10)

        probe = await index.search(TENANT, queries[0].tolist(), tagged, 10)
        assert len(probe) == 10, "the filtered query must match something"

        brute = await latencies(search, queries)
        row["brute p50/p99 ms"] = f"{p(brute, 50):.1f} / {p(brute, 99):.1f}"
        brute_f = await latencies(search_tagged, queries[:50])
        row["brute filtered p50 ms"] = f"{p(brute_f, 50):.1f}"

        started = time.perf_counter()
        optimizing = asyncio.create_task(index.optimize())
        during: list[float] = []
        while not optimizing.done():  # a light, steady load: 5 queries a second
            during += await latencies(search, queries[len(during) % 150 :][:5])
            await asyncio.sleep(1.0)
        await optimizing
        row["rebuild s"] = f"{time.perf_counter() - started:.0f}"
        row["p50/p99 ms during rebuild"] = f"{p(during, 50):.1f} / {p(during, 99):.1f}"

        hnsw = await latencies(search, queries)
        row["HNSW p50/p99 ms"] = f"{p(hnsw, 50):.2f} / {p(hnsw, 99):.2f}"
        hnsw_f = await latencies(search_tagged, queries[:50])
        row["HNSW filtered p50 ms"] = f"{p(hnsw_f, 50):.2f}"

        truth = exact_top10(data, queries)
        found = []
        for q, want in zip(queries, truth, strict=True):
            hits = await index.search(TENANT, q.tolist(), plain, 10)
            got = {int(uuid.UUID(h.id)) - 1 for h in hits}
            found.append(len(got & want) / 10)
        row["recall@10"] = f"{statistics.mean(found):.3f}"
    finally:
        await index.close()
    return row


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dir", type=Path, default=None, help="where shards go (default: /tmp)")
    parser.add_argument("--threads", type=int, default=1, help="HNSW build threads (0 = all)")
    parser.add_argument("--data", choices=["random", "clustered"], default="random")
    args = parser.parse_args()
    rows = []
    for n in args.points:
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="engram-bench-") as d:
            rows.append(await run(n, Path(d) / "vector", args.threads, args.data))
            print(rows[-1], flush=True)
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(r[k] for k in keys) + " |")


if __name__ == "__main__":
    asyncio.run(main())
