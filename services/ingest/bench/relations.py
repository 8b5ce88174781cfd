"""How fast ingest applies RelationAdded events to a real graph service (ladybug, gRPC).

    uv run python services/ingest/bench/relations.py [--memories 2000] [--events 5000] \
        [--batch 64] [--mode batched|per-event]

A graph server runs in this process on a ladybug database in a temporary directory; the
applier writes to it through the gRPC client, as the worker does (vector and lexical are
no-op writers: relation events touch only the graph). N memories are stored first, then E
RelationAdded events between random pairs (5 types) are applied in batches of ``--batch``,
as the consumer hands them over. ``batched`` is the applier as it is: one AddRelations call
per tenant per batch, each relation with its own event's version. ``per-event`` hands the
applier one event at a time, all of a batch at once (one AddRelations call per event, what
the applier did before batching). No NATS: the figure is the applier plus the graph.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from engram_clients.graph import GraphClient
from engram_core.model import Memory, Relation, UpsertResult
from engram_embed.hashing import HashingEmbedder
from engram_graph import server
from engram_graph.bootstrap import build_service
from engram_graph.config import Settings as GraphSettings
from engram_ingest.service import Applier, Event, Outcome, RelationLinked
from engram_testing.in_process import serving

TENANT = "bench"
TYPES = ("RELATES_TO", "LEADS_TO", "PART_OF", "SIMILAR_TO", "PRECEDED_BY")
T0 = datetime(2025, 1, 1, tzinfo=UTC)


class NoOpWriter:
    async def upsert(self, tenant: str, items: Sequence[object]) -> UpsertResult:
        return UpsertResult(applied=len(items), skipped=0)

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        return len(ids)


async def run(memories: int, n_events: int, batch: int, mode: str) -> None:
    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as tmp:
        settings = GraphSettings(port=0, data_dir=Path(tmp))
        async with serving(server.start, settings, build_service(settings)) as channel:
            graph = GraphClient(channel)
            ids = [f"m{i:06d}" for i in range(memories)]
            for s in range(0, memories, 500):
                items = [
                    (Memory(id=i, tenant=TENANT, content=i, timestamp=T0, version=1), [])
                    for i in ids[s : s + 500]
                ]
                await graph.upsert(TENANT, items)
            events: list[Event] = []
            for seq in range(2, n_events + 2):
                a, b = rng.sample(ids, 2)
                relation = Relation(
                    a,
                    b,
                    rng.choice(TYPES),
                    0.5,
                    origin="system",
                    created_at=T0 + timedelta(seconds=seq),
                )
                events.append(RelationLinked(TENANT, relation, seq))
            applier = Applier(HashingEmbedder(16), NoOpWriter(), NoOpWriter(), graph)  # type: ignore[arg-type]
            t0 = time.perf_counter()
            for s in range(0, len(events), batch):
                chunk = events[s : s + batch]
                if mode == "batched":
                    results = await applier.apply(chunk)
                else:
                    nested = await asyncio.gather(*(applier.apply([e]) for e in chunk))
                    results = [r for rs in nested for r in rs]
                assert all(r.outcome is Outcome.APPLIED for r in results), results[:3]
            dt = time.perf_counter() - t0
            stored = {
                (r.source_id, r.target_id, r.type)
                for s in range(0, memories, 1000)
                for r in await graph.relations(TENANT, ids[s : s + 1000])
            }
            print(
                f"{mode}: {n_events / dt:,.0f} RelationAdded events/s ({n_events} events, "
                f"batches of {batch}, {memories} memories, {len(stored)} edges stored, {dt:.1f} s)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--mode", choices=("batched", "per-event"), default="batched")
    args = parser.parse_args()
    asyncio.run(run(args.memories, args.events, args.batch, args.mode))


if __name__ == "__main__":
    main()
