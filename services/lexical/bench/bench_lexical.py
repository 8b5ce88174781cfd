"""Index rate and search latency of the tantivy text index on LoCoMo-like memories.

Documents are pairs of LoCoMo conversation turns (read at run time from the shared data set,
never copied into the repo), tagged with the speaker and session; queries are LoCoMo's own
questions. The index lives on disk in a temporary directory, as in production.

    uv run python services/lexical/bench/bench_lexical.py [--docs 10000 100000] [--queries 2000]
        [--locomo ../shared/data/locomo/locomo_dev.json]

Prints, per corpus size: upsert rate (batches of 500 sequentially; at 10k also batches of 64
from 8 concurrent callers and from one), raw tantivy query time, and the adapter's search
p50/p99 without and with a tag + time filter, and through gRPC on localhost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from engram.lexical.v1 import lexical_pb2, lexical_pb2_grpc
from engram_core.model import Filter, Memory, TagMatch
from engram_core.tags import tag_prefixes
from engram_lexical import server
from engram_lexical.adapters.tantivy_index import TantivyTextIndex
from engram_lexical.config import Settings
from engram_lexical.service import LexicalService
from engram_platform.grpc_client import open_channel

TENANT = "bench"
BASE = datetime(2023, 1, 1, tzinfo=UTC)
LOCOMO = Path(__file__).resolve().parents[4] / "shared" / "data" / "locomo" / "locomo_dev.json"


def load_locomo(path: Path) -> tuple[list[tuple[str, str, int]], list[str]]:
    """(speaker, text, session) of every turn, and every QA question."""
    samples = json.loads(path.read_text())
    turns: list[tuple[str, str, int]] = []
    questions: list[str] = []
    for sample in samples:
        for key, value in sample["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                session = int(key.split("_")[1])
                turns.extend((t["speaker"], t["text"], session) for t in value if t.get("text"))
        questions.extend(str(q["question"]) for q in sample["qa"])
    return turns, questions


def corpus(turns: Sequence[tuple[str, str, int]], n: int, seed: int = 1) -> list[Memory]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        speaker, text, session = turns[i % len(turns)]
        _, other, _ = turns[rng.randrange(len(turns))]
        tags = (f"speaker:{speaker.lower()}", f"session:{session}", f"topic:t{rng.randrange(50)}")
        ts = BASE + timedelta(minutes=i)
        out.append(
            Memory(
                id=f"m{i:07d}",
                tenant=TENANT,
                content=f"{speaker}: {text} {other}",
                tags=tags,
                tag_prefixes=tag_prefixes(tags),
                timestamp=ts,
                updated_at=ts,
                version=1,
            )
        )
    return out


def pct(samples: Sequence[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def summary(ms: Sequence[float]) -> str:
    return (
        f"p50 {pct(ms, 0.5):.3f} ms  p99 {pct(ms, 0.99):.3f} ms  mean {statistics.fmean(ms):.3f} ms"
    )


async def timed(calls: Sequence[Callable[[], Awaitable[object]]]) -> list[float]:
    out = []
    for call in calls:
        t = time.perf_counter()
        await call()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def bench(n: int, docs: list[Memory], questions: list[str], queries: int) -> None:
    print(f"\n== {n} documents ==")
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        index = TantivyTextIndex(Path(tmp) / "seq")
        t = time.perf_counter()
        for i in range(0, n, 500):
            await index.upsert(TENANT, docs[i : i + 500])
        seq_s = time.perf_counter() - t
        print(f"upsert, batches of 500, 1 caller : {n / seq_s:8.0f} docs/s ({seq_s:.1f} s)")

        if n <= 10_000:
            other = TantivyTextIndex(Path(tmp) / "conc")
            batches = [docs[i : i + 64] for i in range(0, n, 64)]
            t = time.perf_counter()
            for i in range(0, len(batches), 8):
                await asyncio.gather(*(other.upsert(TENANT, b) for b in batches[i : i + 8]))
            conc_s = time.perf_counter() - t
            print(f"upsert, batches of 64, 8 callers : {n / conc_s:8.0f} docs/s ({conc_s:.1f} s)")
            await other.close()
            single = TantivyTextIndex(Path(tmp) / "single")
            t = time.perf_counter()
            for b in batches[:40]:
                await single.upsert(TENANT, b)
            one_s = time.perf_counter() - t
            print(f"upsert, batches of 64, 1 caller  : {40 * 64 / one_s:8.0f} docs/s (40 batches)")
            await single.close()

        rng = random.Random(3)
        qs = [rng.choice(questions) for _ in range(queries)]
        flt = Filter(
            tags=("speaker",),
            tag_match=TagMatch.PREFIX,
            exclude_tags=("topic:t7",),
            start=BASE + timedelta(minutes=n // 4),
        )
        await index.search(TENANT, qs[0], Filter(), 10)  # warm up

        # Raw tantivy: the query alone, in this thread, no documents fetched.
        searcher = index._index.searcher()
        raw: list[float] = []
        for q in qs:
            query = index._queries.search(TENANT, index.terms(q), Filter())
            t = time.perf_counter()
            searcher.search(query, 10)
            raw.append((time.perf_counter() - t) * 1000)
        print(f"tantivy query only, top-10       : {summary(raw)}")

        for label, f in (("no filter", Filter()), ("tag+time filter", flt)):
            lat = await timed([lambda q=q, f=f: index.search(TENANT, q, f, 10) for q in qs])
            print(f"adapter search top-10, {label:15}: {summary(lat)}")

        settings = Settings(port=0, data_dir=Path(tmp))
        running = await server.start(settings, LexicalService(index))
        channel = open_channel(f"127.0.0.1:{running.port}")
        stub = lexical_pb2_grpc.LexicalServiceStub(channel)
        reqs = [lexical_pb2.SearchRequest(tenant=TENANT, query=q, limit=10) for q in qs]
        await stub.Search(reqs[0])
        lat = await timed([lambda r=r: stub.Search(r) for r in reqs])
        print(f"gRPC Search top-10, localhost    : {summary(lat)}")
        await channel.close()
        await running.stop(0)
        await index.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    args = parser.parse_args()
    turns, questions = load_locomo(args.locomo)
    print(f"LoCoMo: {len(turns)} turns, {len(questions)} questions")
    for n in args.docs:
        await bench(n, corpus(turns, n), questions, args.queries)


if __name__ == "__main__":
    asyncio.run(main())
