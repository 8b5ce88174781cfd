"""Cost of ranking 200 candidates: the core function, the handler (with proto mapping), and
a real gRPC round trip on localhost. Prints the median of 200 calls of each.

    uv run python services/scoring/bench/bench_rank.py [--candidates 200] [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_core.model import Memory
from engram_core.scoring import Candidate, Fusion, Query, StreamScore, rank
from engram_core.tags import tag_prefixes
from engram_platform.grpc_client import open_channel
from engram_platform.timeutil import to_epoch_ms
from engram_scoring import server
from engram_scoring.bootstrap import build_ranker
from engram_scoring.config import Settings
from engram_scoring.handlers import ScoringHandlers
from engram_scoring.mapping import candidate_to_proto

NOW = datetime(2025, 6, 1, tzinfo=UTC)
WORDS = [
    "deploy",
    "pipeline",
    "release",
    "sarah",
    "prefers",
    "python",
    "tests",
    "review",
    "budget",
    "meeting",
    "berlin",
    "database",
    "migration",
    "cache",
    "latency",
    "incident",
    "postmortem",
    "roadmap",
    "quarter",
    "customer",
]
QUERY = "when did sarah review the deploy pipeline"


def candidates(n: int, seed: int = 7) -> list[Candidate]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        tags = (f"project:p{i % 5}", f"entity:people:{rnd.choice(WORDS)}", "source:chat")
        m = Memory(
            id=f"0190c3a4-0000-7000-8000-{i:012d}",
            tenant="default",
            content=" ".join(rnd.choice(WORDS) for _ in range(30)),
            tags=tags,
            tag_prefixes=tag_prefixes(tags),
            importance=rnd.random(),
            metadata={"session": f"s{i % 20}", "speaker": rnd.choice(WORDS), "turn": i},
            timestamp=NOW - timedelta(days=rnd.uniform(0, 400)),
        )
        streams = {"vector": StreamScore(rnd.uniform(0.1, 0.9), i + 1)}
        if i % 2 == 0:
            streams["keyword"] = StreamScore(rnd.uniform(1, 12), i // 2 + 1)
        if i % 7 == 0:
            streams["graph"] = StreamScore(rnd.uniform(0.5, 3), i // 7 + 1)
        out.append(Candidate(m, streams, rnd.choice((0.0, 0.0, 0.5, 1.2))))
    return out


async def timed(fn: Callable[[], Awaitable[Any]], calls: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds (all threads of this process: gRPC's too) per call.

    CPU time is the figure to trust on a shared, busy machine; wall time includes waiting.
    """
    for _ in range(10):
        await fn()
    wall, cpu = [], []
    for _ in range(calls):
        t0, c0 = time.perf_counter(), time.process_time()
        await fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


async def main(n: int, calls: int) -> None:
    cands = candidates(n)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(port=0, data_dir=Path(tmp))
        ranker = build_ranker(settings)
        params = ranker.params(None, 10, {})
        query = Query(now=NOW, text=QUERY, tags=("project:p1",))
        request = scoring_pb2.RankRequest(
            query=QUERY,
            candidates=[candidate_to_proto(c) for c in cands],
            limit=10,
            query_tags=["project:p1"],
            now_unix_ms=to_epoch_ms(NOW),
        )
        handlers = ScoringHandlers(ranker)

        async def core() -> Any:
            return rank(cands, query, params)

        async def core_rrf() -> Any:
            return rank(cands, query, ranker.params(Fusion.RRF, 10, {}))

        async def handler() -> Any:
            return await handlers.Rank(request, None)  # type: ignore[arg-type]

        running = await server.start(settings, ranker)
        channel = open_channel(f"127.0.0.1:{running.port}")
        stub = scoring_pb2_grpc.ScoringServiceStub(channel)

        async def grpc_call() -> Any:
            return await stub.Rank(request)

        try:
            rows = [
                ("core rank() weighted", await timed(core, calls)),
                ("core rank() rrf", await timed(core_rrf, calls)),
                ("handler (proto mapping + rank)", await timed(handler, calls)),
                ("gRPC Rank over localhost", await timed(grpc_call, calls)),
            ]
        finally:
            await channel.close()
            await running.stop(0)
    size = request.ByteSize()
    print(f"{n} candidates, request {size / 1024:.0f} KiB, {calls} calls, ms per call:")
    print(f"  {'':34s} {'wall p50':>9s} {'wall p90':>9s} {'cpu p50':>9s}")
    for name, (wall, cpu) in rows:
        p50, p90 = statistics.median(wall), statistics.quantiles(wall, n=10)[-1]
        print(f"  {name:34s} {p50 * 1e3:9.3f} {p90 * 1e3:9.3f} {statistics.median(cpu) * 1e3:9.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidates", type=int, default=200)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    asyncio.run(main(args.candidates, args.calls))
