"""Load time, query latency, batch throughput and memory of the local embedder.

    uv run python libs/embed/scripts/measure.py --locomo PATH/locomo_dev.json [--threads N]

Sentences are LoCoMo dialogue turns read from PATH (not shipped with the repo);
the figures in libs/embed/README.md come from this script.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

from engram_embed.local import OnnxEmbedder
from engram_embed.paths import default_model_dir


def turns(path: Path, limit: int) -> list[str]:
    out: list[str] = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        for key in sorted(k for k in conv if k.startswith("session_") and k[8:].isdigit()):
            out.extend(turn["text"] for turn in conv[key] if turn.get("text"))
    return out[:limit]


def rss_mb() -> tuple[float, float]:
    """Current and peak resident set size, from /proc."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--locomo", type=Path, required=True)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=1000)
    args = parser.parse_args()
    texts = turns(args.locomo, args.sentences)
    print(f"{len(texts)} sentences, threads={args.threads}, batch={args.batch_size}")
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(f"rss before load: {rss_mb()[0]:.0f} MB")

    start = time.perf_counter()
    emb = OnnxEmbedder(
        args.model_dir or default_model_dir(), batch_size=args.batch_size, threads=args.threads
    )
    print(f"load: {time.perf_counter() - start:.2f} s")

    await emb.embed(texts[:8])  # warm-up: first run allocates and plans
    lat, cpu_ms = [], []
    for text in texts[:50]:
        t0, c0 = time.perf_counter(), time.process_time()
        await emb.embed([text])
        lat.append((time.perf_counter() - t0) * 1000)
        cpu_ms.append((time.process_time() - c0) * 1000)
    q = statistics.quantiles(lat, n=20)
    print(
        f"single query: median {statistics.median(lat):.2f} ms, p95 {q[-1]:.2f} ms, "
        f"median CPU {statistics.median(cpu_ms):.2f} ms (n=50)"
    )

    rates, cpu = [], []
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        await emb.embed(texts)
        rates.append(len(texts) / (time.perf_counter() - t0))
        cpu.append(len(texts) / (time.process_time() - c0))
    # Per CPU-second as well: on a shared machine wall-clock rates mostly measure the neighbours.
    print(
        f"batches of {args.batch_size}: {statistics.median(rates):.0f} sentences/s wall, "
        f"{statistics.median(cpu):.0f} per CPU-second (median of 3)"
    )
    now, peak = rss_mb()
    print(f"rss: {now:.0f} MB now, {peak:.0f} MB peak")


if __name__ == "__main__":
    asyncio.run(main())
