"""What store generations cost on the text backends: create (an empty generation), swap (a
pointer file on tantivy, the `_aliases` call on OpenSearch), list (counts every generation)
and drop, with `--memories` memories in each generation.

    uv run python services/lexical/bench/bench_generations.py [--memories 10000] \
        [--backend tantivy|opensearch] [--url http://127.0.0.1:9200]

tantivy runs on disk in a temporary directory; OpenSearch under a throwaway index prefix,
deleted at the end. Each step is timed `--repeat` times (swapping back and forth); prints
p50 and max in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from functools import partial
from pathlib import Path

from opensearchpy import AsyncOpenSearch

from engram_core.model import Memory
from engram_lexical.adapters import opensearch_schema as schema
from engram_lexical.bootstrap import build_generations
from engram_lexical.config import OpenSearchSettings, Settings
from engram_testing.generation_bench import bench_generations

TENANT = "bench"
WORDS = ["alpha", "beta", "gamma", "delta", "orchard", "apple", "river", "stone", "cloud", "light"]


def _memories(n: int, seed: int) -> list[Memory]:
    return [
        Memory(
            id=f"{seed:04d}-{i:08d}",
            tenant=TENANT,
            content=" ".join(WORDS[(i * k + seed) % len(WORDS)] for k in range(1, 9)),
            version=1,
        )
        for i in range(n)
    ]


async def run(settings: Settings, memories: int, repeat: int) -> None:
    label = f"{settings.backend}, {memories} memories each"
    fill = partial(_memories, memories)
    await bench_generations(build_generations(settings), TENANT, fill, label, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--backend", choices=("tantivy", "opensearch"), default="tantivy")
    parser.add_argument("--url", default="http://127.0.0.1:9200")
    args = parser.parse_args()
    if args.backend == "tantivy":
        with tempfile.TemporaryDirectory(prefix="engram-bench-gen-") as d:
            asyncio.run(run(Settings(data_dir=Path(d)), args.memories, args.repeat))
        return
    prefix = f"engram-bench-{uuid.uuid4().hex[:8]}"
    opensearch = OpenSearchSettings(url=args.url, index_prefix=prefix, number_of_replicas=0)
    try:
        asyncio.run(
            run(Settings(backend="opensearch", opensearch=opensearch), args.memories, args.repeat)
        )
    finally:
        asyncio.run(_cleanup(args.url, prefix))


async def _cleanup(url: str, prefix: str) -> None:
    client = AsyncOpenSearch(hosts=[url])
    await client.indices.delete(index=f"{schema.alias_name(prefix)}-v*", ignore_unavailable=True)
    await client.indices.delete_index_template(name=schema.template_name(prefix), ignore=[404])
    await client.close()


if __name__ == "__main__":
    main()
