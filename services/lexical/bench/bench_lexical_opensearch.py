"""Write cost, search latency and retrieval quality of the OpenSearch text index.

Needs a running OpenSearch (``make up-servers``, or any at ``--url``). Every run works in
indices of its own (prefix ``engram-bench-<random>``) and deletes them at the end. Documents
and queries come from LoCoMo (read at run time from the shared data set, never copied).

    uv run python services/lexical/bench/bench_lexical_opensearch.py [--url http://127.0.0.1:9200]
        [--docs 10000] [--queries 2000] [--skip-quality] [--skip-writes]
        [--refresh wait_for:1 wait_for:0.2 true:1 false:1]

Prints:
- quality: per LoCoMo conversation (one tenant each) every turn is a memory; each question
  with evidence searches top-10; recall@10 (share of questions with an evidence turn in the
  top 10) and MRR@10, for each way of querying the two content fields, and for tantivy;
- writes: upsert of ``--docs`` LoCoMo-pair documents in batches of 500 and 64 (one caller and
  8 concurrent callers) for each refresh policy;
- search: p50/p99 of top-10 over ``--queries`` LoCoMo questions, without and with a tag prefix
  + exclude tag + time window filter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from opensearchpy import AsyncOpenSearch

from engram_core.model import Filter, Memory, TagMatch
from engram_core.ports import TextIndex
from engram_lexical.adapters import opensearch_schema as schema
from engram_lexical.adapters.opensearch_index import (
    OpenSearchOptions,
    OpenSearchTextIndex,
    Refresh,
    opensearch_client,
)
from engram_lexical.adapters.tantivy_index import TantivyTextIndex

sys.path.insert(0, str(Path(__file__).parent))
from bench_lexical import LOCOMO, TENANT, corpus, load_locomo, pct

QueryMode = Callable[[Sequence[str]], dict[str, Any]]
FIELDS = ["content", "content.std"]


def _multi(kind: str, **extra: Any) -> QueryMode:
    def build(words: Sequence[str]) -> dict[str, Any]:
        return {"multi_match": {"query": " ".join(words), "fields": FIELDS, "type": kind, **extra}}

    return build


MODES: dict[str, QueryMode] = {
    f"most_fields std^{schema.STD_WEIGHT} (used)": schema.text_query,
    "most_fields std^1": _multi("most_fields"),
    "best_fields (tie 0.3)": _multi("best_fields", tie_breaker=0.3),
    "english only": lambda words: {"match": {"content": " ".join(words)}},
    "std only": lambda words: {"match": {"content.std": " ".join(words)}},
}


async def _drop(url: str, prefix: str) -> None:
    admin = AsyncOpenSearch(hosts=[url], timeout=60)
    await admin.indices.delete(index=f"{schema.alias_name(prefix)}-v*", ignore_unavailable=True)
    await admin.indices.delete_index_template(name=schema.template_name(prefix), ignore=[404])
    await admin.close()


def _index(url: str, prefix: str, **options: Any) -> OpenSearchTextIndex:
    o = OpenSearchOptions(index_prefix=prefix, number_of_replicas=0, timeout_s=60, **options)
    return OpenSearchTextIndex(opensearch_client(url, timeout_s=60), o)


# -- quality ---------------------------------------------------------------------------------------


def locomo_tenants(path: Path) -> tuple[dict[str, list[Memory]], list[tuple[str, str, set[str]]]]:
    """One tenant per conversation: its turns as memories (id = dia_id), and its questions."""
    docs: dict[str, list[Memory]] = {}
    questions: list[tuple[str, str, set[str]]] = []
    base = datetime(2023, 1, 1, tzinfo=UTC)
    for sample in json.loads(path.read_text()):
        tenant = f"locomo-{sample['sample_id']}"
        turns = []
        for key, value in sample["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                for t in value:
                    if t.get("text"):
                        ts = base + timedelta(minutes=len(turns))
                        turns.append(
                            Memory(
                                id=t["dia_id"],
                                tenant=tenant,
                                content=f"{t['speaker']}: {t['text']}",
                                timestamp=ts,
                                updated_at=ts,
                                version=1,
                            )
                        )
        docs[tenant] = turns
        for q in sample["qa"]:
            if q.get("evidence"):
                questions.append((tenant, str(q["question"]), set(q["evidence"])))
    return docs, questions


async def _score(
    index: TextIndex, questions: Sequence[tuple[str, str, set[str]]]
) -> tuple[float, float, float]:
    found = rr = 0.0
    lat = []
    for tenant, question, evidence in questions:
        t = time.perf_counter()
        hits = [h.id for h in await index.search(tenant, question, Filter(), 10)]
        lat.append((time.perf_counter() - t) * 1000)
        ranks = [r for r, i in enumerate(hits, 1) if i in evidence]
        found += bool(ranks)
        rr += 1 / ranks[0] if ranks else 0
    return found / len(questions), rr / len(questions), pct(lat, 0.5)


def _report(name: str, recall: float, mrr: float, p50: float) -> None:
    print(f"{name:39}: recall@10 {recall:.3f}  MRR@10 {mrr:.3f}  search p50 {p50:.1f} ms")


async def quality(url: str, path: Path) -> None:
    docs, questions = locomo_tenants(path)
    print(f"\n== quality: {sum(map(len, docs.values()))} turns, {len(questions)} questions ==")
    prefix = f"engram-bench-{uuid.uuid4().hex[:8]}"
    index = _index(url, prefix, refresh="true")
    try:
        for tenant, turns in docs.items():
            await index.upsert(tenant, turns)
        original = schema.text_query
        for name, mode in MODES.items():
            schema.text_query = mode
            await _score(index, questions[:100])  # warm up
            recall, mrr, p50 = await _score(index, questions)
            _report(f"opensearch {name}", recall, mrr, p50)
        schema.text_query = original
    finally:
        await index.close()
        await _drop(url, prefix)
    with tempfile.TemporaryDirectory() as tmp:
        tantivy = TantivyTextIndex(Path(tmp) / "q")
        for tenant, turns in docs.items():
            await tantivy.upsert(tenant, turns)
        recall, mrr, p50 = await _score(tantivy, questions)
        _report("tantivy (reference)", recall, mrr, p50)
        await tantivy.close()


# -- writes and search -----------------------------------------------------------------------------


def _ms(samples: Sequence[float]) -> str:
    return f"p50 {pct(samples, 0.5):7.1f} ms  p99 {pct(samples, 0.99):7.1f} ms"


async def writes(url: str, docs: list[Memory], refresh: Refresh, interval: float) -> None:
    prefix = f"engram-bench-{uuid.uuid4().hex[:8]}"
    index = await _index(url, prefix, refresh=refresh, refresh_interval_s=interval).open()
    label = f"refresh={refresh:8} interval={interval:g}s"
    try:
        lat: list[float] = []
        t0 = time.perf_counter()
        for i in range(0, len(docs), 500):
            t = time.perf_counter()
            await index.upsert(TENANT, docs[i : i + 500])
            lat.append((time.perf_counter() - t) * 1000)
        rate = len(docs) / (time.perf_counter() - t0)
        print(f"{label} batches of 500, 1 caller : {rate:6.0f} docs/s  batch {_ms(lat)}")

        small = [docs[i : i + 64] for i in range(0, 64 * 40, 64)]
        lat = []
        t0 = time.perf_counter()
        for b in small:
            t = time.perf_counter()
            await index.upsert(TENANT, [_bump(m) for m in b])
            lat.append((time.perf_counter() - t) * 1000)
        rate = 64 * len(small) / (time.perf_counter() - t0)
        print(f"{label} batches of 64, 1 caller  : {rate:6.0f} docs/s  batch {_ms(lat)}")

        async def timed(b: list[Memory]) -> float:
            t = time.perf_counter()
            await index.upsert(TENANT, [_bump(m, 3) for m in b])
            return (time.perf_counter() - t) * 1000

        lat = []
        t0 = time.perf_counter()
        for i in range(0, len(small), 8):
            lat.extend(await asyncio.gather(*(timed(b) for b in small[i : i + 8])))
        rate = 64 * len(small) / (time.perf_counter() - t0)
        print(f"{label} batches of 64, 8 callers : {rate:6.0f} docs/s  batch {_ms(lat)}")
    finally:
        await index.close()
        await _drop(url, prefix)


def _bump(m: Memory, version: int = 2) -> Memory:
    return replace(m, version=version)


async def searches(url: str, docs: list[Memory], questions: list[str], n: int) -> None:
    prefix = f"engram-bench-{uuid.uuid4().hex[:8]}"
    index = await _index(url, prefix, refresh="true").open()
    try:
        for i in range(0, len(docs), 500):
            await index.upsert(TENANT, docs[i : i + 500])
        rng = random.Random(3)
        qs = [rng.choice(questions) for _ in range(n)]
        flt = Filter(
            tags=("speaker",),
            tag_match=TagMatch.PREFIX,
            exclude_tags=("topic:t7",),
            start=docs[len(docs) // 4].timestamp,
        )
        for q in qs[:50]:  # warm caches
            await index.search(TENANT, q, Filter(), 10)
        lat = []
        for q in qs:  # the search request alone: no access-statistics join, no decoding
            body = schema.search_body(TENANT, schema.query_words(q), Filter(), 10)
            t = time.perf_counter()
            await index._client.search(index=index.alias, body=body, routing=TENANT)
            lat.append((time.perf_counter() - t) * 1000)
        print(f"search request only, {len(docs)} docs      : {_ms(lat)}")
        for label, f in (("no filter", Filter()), ("tag+time filter", flt)):
            lat = []
            for q in qs:
                t = time.perf_counter()
                await index.search(TENANT, q, f, 10)
                lat.append((time.perf_counter() - t) * 1000)
            print(f"search top-10, {len(docs)} docs, {label:15}: {_ms(lat)}")
        lat = []
        for i in range(min(n, 500)):
            t = time.perf_counter()
            await index.get(TENANT, [docs[(i * 7919) % len(docs)].id for _ in range(1)])
            lat.append((time.perf_counter() - t) * 1000)
        print(f"get of 1 id                             : {_ms(lat)}")
    finally:
        await index.close()
        await _drop(url, prefix)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:9200")
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-writes", action="store_true")
    parser.add_argument(
        "--refresh",
        nargs="+",
        default=["wait_for:1", "wait_for:0.2", "true:1", "false:1"],
        help="refresh policy:refresh_interval_s pairs to measure writes with",
    )
    args = parser.parse_args()
    if not args.skip_quality:
        await quality(args.url, args.locomo)
    turns, questions = load_locomo(args.locomo)
    docs = corpus(turns, args.docs)
    if not args.skip_writes:
        print(f"\n== writes: {len(docs)} LoCoMo-pair documents ==")
        for config in args.refresh:
            refresh, interval = config.split(":")
            await writes(args.url, docs, refresh, float(interval))  # type: ignore[arg-type]
    print(f"\n== search: {len(docs)} LoCoMo-pair documents, {args.queries} questions ==")
    await searches(args.url, docs, questions, args.queries)


if __name__ == "__main__":
    asyncio.run(main())
