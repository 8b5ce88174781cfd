"""What the consolidation passes cost on the text index: a full scan and relevance writes, on
tantivy (on disk in a temporary directory) or OpenSearch (an index prefix of its own, deleted
afterwards).

    uv run python services/lexical/bench/bench_passes.py [--docs 10000] [--page 500]
    uv run python services/lexical/bench/bench_passes.py --backend opensearch \
        [--opensearch-url http://127.0.0.1:9200]

Synthetic memories (short texts, two tags), one tenant, beside a second tenant of the same
size (a scan must skip it). Prints: upsert rate (batches of 500, the setup), a full scan in
pages of `--page` (twice on tantivy: a scan that walks once, and one resumed from a cursor at
every page, as after a restart), and `update_relevance` of every memory in batches of
`--page`.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from opensearchpy import AsyncOpenSearch

from engram_core.model import Memory, RelevanceUpdate
from engram_core.ports import TextIndex
from engram_lexical.adapters import opensearch_schema as schema
from engram_lexical.adapters.opensearch_index import (
    OpenSearchOptions,
    OpenSearchTextIndex,
    opensearch_client,
)
from engram_lexical.adapters.tantivy_index import TantivyTextIndex

TENANTS = ("bench", "bench-other")
BASE = datetime(2024, 1, 1, tzinfo=UTC)


def memory(tenant: str, i: int) -> Memory:
    return Memory(
        id=f"{i:08d}-0000-7000-8000-000000000000",
        tenant=tenant,
        content=f"synthetic memory number {i} about topic {i % 97} and colour {i % 13}",
        tags=(f"topic:{i % 97}", f"colour:{i % 13}"),
        timestamp=BASE,
        updated_at=BASE,
        version=1,
    )


def since(start: float) -> float:
    return time.perf_counter() - start


async def scan_all(index: TextIndex, page_size: int, fresh: bool = False) -> tuple[int, int]:
    cursor: str | None = None
    seen = pages = 0
    while True:
        if fresh and isinstance(index, TantivyTextIndex):
            index._scan_rests = type(index._scan_rests)()  # as if every page came cold
        page = await index.scan(TENANTS[0], cursor, page_size)
        seen += len(page.memories)
        pages += 1
        if page.next_cursor is None:
            return seen, pages
        cursor = page.next_cursor


async def run(index: TextIndex, args: argparse.Namespace, label: str) -> None:
    start = time.perf_counter()
    for tenant in TENANTS:
        docs = [memory(tenant, i) for i in range(args.docs)]
        for k in range(0, len(docs), 500):
            await index.upsert(tenant, docs[k : k + 500])
    total = args.docs * len(TENANTS)
    print(f"[{label}] upsert {total}: {total / since(start):,.0f} docs/s")

    start = time.perf_counter()
    seen, pages = await scan_all(index, args.page)
    assert seen == args.docs, seen
    print(f"[{label}] scan {seen} in {pages} pages of {args.page}: {since(start):.2f} s")
    if isinstance(index, TantivyTextIndex):
        start = time.perf_counter()
        seen, pages = await scan_all(index, args.page, fresh=True)
        assert seen == args.docs, seen
        print(f"[{label}] scan, a walk per page: {since(start):.2f} s")

    ids = [memory(TENANTS[0], i).id for i in range(args.docs)]
    start = time.perf_counter()
    for k in range(0, len(ids), args.page):
        batch = [RelevanceUpdate(i, 0.5) for i in ids[k : k + args.page]]
        assert await index.update_relevance(TENANTS[0], batch) == len(batch)
    print(f"[{label}] update_relevance {len(ids)} in batches of {args.page}: {since(start):.2f} s")


@asynccontextmanager
async def opensearch(url: str) -> AsyncIterator[OpenSearchTextIndex]:
    prefix = f"engram-bench-{uuid.uuid4().hex[:8]}"
    options = OpenSearchOptions(index_prefix=prefix, number_of_replicas=0)
    index = await OpenSearchTextIndex(opensearch_client(url), options).open()
    admin = AsyncOpenSearch(hosts=[url], timeout=60)
    try:
        yield index
    finally:
        await index.close()
        await admin.indices.delete(index=f"{schema.alias_name(prefix)}-v*")
        await admin.indices.delete_index_template(name=schema.template_name(prefix))
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--page", type=int, default=500)
    parser.add_argument("--backend", choices=("tantivy", "opensearch"), default="tantivy")
    parser.add_argument("--opensearch-url", default="http://127.0.0.1:9200")
    args = parser.parse_args()
    if args.backend == "opensearch":
        async with opensearch(args.opensearch_url) as index:
            await run(index, args, "opensearch")
        return
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        tantivy = TantivyTextIndex(Path(tmp) / "lexical")
        try:
            await run(tantivy, args, "tantivy")
        finally:
            await tantivy.close()


if __name__ == "__main__":
    asyncio.run(main())
