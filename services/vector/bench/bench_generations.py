"""What store generations cost on the vector backends: create (an empty generation), swap
(the live pointer: a pointer file on Edge, the collection alias on Qdrant), list (counts every
generation) and drop, with `--points` memories in each generation.

    uv run python services/vector/bench/bench_generations.py [--points 10000] [--backend edge]

Edge runs on disk in a temporary directory; qdrant runs qdrant-client's local mode (the
pure-Python stand-in: its figures say little about a server; no Qdrant server runs here).
Each step is timed `--repeat` times (swapping back and forth); prints p50 and max in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from qdrant_client import AsyncQdrantClient

from engram_core.model import Memory
from engram_testing.generation_bench import bench_generations
from engram_vector import bootstrap
from engram_vector.adapters.qdrant_generations import QdrantGenerations
from engram_vector.adapters.qdrant_server import QdrantOptions
from engram_vector.config import EdgeSettings, Settings

DIM = 384
MODEL = "bench-model"
TENANT = "bench"


@dataclass(frozen=True)
class Model:
    model_name: str
    dimension: int


def _fill_items(n: int, seed: int) -> list[tuple[Memory, list[float]]]:
    rng = random.Random(seed)
    return [
        (
            Memory(id=f"{seed:04d}-{i:08d}", tenant=TENANT, content=f"m{i}", version=1),
            [rng.gauss(0, 1) for _ in range(DIM)],
        )
        for i in range(n)
    ]


async def run(backend: str, points: int, repeat: int, root: Path) -> None:
    if backend == "edge":
        settings = Settings(data_dir=root, dimension=DIM, edge=EdgeSettings(optimize=False))
        store: Any = await bootstrap.build_generations(settings, [Model(MODEL, DIM)])  # type: ignore[list-item]
    else:
        client = AsyncQdrantClient(path=str(root / "qdrant"))
        store = await QdrantGenerations.open(
            client, QdrantOptions(dimension=DIM), {MODEL: DIM}, MODEL
        )
    fill = partial(_fill_items, points)
    await bench_generations(store, TENANT, fill, f"{backend}, {points} points each", repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--backend", choices=("edge", "qdrant"), default="edge")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="engram-bench-gen-") as d:
        asyncio.run(run(args.backend, args.points, args.repeat, Path(d)))


if __name__ == "__main__":
    main()
