"""Throughput of the ingest loop: a real nats-server, the hashing embedder, no-op stores.

    uv run python services/ingest/bench/ingest_loop.py [--events 10000] [--batch 64] \
        [--replicas 1] [--embedder hashing|local] [--no-apply]

Publishes N MemoryStored events first, then times the consumer(s) from start until the
watermark (the durable's ack floor) reaches the last sequence. It also times the applier
alone on the same events (no NATS); ``--no-apply`` times the NATS part alone (fetch,
decode, ack) with an applier that does nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from nats.js import JetStreamContext

from engram.events.v1 import events_pb2
from engram_core.model import Memory, Relation, UpsertResult
from engram_core.outcomes import APPLIED
from engram_core.ports import Embedder
from engram_embed.factory import EmbedSettings, make_embedder
from engram_embed.hashing import HashingEmbedder
from engram_ingest.bootstrap import build
from engram_ingest.config import Settings
from engram_ingest.consumer import IngestConsumer
from engram_ingest.service import Event, MemoryWritten, Result
from engram_platform import jetstream as jsm
from engram_platform.convert import memory_to_proto
from engram_platform.settings import NatsSettings
from engram_testing.nats_server import start_nats

SENTENCES = [
    "Caroline: I went to a LGBTQ support group yesterday and it was powerful.",
    "Melanie: I'm planning a trip to Paris with Docker folks at Google next month.",
    "We moved the ingest worker from Redis to Postgres and deploy it with Kubernetes.",
    "Decision: keep the Engram project on NATS JetStream; Sarah Connor agreed.",
    "Jon said the dance studio in Boston opens in June, he is so excited about it.",
]


class NoOpStore:
    """Accepts every write at once: the figure is the loop's, not a store's."""

    async def upsert(self, tenant: str, items: Sequence[object]) -> UpsertResult:
        return UpsertResult(applied=len(items), skipped=0)

    async def delete(self, tenant: str, ids: Sequence[str], version: int) -> int:
        return len(ids)

    async def add_relations(
        self,
        tenant: str,
        relations: Sequence[Relation],
        version: int,
        versions: Sequence[int] = (),
    ) -> int:
        return len(relations)

    remove_relations = add_relations  # every removal is accepted at once too

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        return []


class NoOpApplier:
    """Applies nothing: what is left is the NATS part of the loop."""

    embedding_model = "none"

    async def apply(self, events: Sequence[Event]) -> list[Result]:
        return [APPLIED] * len(events)


def memory(n: int) -> Memory:
    return Memory(
        id=f"0195a000-0000-7000-8000-{n:012d}",
        tenant="bench",
        content=f"{SENTENCES[n % len(SENTENCES)]} (note {n})",
        timestamp=datetime(2025, 1, 1, tzinfo=UTC),
    )


def payload(n: int) -> bytes:
    return events_pb2.MemoryStored(
        envelope=events_pb2.Envelope(event_id=f"e{n}", tenant="bench"),
        memory=memory_to_proto(memory(n)),
    ).SerializeToString()


async def publish(js: JetStreamContext, n_events: int) -> int:
    last = 0
    subject = jsm.subject("bench", jsm.MEMORY_STORED)
    for start in range(1, n_events + 1, 500):
        acks = await asyncio.gather(
            *(
                jsm.publish(js, subject, payload(n), f"e{n}")
                for n in range(start, min(start + 500, n_events + 1))
            )
        )
        last = max(last, *(seq for seq, _ in acks))
    return last


def settings_for(url: str, batch: int) -> Settings:
    return Settings(
        nats=NatsSettings(url=url),
        batch_size=batch,
        fetch_timeout_s=0.5,
        embed=EmbedSettings(provider="hashing"),
        progress_interval_s=3600,
    )


def embedder_for(name: str) -> Embedder:
    # local: the ONNX model `make models` built under $ENGRAM_HOME (./.engram by default).
    return HashingEmbedder(384) if name == "hashing" else make_embedder(EmbedSettings())


async def loop_rate(
    url: str, n_events: int, batch: int, replicas: int, embedder: str, no_apply: bool
) -> float:
    nc, js = await jsm.connect(NatsSettings(url=url), "bench")
    await jsm.ensure_streams(js, NatsSettings(url=url))
    last = await publish(js, n_events)
    settings = settings_for(url, batch)
    store = NoOpStore()
    consumers = []
    for _ in range(replicas):
        applier = build(
            settings, embedder=embedder_for(embedder), vector=store, lexical=store, graph=store
        ).applier
        cnc, cjs = await jsm.connect(settings.nats, "bench-ingest")
        if no_apply:
            applier = NoOpApplier()  # type: ignore[assignment]
        consumer = IngestConsumer(cnc, cjs, applier, settings)
        await consumer.start()
        consumers.append((cnc, consumer))
    stop = asyncio.Event()
    started = time.perf_counter()
    tasks = [asyncio.create_task(c.run(stop)) for _, c in consumers]
    while True:  # poll the watermark: the figure is time until everything is applied
        if await jsm.watermark(js) >= last:
            break
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    stop.set()
    await asyncio.gather(*tasks)
    for cnc, _ in consumers:
        await cnc.drain()
    await nc.drain()
    return n_events / elapsed


async def applier_rate(n_events: int, batch: int, embedder: str) -> float:
    store = NoOpStore()
    applier = build(
        settings_for("nats://unused", batch),
        embedder=embedder_for(embedder),
        vector=store,
        lexical=store,
        graph=store,
    ).applier
    events = [MemoryWritten(memory(n), n) for n in range(1, n_events + 1)]
    started = time.perf_counter()
    for i in range(0, n_events, batch):
        await applier.apply(events[i : i + batch])
    return n_events / (time.perf_counter() - started)


def entity_rate(n: int = 5000) -> float:
    from engram_core.entities import extract_entities

    texts = [memory(i).content for i in range(n)]
    started = time.perf_counter()
    for t in texts:
        extract_entities(t)
    return n / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--embedder", choices=("hashing", "local"), default="hashing")
    parser.add_argument("--no-apply", action="store_true", help="time the NATS part alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_nats(Path(tmp) / "nats")
        try:
            rate = await loop_rate(
                server.url, args.events, args.batch, args.replicas, args.embedder, args.no_apply
            )
        finally:
            server.stop()
    alone = await applier_rate(args.events, args.batch, args.embedder)
    print(
        f"ingest loop: {rate:,.0f} events/s ({args.events} events, batch {args.batch}, "
        f"{args.replicas} replica(s), "
        f"{'no-op applier' if args.no_apply else args.embedder + ' embedder'}); "
        f"applier alone {alone:,.0f} events/s; "
        f"entity extraction {entity_rate():,.0f} texts/s"
    )


if __name__ == "__main__":
    asyncio.run(main())
